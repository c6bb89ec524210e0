package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
)

// wantNoDiff checks that the switch holds what the store says.
func (e *env) wantNoDiff(ctx context.Context, what string) {
	e.t.Helper()
	changes, err := e.c.Diff(ctx, "br-int")
	if err != nil || len(changes) != 0 {
		e.t.Fatalf("%s: diff %v (%v), want none", what, changes, err)
	}
}

// TestUsedGroupOrMeterCannotGo: deleting, or syncing away, a group or meter
// that another module's flows use is refused, naming the users; the switch
// keeps the flows. Removing the users in the same request is fine.
func TestUsedGroupOrMeterCannotGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "lb"},
		client.GroupText("group_id=5,type=select,bucket=output:1,bucket=output:2"),
		client.MeterText("meter=3,kbps,band=type=drop,rate=1000")); err != nil {
		t.Fatal(err)
	}
	var pods []client.Entry
	for i := range 20 {
		pods = append(pods, client.FlowText(fmt.Sprintf("table=0,priority=%d,ip,nw_dst=10.0.0.%d,actions=meter:3,group:5", 100+i, i)))
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, pods...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "policy"}, client.FlowText("table=1,priority=5,ip,actions=group:5")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		do   func() error
		want string
	}{
		{"delete group", func() error {
			_, err := e.c.Delete(ctx, client.Module{Bridge: "br-int", Name: "lb"}, client.GroupText("group_id=5"))
			return err
		}, "group 5 is used by 21 flows of modules pod, policy: first: priority=100,ip,nw_dst=10.0.0.0 actions=meter:3,group:5 (module pod)"},
		{"delete meter", func() error {
			_, err := e.c.Delete(ctx, client.Module{Bridge: "br-int", Name: "lb"}, client.MeterText("meter=3"))
			return err
		}, "meter 3 is used by 20 flows of module pod: first: priority=100,ip,nw_dst=10.0.0.0"},
		{"sync without them", func() error {
			_, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "lb"}, false)
			return err
		}, " is used by "},
	} {
		err := tc.do()
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.want) ||
			strings.Count(err.Error(), "failed precondition") != 1 {
			t.Fatalf("%s: %v, want FAILED_PRECONDITION containing %q, its kind once", tc.what, err, tc.want)
		}
	}
	if got := e.dump(ctx, "br-int"); len(got) != 21 {
		t.Fatalf("after refused deletes the switch holds %d flows, want 21", len(got))
	}
	e.wantNoDiff(ctx, "after refused deletes")

	// A module that removes its group and its users in one request may.
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "lb"}, client.GroupText("group_id=6,type=all,bucket=output:1"),
		client.FlowText("table=2,priority=1,ip,actions=group:6")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Delete(ctx, client.Module{Bridge: "br-int", Name: "lb"}, client.GroupText("group_id=6"), client.FlowText("table=2,priority=1,ip")); err != nil {
		t.Fatalf("delete of a group with its only user: %v", err)
	}
	// Once the users are gone, the group and meter may go.
	if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Delete(ctx, client.Module{Bridge: "br-int", Name: "policy"}, client.FlowText("table=1,priority=5,ip")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "lb"}, false); err != nil {
		t.Fatalf("sync away an unused group and meter: %v", err)
	}
	e.wantNoDiff(ctx, "at the end")
}

// TestMeterRollback: meters go to the switch before the bundle; when the
// request fails they are taken back, so nothing of a refused request stays.
func TestMeterRollback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	e.limitTable7(ctx, true)
	meters := func() []string {
		t.Helper()
		ms, err := e.sb.DumpMeters(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	table7 := []client.Entry{client.FlowText("table=7,priority=1,ip,actions=drop"), client.FlowText("table=7,priority=2,ip,actions=drop")}

	// A new meter with a flow the switch refuses at commit.
	_, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, append([]client.Entry{client.MeterText("meter=1,kbps,band=type=drop,rate=100")}, table7...)...)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "OFPFMFC_TABLE_FULL") {
		t.Fatalf("put beyond the table's limit: %v", err)
	}
	if ms := meters(); len(ms) != 0 {
		t.Fatalf("a refused request left meters on the switch: %q", ms)
	}
	e.wantNoDiff(ctx, "after a refused meter add")

	// Two meters, the second refused by the datapath (a dscp_remark band).
	_, err = e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.MeterText("meter=1,kbps,band=type=drop,rate=100"),
		client.MeterText("meter=2,kbps,band=type=dscp_remark,rate=100,prec_level=1"))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "OFPMMFC_BAD_BAND") {
		t.Fatalf("put of a refused meter: %v", err)
	}
	if ms := meters(); len(ms) != 0 {
		t.Fatalf("a refused add of two meters left %q on the switch", ms)
	}
	e.wantNoDiff(ctx, "after a refused add of two meters")

	// A modified meter gets its previous rate back.
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.MeterText("meter=1,kbps,band=type=drop,rate=100")); err != nil {
		t.Fatal(err)
	}
	before := meters()
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, append([]client.Entry{client.MeterText("meter=1,kbps,band=type=drop,rate=300")}, table7...)...); err == nil {
		t.Fatal("put beyond the table's limit accepted")
	}
	if after := meters(); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("meter after a refused modify:\n%s\nwant\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	e.wantNoDiff(ctx, "after a refused meter modify")
}

