package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// The groups and meters of the proxied controller in the resync tests:
// rgKeep uses group 7, which the controller installs again after its
// clear; rgStale uses group 8 and meter 3, which it does not.
const (
	rgGroup7 = "group_id=7,type=select,bucket=actions=output:1,bucket=actions=output:2"
	rgGroup8 = "group_id=8,type=all,bucket=actions=output:2"
	rgMeter3 = "meter=3,kbps,band=type=drop,rate=1000"
	rgKeep   = "table=0,priority=100,ip,nw_dst=10.0.0.99,actions=group:7"
	rgStale  = "table=0,priority=80,ip,nw_dst=10.0.0.97,actions=meter:3,group:8"
)

// rgClear is ovn-controller's start over through the proxy: meters, then
// flows, then groups deleted, each with its own barrier.
func (e *env) rgClear(ctx context.Context, proxy string) {
	e.t.Helper()
	e.ofctl(ctx, "del-meters", proxy)
	e.ofctl(ctx, "del-flows", proxy)
	e.ofctl(ctx, "del-groups", proxy)
}

// onSwitch returns br-int's flows, groups and meters, one a line.
func (e *env) onSwitch(ctx context.Context) string {
	e.t.Helper()
	g, err := e.sb.DumpGroups(ctx, "br-int")
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := e.sb.DumpMeters(ctx, "br-int")
	if err != nil {
		e.t.Fatal(err)
	}
	return e.dumpFlows(ctx) + "\n" + strings.Join(g, "\n") + "\n" + strings.Join(m, "\n")
}

// rgHolds reports which of the stale entries (group 8, meter 3, the flow
// to 10.0.0.97) the text s (a dump, or the store's entries) names.
func rgHolds(s string) []string {
	var in []string
	for _, m := range []string{"group_id=8", "meter=3", "nw_dst=10.0.0.97"} {
		if strings.Contains(s, m) {
			in = append(in, m)
		}
	}
	return in
}

// TestProxyResyncClearGroupsKilled: a controller behind the proxy clears
// its meters, flows and groups and installs again without group 8, meter
// 3 and the flow that used them; group 7, which it installs again while
// the switch still holds it, is accepted (no GROUP_EXISTS). Right after
// the barrier replies the store holds none of the three, the switch all
// (until the end of the resync). flowstated, the real binary, is killed
// (SIGKILL) then: after it starts again, neither the store nor the switch
// holds what the barrier replies said is gone.
func TestProxyResyncClearGroupsKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := pfFlowstated(t)
	e, proxy := proxyEnv(ctx, t)
	fs := pfRunBinary(ctx, t, e.Env, bin)
	e.ofctl(ctx, "add-group", proxy, rgGroup7)
	e.ofctl(ctx, "add-flow", proxy, rgKeep)
	e.ofctl(ctx, "add-flow", proxy, resyncBase)

	e.inResync(ctx, func() time.Time {
		e.ofctl(ctx, "add-meter", proxy, rgMeter3)
		e.ofctl(ctx, "add-group", proxy, rgGroup8)
		e.ofctl(ctx, "add-flow", proxy, rgStale)
		e.WaitConverged(ctx)
		if in := rgHolds(e.onSwitch(ctx)); len(in) != 3 {
			t.Fatalf("before the clear the switch holds only %q of the stale entries", in)
		}

		cleared := time.Now()
		e.rgClear(ctx, proxy)
		if in := rgHolds(strings.Join(e.stored(ctx, "tunnel"), "\n")); len(in) != 0 {
			t.Fatalf("right after the clear's barrier replies the store holds %q", in)
		}
		// The re-ADD of a group the switch still holds.
		e.ofctl(ctx, "add-group", proxy, rgGroup7)
		e.ofctl(ctx, "add-flow", proxy, resyncBase)
		e.ofctl(ctx, "add-flow", proxy, rgKeep)
		got := strings.Join(e.stored(ctx, "tunnel"), "\n")
		if in := rgHolds(got); len(in) != 0 || !strings.Contains(got, "group_id=7") || !strings.Contains(got, "nw_dst=10.0.0.99") {
			t.Fatalf("after the install's barrier replies the store holds\n%s\nwant group 7 and 10.0.0.99, none of %q", got, in)
		}
		on := e.onSwitch(ctx)
		if in, took := rgHolds(on), time.Since(cleared); len(in) != 3 && took < 4*time.Second {
			t.Fatalf("%v after the clear, inside its resync, the switch holds only %q of the stale entries:\n%s", took.Round(time.Millisecond), in, on)
		}
		return cleared
	})

	// Killed before the resync's end: its deletions from the switch never
	// run; the store must say it all.
	fs.kill(ctx, t)
	fs = pfRunBinary(ctx, t, e.Env, bin)
	got := strings.Join(e.stored(ctx, "tunnel"), "\n")
	if in := rgHolds(got); len(in) != 0 {
		t.Fatalf("after a restart the store holds %q, whose removal was acknowledged:\n%s", in, got)
	}
	poll(ctx, t, "the switch without the acknowledged removals, with group 7 and its flow", func() (bool, error) {
		on := e.onSwitch(ctx)
		return len(rgHolds(on)) == 0 && strings.Contains(on, "group_id=7") && strings.Contains(on, "nw_dst=10.0.0.99"), nil
	})
	pfNoDiff(ctx, t, e.c, "after the restart")
	fs.alive(t)
}

