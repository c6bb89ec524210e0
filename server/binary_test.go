package server_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
)

// encode marshals a libOpenflow message once (buckets add their action
// length again on every MarshalBinary).
func encode(t *testing.T, m util.Message) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// antreaFlow is a FLOW_MOD as Antrea's ofnet builds it: NewFlowMod's
// defaults, match fields in the controller's order.
func antreaFlow(t *testing.T, table uint8, prio uint16, cookie uint64, match []*openflow15.MatchField, instrs ...openflow15.Instruction) client.Entry {
	t.Helper()
	fm := openflow15.NewFlowMod()
	fm.TableId, fm.Priority, fm.Cookie = table, prio, cookie
	for _, f := range match {
		fm.Match.AddField(*f)
	}
	for _, in := range instrs {
		fm.AddInstruction(in)
	}
	return client.FlowBytes(encode(t, fm))
}

func apply(acts ...openflow15.Action) openflow15.Instruction {
	in := openflow15.NewInstrApplyActions()
	for _, a := range acts {
		_ = in.AddAction(a, false)
	}
	return in
}

func ipv4() *openflow15.MatchField { return openflow15.NewEthTypeField(0x0800) }

// loadReg is Antrea's LoadReg: set_field on a 32-bit register with a mask,
// all ones for the whole register.
func loadReg(reg int, v, mask uint32) openflow15.Action {
	return openflow15.NewActionSetField(*openflow15.NewRegMatchFieldWithMask(reg, v, mask))
}

