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
