package restore

import (
	"encoding/binary"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// flowEnt is a canonical flow of table and priority that uses group and
// meter when they are not 0.
func flowEnt(t *testing.T, table uint8, prio uint16, group, meter uint32) entry.Entry {
	t.Helper()
	fm := openflow15.NewFlowMod()
	fm.TableId, fm.Priority = table, prio
	ia := openflow15.NewInstrApplyActions()
	if meter != 0 {
		_ = ia.AddAction(openflow15.NewActionMeter(meter), false)
	}
	if group != 0 {
		_ = ia.AddAction(openflow15.NewActionGroup(group), false)
	}
	fm.AddInstruction(ia)
	b, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	payload, id, err := entry.Identify(entry.KindFlow, b)
	if err != nil {
		t.Fatal(err)
	}
	return entry.Entry{Kind: entry.KindFlow, ID: id, Payload: payload, Module: "m"}
}

// groupEnt is a canonical GROUP_MOD ADD of group id.
func groupEnt(t *testing.T, id uint32) entry.Entry {
	t.Helper()
	b := make([]byte, 16)
	b[0], b[1] = 6, 15
	binary.BigEndian.PutUint16(b[2:], 16)
	binary.BigEndian.PutUint32(b[12:], id)
	payload, gid, err := entry.Identify(entry.KindGroup, b)
	if err != nil {
		t.Fatal(err)
	}
	return entry.Entry{Kind: entry.KindGroup, ID: gid, Payload: payload, Module: "m"}
}

func onSwitch(es ...entry.Entry) []actualEntry {
	out := make([]actualEntry, len(es))
	for i, e := range es {
		out[i] = actualEntry{kind: e.Kind, id: e.ID, payload: e.Payload}
	}
	return out
}

func TestPredictMissingReferences(t *testing.T) {
	declared, onlyOnSwitch := groupEnt(t, 6), groupEnt(t, 7)
	absent := flowEnt(t, 0, 1, 5, 0)         // group 5: nowhere
	fine := flowEnt(t, 0, 2, 6, 0)           // group 6: declared
	undeclared := flowEnt(t, 0, 3, 7, 0)     // group 7: on the switch, deleted by the plan
	quarantined := flowEnt(t, 0, 4, 0, 3)    // meter 3: declared but quarantined
	alreadySkipped := flowEnt(t, 0, 5, 5, 0) // skipped already: not predicted again
	meter3 := entry.Entry{Kind: entry.KindMeter, ID: entry.Ref{Kind: entry.KindMeter, ID: 3}.Key(), Module: "m"}
	desired := []entry.Entry{declared, meter3, absent, fine, undeclared, quarantined, alreadySkipped}
	skip := map[string]bool{key(entry.KindMeter, meter3.ID): true, key(entry.KindFlow, alreadySkipped.ID): true}

	preds := predictRefusals(desired, onSwitch(onlyOnSwitch), skip, nil)
	want := map[string]string{
		key(entry.KindFlow, absent.ID):      "OFPBAC_BAD_OUT_GROUP (predicted): uses group 5, which is neither declared nor on the switch",
		key(entry.KindFlow, undeclared.ID):  "OFPBAC_BAD_OUT_GROUP (predicted): uses group 7, which is neither declared nor on the switch",
		key(entry.KindFlow, quarantined.ID): "OFPMMFC_INVALID_METER (predicted): uses meter 3, which is quarantined",
	}
	if len(preds) != len(want) {
		t.Fatalf("predicted %d refusals, want %d: %v", len(preds), len(want), preds)
	}
	for k, reason := range want {
		if preds[k].reason != reason {
			t.Errorf("reason %q, want %q", preds[k].reason, reason)
		}
	}
}

func TestPredictTableLimit(t *testing.T) {
	// Table 7 takes 4 flows. The switch holds two declared flows there
	// (they stay and count) and an undeclared one (the plan deletes it
	// before the adds: it does not count).
	held := []entry.Entry{flowEnt(t, 7, 100, 0, 0), flowEnt(t, 7, 101, 0, 0)}
	undeclared := flowEnt(t, 7, 200, 0, 0)
	var desired []entry.Entry
	desired = append(desired, held...)
	// New flows, declared in reverse key order: key order decides, not
	// the order of declaration.
	for p := uint16(5); p >= 1; p-- {
		desired = append(desired, flowEnt(t, 7, p, 0, 0))
	}
	usesAbsentGroup := flowEnt(t, 7, 0, 9, 0)
	desired = append(desired, usesAbsentGroup)
	for p := uint16(1); p <= 5; p++ {
		desired = append(desired, flowEnt(t, 8, p, 0, 0), flowEnt(t, 9, p, 0, 0))
	}
	limits := []ovsconfig.TableLimit{{Table: 7, FlowLimit: 4}, {Table: 8, FlowLimit: 2, Evict: true}}

	preds := predictRefusals(desired, onSwitch(append(held, undeclared)...), nil, limits)
	if p := preds[key(entry.KindFlow, usesAbsentGroup.ID)]; !strings.HasPrefix(p.reason, "OFPBAC_BAD_OUT_GROUP") {
		t.Fatalf("flow using an absent group: %q", p.reason)
	}
	var refused []uint16
	for _, p := range preds {
		if strings.HasPrefix(p.reason, "OFPFMFC_TABLE_FULL (predicted): table 7 holds at most 4 flows") {
			refused = append(refused, binary.BigEndian.Uint16(p.entry.ID[1:]))
		}
	}
	// 4 - 2 held = room for priorities 1 and 2; the flow using the absent
	// group takes no room.
	if len(refused) != 3 || len(preds) != 4 {
		t.Fatalf("predicted %v (table 7 priorities %v), want priorities 3, 4, 5 refused", preds, refused)
	}
	for _, p := range refused {
		if p < 3 {
			t.Fatalf("refused priority %d, want 3, 4, 5 (key order keeps the first)", p)
		}
	}

	// A held flow that is refused for another reason leaves room.
	skip := map[string]bool{key(entry.KindFlow, held[0].ID): true}
	preds = predictRefusals(desired, onSwitch(append(held, undeclared)...), skip, limits)
	if len(preds) != 3 {
		t.Fatalf("with a held flow quarantined: %v, want 2 table refusals and the group one", preds)
	}
}

func TestSiblingRefusals(t *testing.T) {
	var cs []Change
	for p := uint16(1); p <= 4; p++ {
		cs = append(cs, Change{Op: OpAdd, Kind: entry.KindFlow, Desired: flowEnt(t, 7, p, 0, 0)},
			Change{Op: OpAdd, Kind: entry.KindFlow, Desired: flowEnt(t, 8, p, 0, 0)})
	}
	cs = append(cs, Change{Op: OpModify, Kind: entry.KindFlow, Desired: flowEnt(t, 7, 50, 0, 0)})
	p := newPlan(cs)
	refused := p.bundle[2] // table 7, priority 2
	got := siblingRefusals(p, refused, "OFPFMFC_TABLE_FULL")
	if len(got) != 2 || entry.FlowTable(got[0].Desired.ID) != 7 || entry.FlowTable(got[1].Desired.ID) != 7 {
		t.Fatalf("siblings %v, want the adds of priority 3 and 4 in table 7", got)
	}
	if got := siblingRefusals(p, refused, "OFPBAC_BAD_OUT_PORT"); len(got) != 0 {
		t.Fatalf("siblings of another error: %v", got)
	}
}
