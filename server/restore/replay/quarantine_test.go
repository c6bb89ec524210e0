package replay

import (
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
	"github.com/flowstate-io/flowstate/store"
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

// meterEnt is a canonical METER_MOD ADD of meter id, with one drop band.
func meterEnt(t *testing.T, id uint32) entry.Entry {
	t.Helper()
	b := make([]byte, 32)
	b[0], b[1] = 6, 29
	binary.BigEndian.PutUint16(b[2:], 32)
	binary.BigEndian.PutUint16(b[10:], 1) // kbps
	binary.BigEndian.PutUint32(b[12:], id)
	binary.BigEndian.PutUint16(b[16:], 1)  // band type drop
	binary.BigEndian.PutUint16(b[18:], 16) // band length
	binary.BigEndian.PutUint32(b[20:], 1000)
	payload, mid, err := entry.Identify(entry.KindMeter, b)
	if err != nil {
		t.Fatal(err)
	}
	return entry.Entry{Kind: entry.KindMeter, ID: mid, Payload: payload, Module: "m"}
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

// testScan stores desired on bridge br-int of a fresh store and returns a
// flowScan of it against a switch that holds held (owned) and foreign flows.
func testScan(t *testing.T, desired, held, foreign []entry.Entry) *flowScan {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	err = st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "m", desired)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sw := newSwitchState()
	for _, h := range held {
		if h.Kind == entry.KindFlow {
			sw.addFlow(h.Payload, true)
		} else {
			sw.others = append(sw.others, plan.ActualEntry{Kind: h.Kind, ID: h.ID, Payload: h.Payload})
		}
	}
	for _, f := range foreign {
		sw.addFlow(f.Payload, false)
	}
	sw.seal()
	return &flowScan{store: st, bridge: "br-int", sw: sw, skip: map[string]bool{}}
}

func TestPredictMissingReferences(t *testing.T) {
	declared, onlyOnSwitch, quarantinedGroup := groupEnt(t, 6), groupEnt(t, 7), groupEnt(t, 8)
	fine := flowEnt(t, 0, 2, 6, 0)           // group 6: declared
	usesGroup8 := flowEnt(t, 0, 3, 8, 0)     // group 8: declared but quarantined
	usesMeter3 := flowEnt(t, 0, 4, 0, 3)     // meter 3: declared but quarantined
	alreadySkipped := flowEnt(t, 0, 5, 0, 3) // skipped already: not predicted again
	meter3 := meterEnt(t, 3)
	desired := []entry.Entry{declared, quarantinedGroup, meter3, fine, usesGroup8, usesMeter3, alreadySkipped}
	fs := testScan(t, desired, []entry.Entry{onlyOnSwitch}, nil)
	fs.skip[plan.Key(entry.KindMeter, meter3.ID)] = true
	fs.skip[plan.Key(entry.KindGroup, quarantinedGroup.ID)] = true
	fs.skip[plan.Key(entry.KindFlow, alreadySkipped.ID)] = true

	preds, err := fs.predictRefusals([]entry.Entry{declared, quarantinedGroup, meter3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		plan.Key(entry.KindFlow, usesGroup8.ID): "OFPBAC_BAD_OUT_GROUP (predicted): uses group 8, which is quarantined",
		plan.Key(entry.KindFlow, usesMeter3.ID): "OFPMMFC_INVALID_METER (predicted): uses meter 3, which is quarantined",
	}
	if len(preds) != len(want) {
		t.Fatalf("predicted %d refusals, want %d: %v", len(preds), len(want), preds)
	}
	for k, reason := range want {
		if preds[k].reason != reason {
			t.Errorf("reason %q, want %q", preds[k].reason, reason)
		}
		if preds[k].kind != entry.KindFlow || preds[k].module != "m" {
			t.Errorf("predicted entry %v lacks its kind or module", preds[k])
		}
	}
}

func TestPredictTableLimit(t *testing.T) {
	// Table 7 takes 5 flows. The switch holds two declared flows there
	// (they stay and count), a foreign one (outside the owned cookie space:
	// it stays and counts) and an undeclared one (the plan deletes it
	// before the adds: it does not count).
	held := []entry.Entry{flowEnt(t, 7, 100, 0, 0), flowEnt(t, 7, 101, 0, 0)}
	undeclared, foreign := flowEnt(t, 7, 200, 0, 0), flowEnt(t, 7, 300, 0, 0)
	group9 := groupEnt(t, 9)
	desired := append([]entry.Entry{group9}, held...)
	// New flows, declared in reverse key order: key order decides, not
	// the order of declaration.
	for p := uint16(5); p >= 1; p-- {
		desired = append(desired, flowEnt(t, 7, p, 0, 0))
	}
	usesQuarantinedGroup := flowEnt(t, 7, 0, 9, 0)
	desired = append(desired, usesQuarantinedGroup)
	for p := uint16(1); p <= 5; p++ {
		desired = append(desired, flowEnt(t, 8, p, 0, 0), flowEnt(t, 9, p, 0, 0))
	}
	limits := []ovsconfig.TableLimit{{Table: 7, FlowLimit: 5}, {Table: 8, FlowLimit: 2, Evict: true}}

	fs := testScan(t, desired, append(held, undeclared), []entry.Entry{foreign})
	fs.skip[plan.Key(entry.KindGroup, group9.ID)] = true
	preds, err := fs.predictRefusals([]entry.Entry{group9}, limits)
	if err != nil {
		t.Fatal(err)
	}
	if p := preds[plan.Key(entry.KindFlow, usesQuarantinedGroup.ID)]; !strings.HasPrefix(p.reason, "OFPBAC_BAD_OUT_GROUP") {
		t.Fatalf("flow using a quarantined group: %q", p.reason)
	}
	var refused []uint16
	for k, p := range preds {
		if strings.HasPrefix(p.reason, "OFPFMFC_TABLE_FULL (predicted): table 7 holds at most 5 flows") {
			refused = append(refused, binary.BigEndian.Uint16([]byte(k[2:])))
		}
	}
	// 5 - 2 held - 1 foreign = room for priorities 1 and 2; the flow using
	// the quarantined group takes no room.
	if len(refused) != 3 || len(preds) != 4 {
		t.Fatalf("predicted %v (table 7 priorities %v), want priorities 3, 4, 5 refused", preds, refused)
	}
	for _, p := range refused {
		if p < 3 {
			t.Fatalf("refused priority %d, want 3, 4, 5 (key order keeps the first)", p)
		}
	}

	// A held flow that is refused for another reason leaves room.
	fs.skip[plan.Key(entry.KindFlow, held[0].ID)] = true
	preds, err = fs.predictRefusals([]entry.Entry{group9}, limits)
	if err != nil {
		t.Fatal(err)
	}
	if len(preds) != 3 {
		t.Fatalf("with a held flow quarantined: %v, want 2 table refusals and the group one", preds)
	}
}

func TestSiblingRefusals(t *testing.T) {
	var desired []entry.Entry
	for p := uint16(1); p <= 4; p++ {
		desired = append(desired, flowEnt(t, 7, p, 0, 0), flowEnt(t, 8, p, 0, 0))
	}
	modified := flowEnt(t, 7, 50, 0, 0)
	onSwitch := flowEnt(t, 7, 50, 0, 0)
	onSwitch.Payload[9] = 1 // another cookie: the replay modifies it
	fs := testScan(t, append(desired, modified), []entry.Entry{onSwitch}, nil)
	refused := plan.Change{Op: plan.OpAdd, Kind: entry.KindFlow, Desired: desired[2]} // table 7, priority 2
	got, err := fs.siblings(refused, "OFPFMFC_TABLE_FULL")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || entry.FlowTable(got[0].Desired.ID) != 7 || entry.FlowTable(got[1].Desired.ID) != 7 {
		t.Fatalf("siblings %v, want the adds of priority 3 and 4 in table 7", got)
	}
	if got, _ := fs.siblings(refused, "OFPBAC_BAD_OUT_PORT"); len(got) != 0 {
		t.Fatalf("siblings of another error: %v", got)
	}
}

func TestQuarantineSkipsDependents(t *testing.T) {
	meter7, meter8 := meterEnt(t, 7), meterEnt(t, 8)
	flows := []entry.Entry{flowEnt(t, 0, 1, 0, 7), flowEnt(t, 0, 2, 0, 8), flowEnt(t, 0, 3, 0, 7)}
	fs := testScan(t, append([]entry.Entry{meter7, meter8}, flows...), nil, nil)
	rp := New(Config{Store: fs.store})
	b := bridge.New("br-int", nil, poison.Config{})
	b.QuarantineLocked([]bridge.Quarantining{{Key: plan.Key(entry.KindMeter, meter7.ID), Kind: entry.KindMeter, Module: "m", Reason: "refused"}}, time.Now())
	skip, err := rp.quarantineSkips("br-int", b.Quarantine())
	if err != nil {
		t.Fatal(err)
	}
	if len(skip) != 3 || !skip[plan.Key(entry.KindFlow, flows[0].ID)] || skip[plan.Key(entry.KindFlow, flows[1].ID)] || !skip[plan.Key(entry.KindFlow, flows[2].ID)] {
		t.Fatalf("skip %v, want meter 7 and the flows of priority 1 and 3", skip)
	}
	if skip, _ := rp.quarantineSkips("br-int", &bridge.Quarantine{}); len(skip) != 0 {
		t.Fatal("skips without a quarantine")
	}
}