// TestProxyResyncReAddGone: after a controller's clear, its group 7 and
// meter 3, used by no flow any more, leave the store while the switch
// keeps them. Its ADD of both again is accepted (no GROUP_EXISTS,
// METER_EXISTS), meter 3 with another rate that reaches the switch by the
// end. After a replay during the next resync the switch holds neither:
// their ADDs again are on the switch when their barrier replies come.
func TestProxyResyncReAddGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := proxyEnv(ctx, t)
	e.Start(ctx)
	const (
		user    = "table=0,priority=100,ip,nw_dst=10.0.0.99,actions=meter:3,group:7"
		meter2k = "meter=3,kbps,band=type=drop,rate=2000"
	)
	e.ofctl(ctx, "add-meter", proxy, rgMeter3)
	e.ofctl(ctx, "add-group", proxy, rgGroup7)
	e.ofctl(ctx, "add-flow", proxy, user)
	e.WaitConverged(ctx)

	e.rgClear(ctx, proxy)
	if got := strings.Join(e.stored(ctx, "tunnel"), "\n"); strings.Contains(got, "group_id=7") || strings.Contains(got, "meter=3") {
		t.Fatalf("right after the clear the store holds\n%s\nwant neither group 7 nor meter 3", got)
	}
	if on := e.onSwitch(ctx); !strings.Contains(on, "group_id=7") || !strings.Contains(on, "meter=3") {
		t.Fatalf("right after the clear the switch lacks group 7 or meter 3:\n%s", on)
	}
	e.ofctl(ctx, "add-meter", proxy, meter2k)
	e.ofctl(ctx, "add-group", proxy, rgGroup7)
	e.ofctl(ctx, "add-flow", proxy, user)
	if got := strings.Join(e.stored(ctx, "tunnel"), "\n"); !strings.Contains(got, "rate=2000") || !strings.Contains(got, "group_id=7") {
		t.Fatalf("after the re-ADDs the store holds\n%s\nwant group 7 and meter 3 at rate 2000", got)
	}
	poll(ctx, t, "meter 3 at its new rate on the switch by the end of the resync", func() (bool, error) {
		m, err := e.sb.DumpMeters(ctx, "br-int")
		return err == nil && strings.Contains(strings.Join(m, "\n"), "rate=2000"), err
	})
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after the re-ADDs")

	// A replay during the resync: the switch is the store's again.
	e.inResync(ctx, func() time.Time {
		cleared := time.Now()
		e.rgClear(ctx, proxy)
		if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
			t.Fatal(err)
		}
		if on := e.onSwitch(ctx); strings.Contains(on, "group_id=7") || strings.Contains(on, "meter=3") {
			t.Fatalf("after a replay during the resync the switch holds group 7 or meter 3, which the store does not:\n%s", on)
		}
		e.ofctl(ctx, "add-meter", proxy, meter2k)
		e.ofctl(ctx, "add-group", proxy, rgGroup7)
		e.ofctl(ctx, "add-flow", proxy, user)
		if on := e.onSwitch(ctx); !strings.Contains(on, "group_id=7") || !strings.Contains(on, "rate=2000") || !strings.Contains(on, "nw_dst=10.0.0.99") {
			t.Fatalf("after a replay, group 7, meter 3 and their flow installed again are not all on the switch after their barrier replies:\n%s", on)
		}
		return cleared
	})
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after the resync")
}

// TestProxyResyncUsedGroupStays: a group the controller does not install
// again after its clear, but that another module's flow uses, stays in
// the store and on the switch: the store would refuse its deletion, and
// neither the clear's write nor the end of the resync fails for it. The
// group the controller's stale flow used goes.
func TestProxyResyncUsedGroupStays(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := proxyEnv(ctx, t)
	e.Start(ctx)
	e.ofctl(ctx, "add-group", proxy, rgGroup7)
	e.ofctl(ctx, "add-group", proxy, rgGroup8)
	e.ofctl(ctx, "add-flow", proxy, "table=0,priority=80,ip,nw_dst=10.0.0.97,actions=group:8")
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.FlowText("table=9,priority=5,ip,actions=group:7")); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)

	e.ofctl(ctx, "del-flows", proxy)
	e.ofctl(ctx, "del-groups", proxy)
	got := strings.Join(e.stored(ctx, "tunnel"), "\n")
	if !strings.Contains(got, "group_id=7") || strings.Contains(got, "group_id=8") {
		t.Fatalf("right after the clear module tunnel holds\n%s\nwant group 7 (pipeline's flow uses it) and not group 8", got)
	}
	e.ofctl(ctx, "add-flow", proxy, resyncBase)
	poll(ctx, t, "group 8 and the stale flow off the switch at the end of the resync", func() (bool, error) {
		on := e.onSwitch(ctx)
		return !strings.Contains(on, "group_id=8") && !strings.Contains(on, "nw_dst=10.0.0.97"), nil
	})
	if on := e.onSwitch(ctx); !strings.Contains(on, "group_id=7") {
		t.Fatalf("after the resync the switch lacks group 7, which pipeline's flow uses:\n%s", on)
	}
	if got := strings.Join(e.stored(ctx, "tunnel"), "\n"); !strings.Contains(got, "group_id=7") {
		t.Fatalf("after the resync module tunnel holds\n%s\nwant group 7", got)
	}
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after the resync")
}
