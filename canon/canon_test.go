package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"

	"github.com/flowstate-io/flowstate/entry"
)

func marshal(t testing.TB, m util.Message) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serviceGroup is Antrea's Service group: select buckets that set full-width
// registers with an all-ones mask (LoadReg), which OVS stores unmasked.
func serviceGroup(t testing.TB, id uint32, cmd uint16, first, n int) []byte {
	gm := openflow15.NewGroupMod()
	gm.GroupId, gm.Type, gm.Command = id, openflow15.GT_SELECT, cmd
	if cmd == openflow15.OFPGC_INSERT_BUCKET {
		gm.CommandBucketId = openflow15.OFPG_BUCKET_LAST
	}
	for i := first; i < first+n; i++ {
		bk := openflow15.NewBucket(uint32(i))
		bk.AddProperty(openflow15.NewGroupBucketPropWeight(100))
		bk.AddAction(openflow15.NewActionSetField(*openflow15.NewRegMatchFieldWithMask(3, 0x0a000000+uint32(i), 0xffffffff)))
		bk.AddAction(openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, 42))
		gm.AddBucket(*bk)
	}
	return marshal(t, gm)
}

func serviceText(id, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "group_id=%d,type=select", id)
	for i := range n {
		fmt.Fprintf(&b, ",bucket=bucket_id:%d,weight:100,actions=set_field:%#x->reg3,resubmit(,42)", i, 0x0a000000+i)
	}
	return b.String()
}

func mustDecode(t testing.TB, kind entry.Kind, msg []byte) []byte {
	t.Helper()
	p, _, err := Decode(kind, msg)
	if err != nil {
		t.Fatalf("decode %s: %v", kind, err)
	}
	return p
}

func mustParse(t testing.TB, kind entry.Kind, text string) []byte {
	t.Helper()
	p, _, err := Parse(kind, text)
	if err != nil {
		t.Fatalf("parse %.60s: %v", text, err)
	}
	return p
}

// The Service group as Antrea sends it lands in the form ovs-ofctl gives
// its text (which is OVS's, checked against vswitchd in ofctl's tests).
func TestServiceGroupIsCanonicalised(t *testing.T) {
	raw := serviceGroup(t, 10, openflow15.OFPGC_ADD, 0, 3)
	got, want := mustDecode(t, entry.KindGroup, raw), mustParse(t, entry.KindGroup, serviceText(10, 3))
	if bytes.Equal(raw, want) {
		t.Fatal("the test's GROUP_MOD is already canonical; it proves nothing")
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("decoded\n%x\nwant (text)\n%x", got, want)
	}
	if again := mustDecode(t, entry.KindGroup, got); !bytes.Equal(again, got) {
		t.Fatalf("canonical form is not a fixed point:\n%x\n%x", got, again)
	}
}

// flowMod encodes a FLOW_MOD with match fields in the given (non-OVS) order.
func flowMod(t testing.TB, table uint8, fields []*openflow15.MatchField, instrs ...openflow15.Instruction) []byte {
	fm := openflow15.NewFlowMod()
	fm.TableId, fm.Priority = table, 100
	for _, f := range fields {
		fm.Match.AddField(*f)
	}
	for _, in := range instrs {
		fm.AddInstruction(in)
	}
	return marshal(t, fm)
}

// rawAction is an action given as its bytes.
type rawAction struct{ b []byte }

func (r *rawAction) Header() *openflow15.ActionHeader {
	return &openflow15.ActionHeader{Type: uint16(r.b[0])<<8 | uint16(r.b[1]), Length: uint16(len(r.b))}
}
func (r *rawAction) Len() uint16                    { return uint16(len(r.b)) }
func (r *rawAction) MarshalBinary() ([]byte, error) { return r.b, nil }
func (r *rawAction) UnmarshalBinary(b []byte) error { r.b = b; return nil }

func apply(acts ...openflow15.Action) openflow15.Instruction {
	in := openflow15.NewInstrApplyActions()
	for _, a := range acts {
		_ = in.AddAction(a, false)
	}
	return in
}

func tcpDst80() []*openflow15.MatchField {
	return []*openflow15.MatchField{openflow15.NewTcpDstField(80), openflow15.NewIpProtoField(6), openflow15.NewEthTypeField(0x0800)}
}

