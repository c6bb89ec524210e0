package server_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server"
)

// ownedSpace is the cookie space of the cookie tests: flowstated manages the
// flows with cookies 0x1000-0x1fff; the others belong to another controller.
var ownedSpace = entry.CookieSpace{Value: 0x1000, Mask: 0xf000}

// The other controller's entries on br-int: a group and two flows with
// cookie 0x2000, installed with ovs-ofctl.
var (
	foreignGroup = "group_id=5,type=all,bucket=output:2"
	foreignFlows = []string{
		"cookie=0x2000,table=0,priority=300,tcp,nw_dst=10.0.0.99,actions=drop",
		"cookie=0x2000,table=0,priority=250,ip,nw_dst=10.0.0.50,actions=group:5",
	}
	ownedFlows = []string{
		"cookie=0x1000,table=0,priority=100,ip,actions=resubmit(,1)",
		"cookie=0x1001,table=1,priority=100,ip,actions=output:2",
	}
)

// stateOf is a bridge's flows and groups as ovs-ofctl prints them, without
// counters.
func (e *env) stateOf(ctx context.Context, br string) []string {
	e.t.Helper()
	groups, err := e.sb.DumpGroups(ctx, br)
	if err != nil {
		e.t.Fatal(err)
	}
	return append(e.dump(ctx, br), groups...)
}

// TestOwnedCookie: with --owned-cookie, flowstated manages only the flows of
// its space on a bridge it shares with another controller. The other
// controller's flows and group (and the default NORMAL flow, cookie 0)
// survive the first replay, a reconcile and an audit-style diff; a declared
// flow outside the space is refused, naming the space; and after vswitchd
// crashes and starts under the re-armed flag, the foreign entries come back
// with flowstated's own, before the flag is cleared.
func TestOwnedCookie(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.OwnedCookie = ownedSpace
		c.RearmFlowRestoreWait = true
	})
	if out, err := e.sb.Ofctl(ctx, "add-group", "br-int", foreignGroup); err != nil {
		t.Fatal(err, out)
	}
	for _, f := range foreignFlows {
		if out, err := e.sb.Ofctl(ctx, "add-flow", "br-int", f); err != nil {
			t.Fatal(err, out)
		}
	}
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(ownedFlows)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)

	_, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.FlowText("cookie=0x2001,table=2,priority=1,actions=drop"))
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 0 || !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "outside the owned cookie space 0x1000/0xf000") {
		t.Fatalf("flow outside the owned space: %v, want INVALID_ARGUMENT for entries[0] naming the space", err)
	}

	want := append(append(append([]string{}, foreignFlows...), ownedFlows...), "priority=0 actions=NORMAL")
	if out, err := e.sb.Ofctl(ctx, "add-group", "br-ref", foreignGroup); err != nil {
		t.Fatal(err, out)
	}
	e.oracle(ctx, want)
	wantState := e.stateOf(ctx, "br-ref")
	if got := e.stateOf(ctx, "br-int"); !slices.Equal(got, wantState) {
		t.Fatalf("br-int after the first replay:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantState, "\n"))
	}
	e.wantNoDiff(ctx, "with foreign flows on the switch")
	if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	if got := e.stateOf(ctx, "br-int"); !slices.Equal(got, wantState) {
		t.Fatalf("br-int after a reconcile:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantState, "\n"))
	}
	poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })

	for round := range 2 {
		restarted := time.Now()
		if err := e.sb.KillVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.sb.StartVswitchd(ctx); err != nil { // plain start; the re-armed flag holds it
			t.Fatal(err)
		}
		poll(ctx, t, "restored and released", func() (bool, error) {
			st, err := e.c.Status(ctx)
			return err == nil && st.LastRelease.After(restarted), nil
		})
		if got := e.stateOf(ctx, "br-int"); !slices.Equal(got, wantState) {
			t.Fatalf("round %d: br-int after the restart:\n%s\nwant\n%s", round, strings.Join(got, "\n"), strings.Join(wantState, "\n"))
		}
		e.wantNoDiff(ctx, "after the restart")
		poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	}
}

// TestFlowsWithTimeoutsLeftAlone: a flow with an idle or hard timeout on a
// managed bridge (what a learn action installs) is nobody's desired state:
// replays, audits and diffs leave it alone even though flowstated owns the
// whole table, so a pipeline's learned flows (session affinity) survive.
func TestFlowsWithTimeoutsLeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	learned := "table=2,priority=5,idle_timeout=300,ip,nw_src=10.1.2.3,actions=output:2"
	if out, err := e.sb.Ofctl(ctx, "add-flow", "br-int", learned); err != nil {
		t.Fatal(err, out)
	}
	if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	e.wantNoDiff(ctx, "with a learned flow on the switch")
	found := false
	for _, f := range e.dump(ctx, "br-int") {
		found = found || strings.Contains(f, "idle_timeout=300") && strings.Contains(f, "nw_src=10.1.2.3")
	}
	if !found {
		t.Fatalf("the reconcile deleted the flow with a timeout: %q", e.dump(ctx, "br-int"))
	}
}