// antreaEntries are binary entries of every action class, in the shapes
// Antrea's ofnet produces, with the groups and meters they use.
func antreaEntries(t *testing.T) []client.Entry {
	ct := openflow15.NewNXActionConnTrack().Commit().Table(3).ZoneImm(65520)
	nat := openflow15.NewNXActionCTNAT()
	_ = nat.SetDNAT()
	nat.SetRangeIPv4Min(net.ParseIP("10.96.0.1"))
	nat.SetRangeIPv4Max(net.ParseIP("10.96.0.1"))
	ct.AddAction(nat, openflow15.NewActionSetField(*openflow15.NewCTMarkMatchField(0x21, nil)))
	note := openflow15.NewNXActionNote()
	note.Note = []byte("allow-web")
	ctrl := openflow15.NewNXActionController2()
	ctrl.AddMaxLen(128)
	ctrl.AddControllerID(1)
	ctrl.AddUserdata([]byte{1, 2, 3})
	ctrl.AddPause(true)
	// move:NXM_NX_REG1[0..15]->NXM_NX_REG2[0..15]; NXAST_REG_MOVE is refused
	// in OpenFlow 1.5, so ofnet sends copy_field.
	move := openflow15.NewActionCopyField(16, 0, 0, *openflow15.NewOxmId(openflow15.OXM_CLASS_NXM_1, 1, false, 4, 0),
		*openflow15.NewOxmId(openflow15.OXM_CLASS_NXM_1, 2, false, 4, 0))
	out := openflow15.NewActionOutput(2) // max_len 0xffff, as ofnet leaves it
	write := openflow15.NewInstrWriteActions()
	_ = write.AddAction(openflow15.NewActionOutput(1), false)

	// Antrea's Service group: select buckets that load the endpoint into
	// full-width registers (all-ones mask) and resubmit.
	svc := openflow15.NewGroupMod()
	svc.GroupId, svc.Type = 10, openflow15.GT_SELECT
	for i := range 3 {
		bk := openflow15.NewBucket(uint32(i))
		bk.AddProperty(openflow15.NewGroupBucketPropWeight(100))
		bk.AddAction(loadReg(3, 0x0a000001+uint32(i), 0xffffffff))
		bk.AddAction(loadReg(4, 0x50000+8080, 0x7ffff))
		bk.AddAction(openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, 42))
		svc.AddBucket(*bk)
	}
	// A dp_hash select group (selection_method) and a flood group.
	hash := openflow15.NewGroupMod()
	hash.GroupId, hash.Type = 11, openflow15.GT_SELECT
	hash.Properties = append(hash.Properties, openflow15.NewNTRSelectionMethod(openflow15.NTR_DP_HASH, 0))
	for i := range 2 {
		bk := openflow15.NewBucket(uint32(i))
		bk.AddAction(openflow15.NewActionOutput(uint32(i + 1)))
		hash.AddBucket(*bk)
	}
	// A hash select group hashing fields given out of OVS's order, one with
	// a partial mask (libOpenflow carries the mask as the field's value).
	fields := openflow15.NewGroupMod()
	fields.GroupId, fields.Type = 13, openflow15.GT_SELECT
	fields.Properties = append(fields.Properties, openflow15.NewNTRSelectionMethod(openflow15.NTR_HASH, 3,
		*openflow15.NewTcpDstField(0xffff), *openflow15.NewIpv4DstField(net.IP{255, 255, 255, 0}, nil),
		*openflow15.NewIpv4SrcField(net.IP{255, 255, 255, 255}, nil)))
	for i := range 2 {
		bk := openflow15.NewBucket(uint32(i))
		bk.AddProperty(openflow15.NewGroupBucketPropWeight(uint16(10 * (i + 1))))
		bk.AddAction(openflow15.NewActionOutput(uint32(i + 1)))
		fields.AddBucket(*bk)
	}
	flood := openflow15.NewGroupMod()
	flood.GroupId, flood.Type = 12, openflow15.GT_ALL
	for i := range 2 {
		bk := openflow15.NewBucket(uint32(i))
		bk.AddAction(openflow15.NewActionOutput(uint32(i + 1)))
		flood.AddBucket(*bk)
	}
	meter := openflow15.NewMeterMod()
	meter.MeterId, meter.Flags = 5, openflow15.MF_PKTPS|openflow15.MF_BURST
	band := openflow15.NewMeterBandDrop()
	band.Rate, band.BurstSize = 100, 200
	meter.AddMeterBand(band)

	// Antrea's Service session affinity: learn a flow that sends the
	// client back to the same endpoint.
	field := func(name string) *openflow15.MatchField {
		f, err := openflow15.FindFieldHeaderByName(name, false)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	learnSpec := func(h *openflow15.NXLearnSpecHeader, src, dst string, ofs uint16, value []byte) *openflow15.NXLearnSpec {
		sp := &openflow15.NXLearnSpec{Header: h, DstField: &openflow15.NXLearnSpecField{Field: field(dst), Ofs: ofs}, SrcValue: value}
		if src != "" {
			sp.SrcField = &openflow15.NXLearnSpecField{Field: field(src)}
		}
		return sp
	}
	learn := openflow15.NewNXActionLearn()
	learn.HardTimeout, learn.Priority, learn.Cookie, learn.TableID = 300, 200, 0x5, 4
	learn.Flags = 0x2 // NX_LEARN_F_DELETE_LEARNED
	learn.LearnSpecs = []*openflow15.NXLearnSpec{
		// eth_type and ip_proto as values: OVS checks a learned match's
		// prerequisites against the values it learns, not copied fields.
		learnSpec(openflow15.NewLearnHeaderMatchFromValue(16), "", "NXM_OF_ETH_TYPE", 0, []byte{0x08, 0x00}),
		learnSpec(openflow15.NewLearnHeaderMatchFromValue(8), "", "NXM_OF_IP_PROTO", 0, []byte{0, 6}),
		learnSpec(openflow15.NewLearnHeaderMatchFromField(32), "NXM_OF_IP_DST", "NXM_OF_IP_DST", 0, nil),
		learnSpec(openflow15.NewLearnHeaderMatchFromField(16), "NXM_OF_TCP_DST", "NXM_OF_TCP_DST", 0, nil),
		learnSpec(openflow15.NewLearnHeaderLoadFromField(32), "NXM_NX_REG3", "NXM_NX_REG3", 0, nil),
		learnSpec(openflow15.NewLearnHeaderLoadFromValue(3), "", "NXM_NX_REG4", 16, []byte{0, 1}),
	}
	// ct in the zone a register holds, with SNAT to a port range.
	snat := openflow15.NewNXActionCTNAT()
	_ = snat.SetSNAT()
	_ = snat.SetRandom()
	snat.SetRangeIPv4Min(net.ParseIP("192.168.1.1"))
	snat.SetRangeIPv4Max(net.ParseIP("192.168.1.2"))
	pmin, pmax := uint16(40000), uint16(50000)
	snat.SetRangeProtoMin(&pmin)
	snat.SetRangeProtoMax(&pmax)
	ctReg := openflow15.NewNXActionConnTrack().Commit().Table(4).ZoneRange(field("NXM_NX_REG6"), openflow15.NewNXRange(0, 15))
	ctReg.AddAction(snat)
	mac, _ := net.ParseMAC("aa:bb:cc:dd:ee:01")
	vlan := []*openflow15.MatchField{openflow15.NewVlanIdField(100|0x1000, nil), ipv4()}

	tcp := func(port uint16) []*openflow15.MatchField {
		// L4 first: not OVS's order.
		return []*openflow15.MatchField{openflow15.NewTcpDstField(port), openflow15.NewIpProtoField(6), ipv4()}
	}
	return []client.Entry{
		client.GroupBytes(encode(t, svc)),
		client.GroupBytes(encode(t, hash)),
		client.GroupBytes(encode(t, flood)),
		client.GroupBytes(encode(t, fields)),
		client.MeterBytes(encode(t, meter)),
		antreaFlow(t, 0, 200, 1, []*openflow15.MatchField{ipv4()}, apply(ct)),
		antreaFlow(t, 1, 200, 1, tcp(80), apply(note, loadReg(0, 0x1, 0xffffffff), loadReg(1, 0x10, 0xf0)),
			openflow15.NewInstrGotoTable(2)),
		antreaFlow(t, 1, 190, 1, tcp(81), apply(openflow15.NewNXActionConjunction(1, 2, 7))),
		antreaFlow(t, 1, 180, 1, tcp(82), apply(openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, 5))),
		antreaFlow(t, 2, 200, 1, tcp(83), apply(ctrl)),
		antreaFlow(t, 2, 190, 1, tcp(84), apply(move, out)),
		antreaFlow(t, 2, 180, 1, tcp(85), apply(openflow15.NewActionMeter(5), openflow15.NewActionGroup(10))),
		antreaFlow(t, 2, 170, 1, tcp(86), apply(openflow15.NewActionDecNwTtl(), openflow15.NewActionGroup(11))),
		antreaFlow(t, 2, 160, 1, tcp(87), apply(openflow15.NewActionPushVlan(0x8100),
			openflow15.NewActionSetField(*openflow15.NewVlanIdField(100|0x1000, nil)), openflow15.NewActionGroup(12))),
		antreaFlow(t, 2, 150, 1, tcp(88), apply(openflow15.NewOutputFromField(openflow15.NewRegMatchFieldWithMask(1, 0, 0), 15))),
		antreaFlow(t, 2, 140, 1, tcp(89), write),
		antreaFlow(t, 2, 130, 1, tcp(90), apply(learn)),
		antreaFlow(t, 3, 200, 1, tcp(91), apply(ctReg)),
		antreaFlow(t, 3, 190, 1, tcp(92), apply(openflow15.NewActionSetField(*openflow15.NewEthDstField(mac, nil)),
			openflow15.NewActionSetField(*openflow15.NewTunnelIpv4DstField(net.ParseIP("10.10.0.2"), nil)), out)),
		antreaFlow(t, 3, 180, 1, vlan, apply(openflow15.NewActionPopVlan(), out)),
		// An action flowstate cannot print (MPLS): kept as sent, compared as OVS dumps it.
		antreaFlow(t, 3, 100, 1, []*openflow15.MatchField{ipv4()}, apply(openflow15.NewActionPushMpls(0x8847), out)),
	}
}

