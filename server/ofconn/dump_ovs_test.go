package ofconn

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/errdefs"
)

// withoutXid returns a copy of m with xid 0, the xid of what FlowModFromDesc and friends return.
func withoutXid(m Message) []byte {
	b := bytes.Clone(m)
	be.PutUint32(b[4:8], 0)
	return b
}

func TestDumpFlowsMultipart(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	const perTable = 500
	var msgs []Message
	for table := range uint8(4) {
		for i := range perTable {
			fm := ipFlow(table, 100+uint16(table), i)
			switch table {
			case 0:
				fm.AddInstruction(openflow15.NewInstrGotoTable(1))
			case 1:
				applyActions(fm, openflow15.NewActionSetField(*openflow15.NewRegMatchField(0, uint32(i), nil)),
					openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, 2))
			default:
				applyActions(fm, output(uint32(1+i%2)))
			}
			msgs = append(msgs, encode(t, fm))
		}
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	received := c.Stats().Received
	flows, err := c.DumpFlows(ctx)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	if replies := c.Stats().Received - received; replies < 2 {
		t.Errorf("dump came in %d reply, want a multipart dump of several", replies)
	}
	if got, want := len(flows), 4*perTable+1; got != want { // plus priority=0 actions=NORMAL
		t.Fatalf("dumped %d flows, want %d", got, want)
	}
	perTableGot := map[uint8]int{}
	for _, f := range flows {
		if f.Err != nil || f.Desc == nil {
			t.Fatalf("flow not decoded: %v", f.Err)
		}
		if f.Desc.TableId != f.Table() || f.Desc.Priority != f.Priority() {
			t.Errorf("raw accessors disagree with the decoded flow: table %d/%d priority %d/%d",
				f.Table(), f.Desc.TableId, f.Priority(), f.Desc.Priority)
		}
		perTableGot[f.Table()]++
	}
	for table := range uint8(4) {
		want := perTable
		if table == 0 {
			want++
		}
		if perTableGot[table] != want {
			t.Errorf("table %d: %d flows, want %d", table, perTableGot[table], want)
		}
	}
}

func TestFlowModFromDescRoundTrip(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})

	group := openflow15.NewGroupMod()
	group.GroupId = 7
	for i, port := range []uint32{1, 2} {
		b := openflow15.NewBucket(uint32(i))
		b.AddAction(output(port))
		group.AddBucket(*b)
	}

	timed := applyActions(newFlow(0, 90, openflow15.NewInPortField(1)), output(2))
	timed.Cookie = 0x1234
	timed.IdleTimeout, timed.HardTimeout = 600, 3600
	timed.Flags = openflow15.FF_SEND_FLOW_REM
	timed.Importance = 5

	drop := newFlow(0, 80, openflow15.NewInPortField(2))

	mask16 := net.IPv4(255, 255, 0, 0)
	tcp := newFlow(1, 10, openflow15.NewEthTypeField(0x0800),
		openflow15.NewIpv4SrcField(net.IPv4(192, 168, 0, 0), &mask16), ipDst(5),
		openflow15.NewIpProtoField(6), openflow15.NewTcpDstField(80))
	applyActions(tcp, openflow15.NewActionSetField(*openflow15.NewRegMatchField(3, 42, nil)),
		openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, 2))

	// Not a register match: OVS dumps an OpenFlow 1.5 match on reg3 as a masked packet-register (xreg1) field,
	// which does not re-encode to the NXM_NX_REG3 field libOpenflow builds.
	gotoTable := newFlow(2, 5, openflow15.NewMetadataField(42, nil))
	gotoTable.AddInstruction(openflow15.NewInstrGotoTable(3))

	toGroup := applyActions(newFlow(3, 1), openflow15.NewActionGroup(7))

	flows := map[[2]uint16]Message{} // (table, priority) -> FLOW_MOD sent
	msgs := []Message{encode(t, group)}
	for _, fm := range []*openflow15.FlowMod{
		applyActions(ipFlow(0, 100, 1), output(2)), timed, drop, tcp, gotoTable, toGroup,
	} {
		m := encode(t, fm)
		flows[[2]uint16{uint16(fm.TableId), fm.Priority}] = m
		msgs = append(msgs, m)
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	dumped, err := c.DumpFlows(ctx)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	seen := 0
	for _, f := range dumped {
		sent, ok := flows[[2]uint16{uint16(f.Table()), f.Priority()}]
		if !ok {
			continue
		}
		seen++
		t.Run(fmt.Sprintf("table=%d,priority=%d", f.Table(), f.Priority()), func(t *testing.T) {
			if f.Err != nil {
				t.Fatalf("not decoded: %v", f.Err)
			}
			got, err := FlowModFromDesc(f.Desc).MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if want := withoutXid(sent); !bytes.Equal(got, want) {
				t.Errorf("FLOW_MOD from the dump differs from the one sent:\ngot  %x\nwant %x", got, want)
			}
			raw, err := f.FlowMod()
			if err != nil {
				t.Fatal(err)
			}
			if want := withoutXid(sent); !bytes.Equal(raw, want) {
				t.Errorf("FLOW_MOD from the raw dump differs from the one sent:\ngot  %x\nwant %x", raw, want)
			}
		})
	}
	if seen != len(flows) {
		t.Errorf("dump holds %d of the %d flows sent", seen, len(flows))
	}

	groups, err := c.DumpGroups(ctx)
	if err != nil {
		t.Fatalf("dump groups: %v", err)
	}
	if len(groups) != 1 || groups[0].Err != nil || groups[0].ID() != 7 {
		t.Fatalf("groups = %+v, want group 7 decoded", groups)
	}
	got, err := GroupModFromDesc(groups[0].Desc).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if want := withoutXid(msgs[0]); !bytes.Equal(got, want) {
		t.Errorf("GROUP_MOD from the dump differs from the one sent:\ngot  %x\nwant %x", got, want)
	}
	if raw, err := groups[0].GroupMod(); err != nil || !bytes.Equal(raw, got) {
		t.Errorf("GROUP_MOD from the raw dump = %x, %v; want %x", raw, err, got)
	}
}