// A flow with an action ofctl cannot print is accepted: its match and the
// actions ofctl knows are canonical, the unknown action is kept as sent, and
// the output keeps the max_len ovs-ofctl's text would lose.
func TestFlowWithOpaqueAction(t *testing.T) {
	raw := flowMod(t, 1, tcpDst80(), apply(openflow15.NewActionPushMpls(0x8847),
		openflow15.NewActionSetField(*openflow15.NewRegMatchFieldWithMask(3, 7, 0xffffffff)),
		openflow15.NewActionOutput(2)), openflow15.NewInstrGotoTable(4))
	got := mustDecode(t, entry.KindFlow, raw)
	want := mustParse(t, entry.KindFlow, "table=1,priority=100,tcp,tp_dst=80,actions=set_field:0x7->reg3,output:2,goto_table:4")
	wantMatch := want[48 : 48+(int(binary.BigEndian.Uint16(want[50:]))+7)&^7]
	if gotMatch := got[48 : 48+len(wantMatch)]; !bytes.Equal(gotMatch, wantMatch) {
		t.Fatalf("match\n%x\nwant\n%x", gotMatch, wantMatch)
	}
	pushMpls := []byte{0, 19, 0, 8, 0x88, 0x47, 0, 0}
	if !bytes.Contains(got, pushMpls) {
		t.Fatalf("push_mpls not kept as sent: %x", got)
	}
	// set_field unmasked as OVS stores it; output with max_len 0xffff.
	setReg3 := want[bytes.Index(want, []byte{0, 25, 0, 16}):][:16]
	if !bytes.Contains(got, setReg3) || !bytes.Contains(got, []byte{0, 0, 0, 16, 0, 0, 0, 2, 0xff, 0xff, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("actions not canonical: %x", got)
	}
	if again := mustDecode(t, entry.KindFlow, got); !bytes.Equal(again, got) {
		t.Fatalf("canonical form is not a fixed point:\n%x\n%x", got, again)
	}
}

// Encoded flows, groups and meters that OVS would refuse, or that could
// never compare equal to the switch, are refused with what is wrong.
func TestDecodeRefuses(t *testing.T) {
	ins := serviceGroup(t, 10, openflow15.OFPGC_INSERT_BUCKET, 3, 1)
	withProps := func() []byte {
		gm := openflow15.NewGroupMod()
		gm.GroupId, gm.Type, gm.Command, gm.CommandBucketId = 10, openflow15.GT_SELECT, openflow15.OFPGC_INSERT_BUCKET, openflow15.OFPG_BUCKET_LAST
		gm.Properties = append(gm.Properties, openflow15.NewNTRSelectionMethod(openflow15.NTR_DP_HASH, 0))
		return marshal(t, gm)
	}()
	other := serviceGroup(t, 11, openflow15.OFPGC_INSERT_BUCKET, 3, 1)
	badProp := serviceGroup(t, 10, openflow15.OFPGC_ADD, 0, 1)
	binary.BigEndian.PutUint16(badProp[len(badProp)-8:], 9) // the weight property becomes type 9
	dupField := flowMod(t, 0, []*openflow15.MatchField{openflow15.NewEthTypeField(0x0800), openflow15.NewEthTypeField(0x0800)})
	noPrereq := flowMod(t, 0, []*openflow15.MatchField{openflow15.NewTcpDstField(80)})
	backwards := flowMod(t, 5, tcpDst80(), openflow15.NewInstrGotoTable(2))
	for _, tc := range []struct {
		name string
		kind entry.Kind
		msg  []byte
		want string
	}{
		{"duplicate match field", entry.KindFlow, dupField, "OFPBMC_DUP_FIELD"},
		{"missing prerequisite", entry.KindFlow, noPrereq, "tcp_dst: OVS refuses a match field without its prerequisites"},
		{"goto an earlier table", entry.KindFlow, backwards, "OFPBIC_BAD_TABLE_ID"},
		{"INSERT_BUCKET alone", entry.KindGroup, ins, "want ADD (0)"},
		{"INSERT_BUCKET with properties", entry.KindGroup, append(serviceGroup(t, 10, 0, 0, 1), withProps...), "properties: they belong in the ADD"},
		{"INSERT_BUCKET of another group", entry.KindGroup, append(serviceGroup(t, 10, 0, 0, 1), other...), "INSERT_BUCKET of group 11 type 1, want group 10"},
		{"duplicate bucket id", entry.KindGroup, append(serviceGroup(t, 10, 0, 0, 4), ins...), "duplicate bucket id 3"},
		{"unknown bucket property", entry.KindGroup, badProp, "bucket property type 9"},
		{"too many buckets", entry.KindGroup, mustJoinPieces(t, MaxBuckets+1), "more than the 4092"},
		{"truncated", entry.KindMeter, []byte{6, 29, 0, 8}, "shorter than an OpenFlow header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode(tc.kind, tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// mustJoinPieces returns an ADD of 800 buckets followed by INSERT_BUCKETs
// of 800 each up to n buckets, as Antrea's ofnet splits a large group.
func mustJoinPieces(t testing.TB, n int) []byte {
	msg := serviceGroup(t, 20, openflow15.OFPGC_ADD, 0, min(n, 800))
	for first := 800; first < n; first += 800 {
		msg = append(msg, serviceGroup(t, 20, openflow15.OFPGC_INSERT_BUCKET, first, min(800, n-first))...)
	}
	return msg
}

// A group of 2,000 buckets has one canonical form whether it comes as text,
// as ADD and INSERT_BUCKET messages, joined piece by piece, or from a dump
// whose lengths wrapped; it is sent as messages that each fit a bundle.
func TestLargeGroup(t *testing.T) {
	const n = 2000
	fromText := mustParse(t, entry.KindGroup, serviceText(20, n))
	pieces := mustJoinPieces(t, n)
	if got := mustDecode(t, entry.KindGroup, pieces); !bytes.Equal(got, fromText) {
		t.Fatal("ADD + INSERT_BUCKET messages and text differ")
	}
	msgs, err := entry.SplitMessages(pieces)
	if err != nil {
		t.Fatal(err)
	}
	joined := mustDecode(t, entry.KindGroup, msgs[0])
	for _, m := range msgs[1:] {
		var opaque bool
		if joined, opaque, err = Join(joined, m); err != nil || opaque {
			t.Fatalf("join: opaque %v, %v", opaque, err)
		}
	}
	if !bytes.Equal(joined, fromText) {
		t.Fatal("joined entries and text differ")
	}
	out := Messages(entry.KindGroup, true, fromText)
	if len(out) < 2 {
		t.Fatalf("%d messages for %d bytes", len(out), len(fromText))
	}
	for i, m := range out {
		cmd := binary.BigEndian.Uint16(m[8:])
		if len(m) > MaxMessage || int(binary.BigEndian.Uint16(m[2:])) != len(m) || (i == 0) != (cmd == 1) || (i > 0) != (cmd == 3) {
			t.Fatalf("message %d: %d bytes, command %d", i, len(m), cmd)
		}
	}
	text, err := Format(entry.KindGroup, fromText)
	if err != nil || text != serviceText(20, n) {
		t.Fatalf("format: %v\n%.200s", err, text)
	}
	// The dump of the group: one ofp_group_desc, lengths modulo 65536.
	g, err := entry.GroupFromDesc(wrappedDesc(fromText))
	if err != nil {
		t.Fatal(err)
	}
	if dumped, err := g.Encode(); err != nil || !bytes.Equal(dumped, fromText) {
		t.Fatalf("dumped group differs (%v)", err)
	}
}

// wrappedDesc builds the ofp_group_desc OVS 3.1 sends for a canonical group
// payload: all buckets in one entry, its 16-bit lengths wrapped.
func wrappedDesc(payload []byte) []byte {
	msgs := entry.GroupMessages(payload)
	var buckets, props []byte
	for _, m := range msgs {
		blen := int(binary.BigEndian.Uint16(m[16:]))
		buckets = append(buckets, m[24:24+blen]...)
		props = append(props, m[24+blen:]...)
	}
	d := make([]byte, 16, 16+len(buckets)+len(props))
	d[2] = payload[10]
	copy(d[4:8], payload[12:16])
	binary.BigEndian.PutUint16(d[8:], uint16(len(buckets)))
	d = append(append(d, buckets...), props...)
	binary.BigEndian.PutUint16(d, uint16(len(d)))
	return d
}

// Meters print and parse back; an unknown band is kept as sent.
func TestMeter(t *testing.T) {
	mm := openflow15.NewMeterMod()
	mm.MeterId, mm.Flags = 5, openflow15.MF_PKTPS|openflow15.MF_BURST
	band := openflow15.NewMeterBandDrop()
	band.Rate, band.BurstSize = 100, 200
	mm.AddMeterBand(band)
	mm.Header.Xid = 77
	got := mustDecode(t, entry.KindMeter, marshal(t, mm))
	if want := mustParse(t, entry.KindMeter, "meter=5,pktps,burst,band=type=drop,rate=100,burst_size=200"); !bytes.Equal(got, want) {
		t.Fatalf("meter\n%x\nwant\n%x", got, want)
	}
}

// Opaque tells entries canon keeps in part as sent from those it knows
// whole, and Forms substitutes the form the switch taught, following a form
// learned for a form, and teaches nothing from equal payloads.
func TestOpaqueAndForms(t *testing.T) {
	known := mustParse(t, entry.KindFlow, "table=1,priority=100,ip,actions=output:2")
	// An NX action of a subtype no version of ofctl knows (OVS would judge it).
	mpls := mustDecode(t, entry.KindFlow, flowMod(t, 1, []*openflow15.MatchField{openflow15.NewEthTypeField(0x0800)},
		apply(&rawAction{b: []byte{0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}})))
	if Opaque(entry.KindFlow, known) || !Opaque(entry.KindFlow, mpls) {
		t.Fatalf("opaque: known %v, unknown NX action %v", Opaque(entry.KindFlow, known), Opaque(entry.KindFlow, mpls))
	}
	var none *Forms
	es := []entry.Entry{{Kind: entry.KindFlow, Payload: mpls}, {Kind: entry.KindFlow, Payload: known}}
	if got := none.Apply(es); &got[0] != &es[0] {
		t.Fatal("nil Forms changed the entries")
	}
	f := NewForms(nil)
	if _, isNew := f.Learn(known, known); isNew {
		t.Fatal("learned from equal payloads")
	}
	form1, form2 := append(bytes.Clone(mpls), 1), append(bytes.Clone(mpls), 2)
	k, isNew := f.Learn(mpls, form1)
	if !isNew || k != sha256Sum(mpls) {
		t.Fatal("first form not learned")
	}
	if _, isNew := f.Learn(mpls, form1); isNew {
		t.Fatal("the same form learned twice")
	}
	f.Learn(form1, form2) // the switch changed its mind about form1
	got := f.Apply(es)
	if !bytes.Equal(got[0].Payload, form2) || !bytes.Equal(got[1].Payload, known) || !bytes.Equal(es[0].Payload, mpls) {
		t.Fatalf("apply: %x %x (entries given: %x)", got[0].Payload, got[1].Payload, es[0].Payload)
	}
	if again := NewForms(map[Key][]byte{sha256Sum(mpls): form2}).Apply(es); !bytes.Equal(again[0].Payload, form2) {
		t.Fatal("forms from the store not applied")
	}
}

func sha256Sum(b []byte) Key { return sha256.Sum256(b) }

// FromSwitch leaves a dumped flow without tun_metadata as it is (the same
// bytes, no re-encoding) and re-encodes one whose tun_metadata the switch
// stored at its option length, to what Parse makes of the same text.
func TestFromSwitch(t *testing.T) {
	plain := mustParse(t, entry.KindFlow, "table=1,priority=100,ip,actions=output:2")
	if got := FromSwitch(plain); &got[0] != &plain[0] {
		t.Fatal("a flow without tun_metadata was re-encoded")
	}
	wide := mustParse(t, entry.KindFlow, "priority=30,tun_metadata0=0x5,actions=drop")
	// The switch's form: the same field at a 4-byte option length.
	fm := openflow15.NewFlowMod()
	fm.Priority = 30
	fm.Match.AddField(openflow15.MatchField{Class: 1, Field: 40, Length: 4, Value: &openflow15.ByteArrayField{Data: []byte{0, 0, 0, 5}, Length: 4}})
	narrow, _, err := entry.Identify(entry.KindFlow, marshal(t, fm))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(narrow, wide) {
		t.Fatal("fixture: the narrow and wide forms are the same")
	}
	if got := FromSwitch(narrow); !bytes.Equal(got, wide) {
		t.Fatalf("FromSwitch(%x) = %x, want %x", narrow, got, wide)
	}
}
