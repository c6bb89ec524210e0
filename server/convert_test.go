package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A controller's FLOW_MOD with match fields out of OVS's order lands in the
// same canonical form, with the same identity, as the text of the flow.
func TestEncodedFlowIsCanonicalised(t *testing.T) {
	text := "table=3,priority=200,tcp,nw_dst=10.0.0.2,tp_dst=80,actions=goto_table:4"

	fm := openflow15.NewFlowMod()
	fm.TableId, fm.Priority, fm.Cookie = 3, 200, 0
	// L4 first, then L3, then eth_type: not OVS's order.
	fm.Match.AddField(*openflow15.NewTcpDstField(80))
	fm.Match.AddField(*openflow15.NewIpv4DstField([]byte{10, 0, 0, 2}, nil))
	fm.Match.AddField(*openflow15.NewIpProtoField(6))
	fm.Match.AddField(*openflow15.NewEthTypeField(0x0800))
	fm.AddInstruction(openflow15.NewInstrGotoTable(4))
	raw, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := toEntry(&flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Openflow{Openflow: raw}}, false)
	if err != nil {
		t.Fatal(err)
	}
	fromText, err := toEntry(&flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Text{Text: text}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(raw[8:], fromText.Payload[8:]) {
		t.Fatal("the test's FLOW_MOD is already canonical; it proves nothing")
	}
	if !bytes.Equal(got.ID, fromText.ID) || !bytes.Equal(got.Payload, fromText.Payload) {
		t.Fatalf("encoded flow:\n%x\ntext:\n%x", got.Payload, fromText.Payload)
	}
}

// A large message is converted on every CPU and comes out as on one: the
// same entries in the same order, and the first refused entry named by its
// place in the request.
func TestAppendEntriesParallel(t *testing.T) {
	in := make([]*flowstatev1.Entry, 2000)
	for i := range in {
		in[i] = &flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW,
			Body: &flowstatev1.Entry_Text{Text: fmt.Sprintf("table=1,priority=%d,ip,actions=drop", i+1)}}
	}
	prefix := []entry.Entry{{Kind: entry.KindFlow, ID: []byte{9}}}
	seq, err := appendEntries(append([]entry.Entry(nil), prefix...), "m", in, false)
	if err != nil {
		t.Fatal(err)
	}
	par, err := appendEntriesParallel(append([]entry.Entry(nil), prefix...), "m", in)
	if err != nil || len(par) != len(seq) {
		t.Fatalf("parallel: %d entries, %v; want %d", len(par), err, len(seq))
	}
	for i := range seq {
		if !seq[i].Equal(par[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
	in[1500] = &flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Text{Text: "table=1,actions=bogus"}}
	in[1700] = &flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Text{Text: "table=1,actions=bogus2"}}
	_, err = appendEntriesParallel(append([]entry.Entry(nil), prefix...), "m", in)
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 1501 || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("refused entry: %v, want entries[1501] (after the 1 before the message)", err)
	}
}