func TestSendMeterMod(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	meter := openflow15.NewMeterMod()
	meter.MeterId = 3
	meter.Flags = openflow15.MF_KBPS | openflow15.MF_BURST | openflow15.MF_STATS
	band := openflow15.NewMeterBandDrop()
	band.Rate, band.BurstSize = 1000, 100
	meter.AddMeterBand(band)
	sent := encode(t, meter)
	if err := c.Send(ctx, sent); err != nil {
		t.Fatalf("send meter: %v", err)
	}
	err := c.Send(ctx, sent)
	var ofe *OFError
	if !errors.As(err, &ofe) || ofe.Name != "OFPMMFC_METER_EXISTS" || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("second add = %v, want OFPMMFC_METER_EXISTS", err)
	}
	meters, err := c.DumpMeters(ctx)
	if err != nil {
		t.Fatalf("dump meters: %v", err)
	}
	if len(meters) != 1 || meters[0].Err != nil || meters[0].ID() != 3 {
		t.Fatalf("meters = %+v, want meter 3 decoded", meters)
	}
	got, err := MeterModFromDesc(meters[0].Desc).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if want := withoutXid(sent); !bytes.Equal(got, want) {
		t.Errorf("METER_MOD from the dump differs from the one sent:\ngot  %x\nwant %x", got, want)
	}
	if raw, err := meters[0].MeterMod(); err != nil || !bytes.Equal(raw, got) {
		t.Errorf("METER_MOD from the raw dump = %x, %v; want %x", raw, err, got)
	}
	if out, err := s.DumpMeters(ctx, "br0"); err != nil || len(out) != 1 {
		t.Errorf("ovs-ofctl dump-meters = %q, %v; want one meter", out, err)
	}
}

func TestDumpUndecodableFlow(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	// libOpenflow does not know the ct_clear Nicira action.
	if _, err := s.Ofctl(ctx, "add-flow", "br0", "table=0,priority=50,ip,actions=ct_clear,output:2"); err != nil {
		t.Fatal(err)
	}
	flows, err := c.DumpFlows(ctx)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	var bad []Flow
	for _, f := range flows {
		if f.Err != nil {
			bad = append(bad, f)
		} else if f.Desc == nil {
			t.Errorf("flow with neither Desc nor Err: %x", f.Raw)
		}
	}
	if len(bad) != 1 {
		t.Fatalf("%d undecodable flows, want 1 (of %d)", len(bad), len(flows))
	}
	f := bad[0]
	t.Logf("undecodable: %v", f.Err)
	if f.Desc != nil || f.Table() != 0 || f.Priority() != 50 || len(f.MatchBytes())%8 != 0 {
		t.Errorf("undecodable flow: desc %v table %d priority %d match %x", f.Desc, f.Table(), f.Priority(), f.MatchBytes())
	}
	// The raw form still gives the FLOW_MOD that reinstalls it.
	m, err := f.FlowMod()
	if err != nil {
		t.Fatalf("FlowMod of the undecodable flow: %v", err)
	}
	before, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ofctl(ctx, "del-flows", "br0", "ip"); err != nil {
		t.Fatal(err)
	}
	if err := c.Bundle(ctx, []Message{m}); err != nil {
		t.Fatalf("reinstall from the raw FLOW_MOD: %v", err)
	}
	after, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("reinstalled flow differs:\nbefore %q\nafter  %q", before, after)
	}
	// The connection survived.
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("barrier: %v", err)
	}
}

// The raw dump returns the same entries as the decoding one, without Desc.
func TestDumpFlowsRaw(t *testing.T) {
	ctx, sb := startOVS(t)
	c := dial(ctx, t, sb, Options{})
	if out, err := sb.Ofctl(ctx, "add-flow", "br0", "table=3,priority=7,ip,nw_dst=10.0.0.0/8,actions=ct(commit,table=4,zone=5)"); err != nil {
		t.Fatal(err, out)
	}
	decoded, err := c.DumpFlows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.DumpFlowsRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(decoded) || len(raw) == 0 {
		t.Fatalf("raw dump %d flows, decoded %d", len(raw), len(decoded))
	}
	for i := range raw {
		// Raw differs in the stats (durations); the FLOW_MODs must not.
		if raw[i].Err != nil || raw[i].Desc != nil {
			t.Fatalf("flow %d: raw %+v", i, raw[i])
		}
		a, err1 := raw[i].FlowMod()
		b, err2 := decoded[i].FlowMod()
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Fatalf("flow %d: FlowMod differs (%v, %v)", i, err1, err2)
		}
	}
}