// TestBinaryEntriesCompareClean: binary entries of every action class, as
// Antrea's ofnet builds them, are accepted, installed, and compare equal to
// what the switch dumps: reconcile after reconcile sends nothing and Diff is
// clean; List prints them as text (groups with selection_method included).
func TestBinaryEntriesCompareClean(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	es := antreaEntries(t)
	applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "antrea"}, es...)
	if err != nil {
		t.Fatal(err)
	}
	if !applied {
		t.Fatal("put not applied")
	}
	e.wantClean(ctx, "after put")
	listed, err := e.c.List(ctx, client.Filter{Bridge: "br-int"})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, l := range listed {
		if strings.Contains(l.Text, "unprintable") && l.Kind != entry.KindFlow {
			t.Errorf("%s printed as hex: %s", l.Kind, l.Text)
		}
		text.WriteString(l.Text + "\n")
	}
	for _, want := range []string{"selection_method=dp_hash", "selection_method=hash,selection_method_param=3,fields(ip_src,ip_dst=255.255.255.0,tcp_dst)", "note:", "set_field:0xa000001->reg3", "controller("} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("List does not show %q:\n%s", want, text.String())
		}
	}
}

// serviceBuckets returns n buckets of Antrea's Service group, ids from first.
func serviceBuckets(first, n int) []openflow15.Bucket {
	bs := make([]openflow15.Bucket, n)
	for i := range bs {
		bk := openflow15.NewBucket(uint32(first + i))
		bk.AddProperty(openflow15.NewGroupBucketPropWeight(100))
		bk.AddAction(loadReg(3, 0x0a000000+uint32(first+i), 0xffffffff))
		bk.AddAction(loadReg(4, 0x50000+8080, 0x7ffff))
		bk.AddAction(openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, 42))
		bs[i] = *bk
	}
	return bs
}