// flowModBytes is an encoded FLOW_MOD ADD of table 0, priority 1, ip,
// actions drop, changed by set.
func flowModBytes(t *testing.T, set func(fm *openflow15.FlowMod)) []byte {
	t.Helper()
	fm := openflow15.NewFlowMod()
	fm.TableId, fm.Priority = 0, 1
	fm.Match.AddField(*openflow15.NewEthTypeField(0x0800))
	set(fm)
	b, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOnlyDesiredState: what is not state (timeouts, flags for one
// modification or for flow-removed messages, a buffered packet) is refused,
// as text and encoded, with the reason; no_packet_counts and no_byte_counts
// are state OVS keeps: accepted, and no drift.
func TestOnlyDesiredState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	refused := []struct {
		entry client.Entry
		why   string
	}{
		{client.FlowText("table=0,priority=1,idle_timeout=10,ip,actions=drop"), "idle_timeout=10: flows that expire are not desired state"},
		{client.FlowText("table=0,priority=1,hard_timeout=10,ip,actions=drop"), "hard_timeout=10: flows that expire"},
		{client.FlowText("table=0,priority=1,send_flow_rem,ip,actions=drop"), "send_flow_rem: "},
		{client.FlowText("table=0,priority=1,check_overlap,ip,actions=drop"), "check_overlap: "},
		{client.FlowText("table=0,priority=1,reset_counts,ip,actions=drop"), "reset_counts: "},
		{client.FlowBytes(flowModBytes(t, func(fm *openflow15.FlowMod) { fm.IdleTimeout = 5 })), "idle_timeout=5: "},
		{client.FlowBytes(flowModBytes(t, func(fm *openflow15.FlowMod) { fm.HardTimeout = 5 })), "hard_timeout=5: "},
		{client.FlowBytes(flowModBytes(t, func(fm *openflow15.FlowMod) { fm.BufferId = 7 })), "buffer_id=7: "},
		{client.FlowBytes(flowModBytes(t, func(fm *openflow15.FlowMod) { fm.Flags = openflow15.FF_SEND_FLOW_REM })), "send_flow_rem: "},
		{client.FlowBytes(flowModBytes(t, func(fm *openflow15.FlowMod) { fm.Flags = 0x100 })), "flags 0x100: not OpenFlow 1.5"},
	}
	for i, tc := range refused {
		_, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.FlowText("table=0,priority=9,ip,actions=drop"), tc.entry)
		var ee *errdefs.EntryError
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.As(err, &ee) || ee.Index != 1 || !strings.Contains(err.Error(), tc.why) ||
			strings.Count(err.Error(), "invalid argument") != 1 || strings.Count(err.Error(), "entry 1") != 1 {
			t.Fatalf("case %d: %v, want INVALID_ARGUMENT for entry 1 saying %q, kind and entry once", i, err, tc.why)
		}
	}
	if got := e.dump(ctx, "br-int"); len(got) != 0 {
		t.Fatalf("refused requests left %q", got)
	}
	kept := []string{"table=0,priority=2,no_packet_counts,ip,actions=drop", "table=0,priority=3,no_byte_counts,importance=4,ip,actions=drop"}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, texts(kept)...); err != nil {
		t.Fatal(err)
	}
	if out, err := e.sb.Ofctl(ctx, "del-flows", "br-ref"); err != nil {
		t.Fatal(err, out)
	}
	e.ofctlFlows(ctx, "add-flows", kept)
	if want, got := e.dump(ctx, "br-ref"), e.dump(ctx, "br-int"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	e.wantNoDiff(ctx, "flags OVS keeps")
}

// desiredOnly splits corpus flows into those flowstate takes as desired
// state and those it refuses (timeouts, flags that are not state): a corpus
// dumped from a live switch holds learned flows with a hard_timeout.
func desiredOnly(t *testing.T, flows []string) (desired, refused []string) {
	t.Helper()
	for _, l := range flows {
		fm, err := ofctl.ParseFlow(l)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		raw, err := fm.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if entry.CheckDesiredFlow(raw) != nil {
			refused = append(refused, l)
		} else {
			desired = append(desired, l)
		}
	}
	return desired, refused
}

// wantRefused checks that every flow of refused is refused alone, as
// INVALID_ARGUMENT.
func (e *env) wantRefused(ctx context.Context, refused []string) {
	e.t.Helper()
	for _, l := range refused {
		if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "corpus"}, client.FlowText(l)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			e.t.Fatalf("%s: %v, want INVALID_ARGUMENT (not desired state)", l, err)
		}
	}
}
