package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server"
)

// TestStagedWriteSwitchGone: vswitchd freezes (SIGSTOP) before a staged
// Sync reaches it, then is restarted under the flag, as an upgrade that
// hangs would be. The write, whose bundle can neither complete nor be
// known, is stored and reported not applied; the bridge replays the store
// into the new vswitchd, which then holds exactly it, and the flag clears.
// A staged write while vswitchd is down is stored for the next replay.
func TestStagedWriteSwitchGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.StageAbove, c.MetricsListen = 1000, "127.0.0.1:0" })
	e.Start(ctx)
	e.WaitConverged(ctx)
	set := manyFlows(10, 20_000, 0)
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "policy"}, set...); err != nil || !applied {
		t.Fatalf("staged put: applied=%v err=%v", applied, err)
	}
	e.wantNoDiff(ctx, "after the staged put")

	if err := e.sb.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	next := append(append([]client.Entry(nil), set[10_000:]...), manyFlows(10, 10_000, 20_000)...)
	type outcome struct {
		res client.SyncResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "policy"}, false, next...)
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("staged sync to a frozen vswitchd did not return")
	}
	if o.err != nil || o.res.Applied || o.res.Stored != len(next) || o.res.Added != 10_000 || o.res.Removed != 10_000 {
		t.Fatalf("staged sync to a frozen vswitchd: %+v, %v; want it stored, not applied, 10,000 added and removed", o.res, o.err)
	}
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	poll(ctx, t, "flag cleared", func() (bool, error) {
		on, err := e.sb.FlowRestoreWait(ctx)
		return !on, err
	})
	e.wantNoDiff(ctx, "after the restart")
	if n := e.moduleCount(ctx, "policy"); n != len(next) {
		t.Fatalf("policy holds %d flows, want %d", n, len(next))
	}

	// vswitchd down before the write: stored for the replay, not sent.
	if err := e.sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "bridge disconnected", func() (bool, error) { return !e.bridgeStatus(ctx, "br-int").Connected, nil })
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "policy"}, manyFlows(10, 5_000, 30_000)...); err != nil || applied {
		t.Fatalf("staged put with vswitchd down: applied=%v err=%v, want stored, not applied", applied, err)
	}
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after vswitchd came back")
	if n := e.moduleCount(ctx, "policy"); n != len(next)+5_000 {
		t.Fatalf("policy holds %d flows, want %d", n, len(next)+5_000)
	}
	if n := e.metric(ctx, "flowstate_staged_writes_total"); n != 3 {
		t.Fatalf("flowstate_staged_writes_total %d, want 3: a write was not staged", n)
	}
}

// TestStagedGroupAcrossMessages: in a streamed write past StageAbove, an
// INSERT_BUCKET entry at the start of a message still joins the group ADD
// that ended the message before it, as it does in a request held in memory;
// the request, which declares a group, is written the usual way from the
// spool, and the switch holds the whole group.
func TestStagedGroupAcrossMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.StageAbove = 10 })
	e.Start(ctx)
	e.WaitConverged(ctx)
	api := e.rawAPI(ctx)
	group := func(b []byte) *flowstatev1.Entry {
		return &flowstatev1.Entry{Kind: flowstatev1.EntryKind(entry.KindGroup), Body: &flowstatev1.Entry_Openflow{Openflow: b}}
	}
	var first []*flowstatev1.Entry
	for i := range 20 {
		first = append(first, &flowstatev1.Entry{Kind: flowstatev1.EntryKind(entry.KindFlow),
			Body: &flowstatev1.Entry_Text{Text: fmt.Sprintf("table=3,priority=%d,ip,actions=drop", 10+i)}})
	}
	first = append(first, group(serviceGroupMod(t, 30, false, serviceBuckets(0, 800))))
	stream, err := api.PutStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*flowstatev1.PutStreamRequest{
		{Bridge: "br-int", Module: "lb", Entries: first},
		{Entries: []*flowstatev1.Entry{group(serviceGroupMod(t, 30, true, serviceBuckets(800, 800)))}},
		{Entries: []*flowstatev1.Entry{group(serviceGroupMod(t, 30, true, serviceBuckets(1600, 400)))}},
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil || !resp.GetApplied() || resp.GetStored() != 21 {
		t.Fatalf("put stream: %v, %v; want 21 entries applied", resp, err)
	}
	// Clean: the switch holds the group as stored (ovs-ofctl's dump of a
	// group this large is cut short by OVS 3.1, flowstate's is not).
	e.wantClean(ctx, "after the put")
	listed, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Kind: entry.KindGroup})
	if err != nil || len(listed) != 1 {
		t.Fatalf("List: %d groups, %v; want 1", len(listed), err)
	}
	if n := strings.Count(listed[0].Text, "bucket="); n != 2000 {
		t.Fatalf("group 30 is stored with %d buckets, want 2000", n)
	}
}