// serviceGroupMod is a GROUP_MOD of group id with buckets: an ADD, or an
// INSERT_BUCKET at the end, as ofnet splits a group of more than 800
// buckets.
func serviceGroupMod(t *testing.T, id uint32, insert bool, buckets []openflow15.Bucket, props ...util.Message) []byte {
	t.Helper()
	gm := openflow15.NewGroupMod()
	gm.GroupId, gm.Type = id, openflow15.GT_SELECT
	if insert {
		gm.Command, gm.CommandBucketId = openflow15.OFPGC_INSERT_BUCKET, openflow15.OFPG_BUCKET_LAST
	}
	gm.Properties = props
	for _, b := range buckets {
		gm.AddBucket(b)
	}
	b := encode(t, gm)
	if int(gm.Len()) != len(b) || len(b) > 65519 {
		t.Fatalf("GROUP_MOD of %d buckets: %d bytes, Len %d: too large for one message", len(buckets), len(b), gm.Len())
	}
	return b
}

// TestLargeGroups: groups of 2,000 buckets, declared as an ADD entry and
// INSERT_BUCKET entries the server joins, as one entry holding ADD and
// INSERT_BUCKET messages (with a selection_method), and as text, are
// installed, compare clean with what the switch dumps (OVS 3.1 wraps their
// lengths), are replayed after a vswitchd restart, and List prints each as
// one group.
func TestLargeGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n = 2000
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)

	// Group 20: ADD of 800 buckets, then INSERT_BUCKET entries of 800 and 400.
	es := []client.Entry{
		client.GroupBytes(serviceGroupMod(t, 20, false, serviceBuckets(0, 800))),
		client.GroupBytes(serviceGroupMod(t, 20, true, serviceBuckets(800, 800))),
		client.GroupBytes(serviceGroupMod(t, 20, true, serviceBuckets(1600, 400))),
	}
	// Group 21: one entry holding the three messages, with dp_hash.
	var whole []byte
	whole = append(whole, serviceGroupMod(t, 21, false, serviceBuckets(0, 700), openflow15.NewNTRSelectionMethod(openflow15.NTR_DP_HASH, 0))...)
	whole = append(whole, serviceGroupMod(t, 21, true, serviceBuckets(700, 700))...)
	whole = append(whole, serviceGroupMod(t, 21, true, serviceBuckets(1400, 600))...)
	es = append(es, client.GroupBytes(whole))
	// Group 22: text.
	var text strings.Builder
	text.WriteString("group_id=22,type=select")
	for i := range n {
		fmt.Fprintf(&text, ",bucket=bucket_id:%d,weight:100,actions=set_field:%#x->reg3,resubmit(,42)", i, 0x0a000000+i)
	}
	es = append(es, client.GroupText(text.String()),
		antreaFlow(t, 0, 100, 0, []*openflow15.MatchField{ipv4()}, apply(openflow15.NewActionGroup(20))))
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "antrea"}, es...); err != nil || !applied {
		t.Fatalf("put: applied %v, %v", applied, err)
	}
	e.wantClean(ctx, "after put")

	listed, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Kind: entry.KindGroup})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 3 {
		t.Fatalf("List: %d groups, want 3", len(listed))
	}
	for _, g := range listed {
		if got := strings.Count(g.Text, "bucket="); got != n {
			t.Errorf("List prints %d buckets of %.40s..., want %d", got, g.Text, n)
		}
		if len(g.OpenFlow) <= 65535 {
			t.Errorf("%.40s...: stored in %d bytes: not large", g.Text, len(g.OpenFlow))
		}
	}
	if !strings.HasPrefix(listed[1].Text, "group_id=21,type=select,selection_method=dp_hash,bucket=") {
		t.Errorf("group 21 prints as %.80s...", listed[1].Text)
	}

	// vswitchd restarts empty; flowstated replays the groups from its store.
	e.replayAfterRestart(ctx)
	e.wantClean(ctx, "after the replay")

	// A change to one bucket of group 22 goes as MODIFY plus INSERT_BUCKETs.
	changed := strings.Replace(text.String(), "bucket_id:1999,weight:100", "bucket_id:1999,weight:7", 1)
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "antrea"}, client.GroupText(changed)); err != nil || !applied {
		t.Fatalf("put of the changed group: applied %v, %v", applied, err)
	}
	e.wantClean(ctx, "after the change")
	listed, err = e.c.List(ctx, client.Filter{Bridge: "br-int", Kind: entry.KindGroup})
	if err != nil || len(listed) != 3 || !strings.Contains(listed[2].Text, "bucket_id:1999,weight:7,") {
		t.Fatalf("after the change: %d groups, %v", len(listed), err)
	}
}

