package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/restore"
)

// undoChildEnv makes the test binary run as flowstated for
// TestPutKilledBeforeRefusalUndone (TestMain), its pfChildConfig the value.
const undoChildEnv = "FLOWSTATE_TEST_UNDO_CHILD"

// runUndoChild is flowstated whose pipe blocks (and tells, by creating the
// marker file) when the switch refused a Put the store already committed,
// before the store takes it back: the parent kills it there.
func runUndoChild(raw string) int {
	return pfRunChild(raw, func(cc pfChildConfig, cfg *server.Config) {
		cfg.Faults = &server.Faults{Engine: &restore.Faults{BeforeUndo: func() { pfAtFault(cc.Marker) }}}
	})
}

// TestPutKilledBeforeRefusalUndone: a Put's store commit overlaps the
// switch's verdict, so flowstated may die (SIGKILL) after the store
// committed a flow the switch then refused (a table at its flow_limit) and
// before the store took it back. The Put is never acknowledged; the next
// start finds the flow stored, its replay quarantines it (named in Status,
// with the switch's refusal), the bridge converges, and nothing else is
// lost: what was written before is stored and on the switch.
func TestPutKilledBeforeRefusalUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e := testenv.New(ctx, t)
	if out, err := e.Sandbox.Vsctl(ctx, "--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
		"--", "set", "Bridge", "br-int", "flow_tables:5=@ft"); err != nil {
		t.Fatal(err, out)
	}
	marker := filepath.Join(t.TempDir(), "before-undo")
	child := pfStartChild(t, e, undoChildEnv, marker)
	e.WaitConverged(ctx)
	child.alive(t)

	base := []string{
		"table=3,priority=10,ip,nw_dst=10.35.0.1,actions=drop",
		"table=3,priority=10,ip,nw_dst=10.35.0.2,actions=drop",
		"table=5,priority=10,ip,nw_dst=10.35.0.3,actions=drop", // fills table 5
	}
	const refused = "table=5,priority=20,ip,nw_dst=10.35.0.9,actions=drop"
	if _, err := e.Client.Put(ctx, client.Module{Bridge: "br-int", Name: "base"}, texts(base)...); err != nil {
		t.Fatal(err)
	}
	// The client waits for flowstated until its context ends: this Put's
	// ends once flowstated is killed.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	put := make(chan error, 1)
	go func() {
		_, err := e.Client.Put(pctx, client.Module{Bridge: "br-int", Name: "pod"}, client.FlowText(refused))
		put <- err
	}()
	testenv.Poll(ctx, t, "the child before its undo", func() (bool, error) {
		child.alive(t)
		_, err := os.Stat(marker)
		return err == nil, nil
	})
	select {
	case err := <-put:
		t.Fatalf("the refused Put was answered (%v) before the store took it back", err)
	default:
	}
	child.kill(ctx, t)
	pcancel()
	if err := <-put; err == nil || errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("the Put of flowstated killed before its undo: %v, want an error that is not a refusal (never answered)", err)
	}

	e.Start(ctx)
	e.WaitConverged(ctx)
	var st *client.Status
	testenv.Poll(ctx, t, "the refused flow quarantined", func() (bool, error) {
		var err error
		st, err = e.Client.Status(ctx)
		return err == nil && len(st.Quarantined) == 1 && st.Bridges[0].Converged, err
	})
	q := st.Quarantined[0]
	if !strings.Contains(q.Entry.Text, "nw_dst=10.35.0.9") || q.Entry.Module != "pod" || !strings.Contains(q.Error, "TABLE_FULL") {
		t.Fatalf("quarantined %q of module %q (%s), want the refused flow of pod, refused as TABLE_FULL", q.Entry.Text, q.Entry.Module, q.Error)
	}
	stored, err := e.Client.List(ctx, client.Filter{Bridge: "br-int", Module: "base"})
	if err != nil || len(stored) != len(base) {
		t.Fatalf("module base holds %d entries (%v), want its %d", len(stored), err, len(base))
	}
	dump, err := e.Sandbox.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	markers := []string{"nw_dst=10.35.0.1", "nw_dst=10.35.0.2", "nw_dst=10.35.0.3", "nw_dst=10.35.0.9"}
	if on := pfIn(dump, markers); !slices.Equal(on, markers[:3]) {
		t.Fatalf("the switch holds %q, want the earlier flows %q and not the refused one", on, markers[:3])
	}
}

// eventRevision is the revision of flowstated's event log now: a Watch from
// nothing starts with a heartbeat naming it.
func eventRevision(ctx context.Context, t *testing.T, c *client.Client) uint64 {
	t.Helper()
	var rev uint64
	errStop := errors.New("stop")
	if err := c.Watch(ctx, client.Cursor{}, func(ev client.Event) error {
		rev = ev.Revision
		return errStop
	}); !errors.Is(err, errStop) {
		t.Fatal(err)
	}
	return rev
}

// TestPutRefusedSeenByNobody: a Put the switch refuses, whose store commit
// ran while the switch decided (and was then taken back), is answered
// INVALID_ARGUMENT naming the switch's error; afterwards List holds nothing
// of it, the flow written before is untouched, and Watch was told nothing
// (no event is published for a write, refused or not).
func TestPutRefusedSeenByNobody(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := testenv.Start(ctx, t)
	if out, err := e.Sandbox.Vsctl(ctx, "--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
		"--", "set", "Bridge", "br-int", "flow_tables:5=@ft"); err != nil {
		t.Fatal(err, out)
	}
	pod := client.Module{Bridge: "br-int", Name: "pod"}
	if _, err := e.Client.Put(ctx, pod, client.FlowText("table=5,priority=10,ip,nw_dst=10.36.0.1,actions=drop")); err != nil {
		t.Fatal(err)
	}
	before, err := e.Client.List(ctx, client.Filter{Bridge: "br-int"})
	if err != nil {
		t.Fatal(err)
	}
	rev := eventRevision(ctx, t, e.Client)
	_, err = e.Client.Put(ctx, pod, client.FlowText("table=5,priority=20,ip,nw_dst=10.36.0.2,actions=drop"))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "TABLE_FULL") {
		t.Fatalf("a Put into a full table: %v, want INVALID_ARGUMENT naming OFPFMFC_TABLE_FULL", err)
	}
	after, err := e.Client.List(ctx, client.Filter{Bridge: "br-int"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the refused Put the store lists %v, want what it held before: %v", after, before)
	}
	if now := eventRevision(ctx, t, e.Client); now != rev {
		t.Fatalf("the event log went from revision %d to %d over a refused Put, want no event", rev, now)
	}
}