// Entries vswitchd cannot take are refused at declaration, text and encoded
// alike, with an error that names the entry and OVS's limit: the 2,000-spec
// learn that aborted vswitchd at every replay, and nesting past OVS's
// MAX_OFPACT_PARSE_DEPTH, up to a megabyte of it (refused in one pass:
// ofctl.TestDeepNestingRefusedEarly counts its work).
func TestRefusedAtDeclaration(t *testing.T) {
	flow := func(text string) *flowstatev1.Entry {
		return &flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Text{Text: text}}
	}
	encoded := func(kind flowstatev1.EntryKind, msg []byte) *flowstatev1.Entry {
		return &flowstatev1.Entry{Kind: kind, Body: &flowstatev1.Entry_Openflow{Openflow: msg}}
	}
	specs := strings.Repeat(",NXM_OF_VLAN_TCI[0..11]", 2000)
	deep := strings.Repeat("clone(", (1<<20-20)/7) + "output:1" + strings.Repeat(")", (1<<20-20)/7)
	output := []byte{0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, c := range []struct {
		name  string
		entry *flowstatev1.Entry
		limit string
	}{
		{"learn of 2,000 specs, text", flow("actions=learn(table=1" + specs + ")"), "input too big: learn with 2000 specs takes 80048 bytes"},
		{"learn of 2,000 specs, encoded", encoded(flowstatev1.EntryKind_ENTRY_KIND_FLOW, flowModApplying(learnAction(2000))),
			"input too big: learn with 2000 specs takes 80048 bytes"},
		{"1 MiB of nested clones, text", flow("actions=" + deep), "action nested too deeply"},
		{"nested clones, encoded", encoded(flowstatev1.EntryKind_ENTRY_KIND_FLOW, flowModApplying(nestClones(150, output))),
			"action nested too deeply"},
		{"learn of 2,000 specs in a bucket, text", &flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_GROUP,
			Body: &flowstatev1.Entry_Text{Text: "group_id=1,type=all,bucket=actions=learn(table=1" + specs + ")"}}, "input too big"},
		{"nested clones in a bucket, encoded", encoded(flowstatev1.EntryKind_ENTRY_KIND_GROUP, groupModBucket(nestClones(150, output))),
			"action nested too deeply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok := flow("priority=1,actions=drop")
			_, err := toEntries("m", []*flowstatev1.Entry{ok, c.entry}, false)
			var ee *errdefs.EntryError
			if !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v: want entry 1 refused as invalid", err)
			}
			if !strings.Contains(err.Error(), c.limit) || len(err.Error()) > 500 {
				t.Fatalf("error %q: want %q, in a few lines", err, c.limit)
			}
		})
	}
}

// nxAction is a Nicira action of subtype sub with body after its subtype,
// padded to 8 bytes.
func nxAction(sub uint16, body []byte) []byte {
	a := []byte{0xff, 0xff, 0, 0, 0, 0, 0x23, 0x20, byte(sub >> 8), byte(sub)}
	a = append(a, body...)
	a = append(a, make([]byte, (8-len(a)%8)%8)...)
	a[2], a[3] = byte(len(a)>>8), byte(len(a))
	return a
}

// learnAction is learn(table=1) with n specs NXM_OF_VLAN_TCI[0..11].
func learnAction(n int) []byte {
	body := make([]byte, 22) // timeouts, priority, cookie, flags, table, fin timeouts
	body[16] = 1             // table_id
	for range n {
		body = append(body, 0x00, 0x0c, 0, 0, 0x08, 0x02, 0, 0, 0, 0, 0x08, 0x02, 0, 0)
	}
	return nxAction(16, body)
}

// nestClones wraps inner in n clone actions.
func nestClones(n int, inner []byte) []byte {
	for range n {
		inner = nxAction(42, append(make([]byte, 6), inner...))
	}
	return inner
}

// flowModApplying is an OpenFlow 1.5 FLOW_MOD ADD matching everything that
// applies acts.
func flowModApplying(acts []byte) []byte {
	b := []byte{6, 14, 0, 0, 0, 0, 0, 0}
	b = append(b, make([]byte, 16)...)                            // cookie, cookie_mask
	b = append(b, 0, 0, 0, 0, 0, 0, 0x80, 0)                      // table, command, timeouts, priority
	b = append(b, 0xff, 0xff, 0xff, 0xff)                         // buffer_id
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // out_port, out_group
	b = append(b, 0, 0, 0, 0)                                     // flags, importance
	b = append(b, 0, 1, 0, 4, 0, 0, 0, 0)                         // empty OXM match
	n := 8 + len(acts)
	b = append(b, 0, 4, byte(n>>8), byte(n), 0, 0, 0, 0)
	b = append(b, acts...)
	b[2], b[3] = byte(len(b)>>8), byte(len(b))
	return b
}

// groupModBucket is an OpenFlow 1.5 GROUP_MOD ADD of group 1, type all,
// with one bucket (id 0) of acts.
func groupModBucket(acts []byte) []byte {
	b := []byte{6, 15, 0, 0, 0, 0, 0, 0}
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 1) // command ADD, type all, pad, group 1
	bl := 8 + len(acts)
	b = append(b, byte(bl>>8), byte(bl), 0, 0, 0xff, 0xff, 0xff, 0xff)                    // bucket_array_len, pad, command_bucket_id
	b = append(b, byte(bl>>8), byte(bl), byte(len(acts)>>8), byte(len(acts)), 0, 0, 0, 0) // len, action_array_len, bucket_id
	b = append(b, acts...)
	b[2], b[3] = byte(len(b)>>8), byte(len(b))
	return b
}