// replayAfterRestart restarts vswitchd, gated, while flowstated is down, as
// deploy/ovs-restart does, and returns once flowstated restored br-int from
// its store and released the flag.
func (e *env) replayAfterRestart(ctx context.Context) {
	e.t.Helper()
	e.Stop()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		e.t.Fatal(err)
	}
	e.Start(ctx)
	e.waitRestored(ctx)
}

// wantClean checks that br-int equals its desired state byte for byte:
// reconcile after reconcile sends nothing, and Diff is empty.
func (e *env) wantClean(ctx context.Context, when string) {
	e.t.Helper()
	for i := range 2 {
		resp, err := e.c.Reconcile(ctx, "br-int")
		if err != nil {
			e.t.Fatal(err)
		}
		if r := resp[0].LastReplay; r.Messages != 0 || r.Error != "" {
			changes, _ := e.c.Diff(ctx, "br-int")
			e.t.Fatalf("%s: reconcile %d sent %d messages (%v): spurious differences:\n%s", when, i, r.Messages, r.Error, firstDifferences(changes))
		}
	}
	if changes, err := e.c.Diff(ctx, "br-int"); err != nil || len(changes) != 0 {
		e.t.Fatalf("%s: diff: %d changes (%v):\n%s", when, len(changes), err, firstDifferences(changes))
	}
}

// firstDifferences shows where each change's desired and actual texts first
// differ: a group of 2,000 buckets is too long to read whole.
func firstDifferences(changes []client.Change) string {
	var b strings.Builder
	for _, c := range changes {
		d, a := c.Desired, c.Actual
		k := 0
		for k < len(d) && k < len(a) && d[k] == a[k] {
			k++
		}
		fmt.Fprintf(&b, "%s %s at byte %d: desired ...%s... actual ...%s...\n", c.Op, c.Kind, k,
			d[max(0, k-60):min(len(d), k+60)], a[max(0, k-60):min(len(a), k+60)])
	}
	return b.String()
}

// nxAction is a Nicira extension action of the given subtype and body, as a
// controller encodes one that libOpenflow has no type for.
type nxAction []byte

func newNXAction(subtype uint16, body ...byte) *nxAction {
	b := []byte{0xff, 0xff, 0, 0, 0, 0, 0x23, 0x20, byte(subtype >> 8), byte(subtype)}
	b = append(b, body...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	b[3] = byte(len(b))
	a := nxAction(b)
	return &a
}

func (a *nxAction) Len() uint16                    { return uint16(len(*a)) }
func (a *nxAction) MarshalBinary() ([]byte, error) { return *a, nil }
func (a *nxAction) UnmarshalBinary(b []byte) error { *a = append((*a)[:0], b...); return nil }
func (a *nxAction) Header() *openflow15.ActionHeader {
	return &openflow15.ActionHeader{Type: 0xffff, Length: a.Len()}
}

// TestLearnedForms: actions flowstate cannot print that OVS rewrites
// (NXAST_SET_TUNNEL and SET_TUNNEL64 come back as set_field:->tun_id,
// NXAST_WRITE_METADATA as the write_metadata instruction) do not drift: the
// form the switch gave them after the put is learned, so reconcile after
// reconcile sends nothing, also after flowstated restarts and after
// vswitchd restarts and is replayed.
func TestLearnedForms(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	es := []client.Entry{
		antreaFlow(t, 4, 100, 0, []*openflow15.MatchField{ipv4()}, apply(newNXAction(2, 0, 0, 0, 0, 0, 5))),
		antreaFlow(t, 4, 90, 0, []*openflow15.MatchField{ipv4()}, apply(newNXAction(9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6))),
		antreaFlow(t, 4, 80, 0, []*openflow15.MatchField{ipv4()}, apply(newNXAction(22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7,
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))),
	}
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "tunnels"}, es...); err != nil || !applied {
		t.Fatalf("put: applied %v, %v", applied, err)
	}
	e.wantClean(ctx, "after put")

	e.Stop()
	e.Start(ctx)
	e.WaitConverged(ctx)
	e.wantClean(ctx, "after flowstated restarted")

	e.replayAfterRestart(ctx)
	e.wantClean(ctx, "after vswitchd restarted")
	flows, err := e.sb.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(flows, "\n"); !strings.Contains(got, "set_field:0x5->tun_id") || !strings.Contains(got, "write_metadata:0x7") {
		t.Fatalf("br-int holds\n%s", got)
	}
}
