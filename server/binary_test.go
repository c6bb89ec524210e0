package server_test

import (
	"context"
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

	tcp := func(port uint16) []*openflow15.MatchField {
		// L4 first: not OVS's order.
		return []*openflow15.MatchField{openflow15.NewTcpDstField(port), openflow15.NewIpProtoField(6), ipv4()}
	}
	return []client.Entry{
		client.GroupBytes(encode(t, svc)),
		client.GroupBytes(encode(t, hash)),
		client.GroupBytes(encode(t, flood)),
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
	e.startDaemon(ctx)
	e.waitConverged(ctx)
	es := antreaEntries(t)
	applied, err := e.c.Put(ctx, "br-int", "antrea", es...)
	if err != nil {
		t.Fatal(err)
	}
	if !applied {
		t.Fatal("put not applied")
	}
	for i := range 3 {
		resp, err := e.c.Reconcile(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		if r := resp[0].LastReplay; r.Messages != 0 || r.Error != "" {
			changes, _ := e.c.Diff(ctx, "br-int")
			t.Fatalf("reconcile %d sent %d messages (%v): spurious differences %+v", i, r.Messages, r.Error, changes)
		}
	}
	changes, err := e.c.Diff(ctx, "br-int")
	if err != nil || len(changes) != 0 {
		t.Fatalf("diff after put: %+v %v", changes, err)
	}
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
	for _, want := range []string{"selection_method=dp_hash", "note:", "set_field:0xa000001->reg3", "controller("} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("List does not show %q:\n%s", want, text.String())
		}
	}
}
