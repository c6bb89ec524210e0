package restore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/store"
)

// spooled is es in a spool of te's store, as the API hands a large
// streamed request to the engine, which closes it.
func spooled(t *testing.T, te *testEngine, es []entry.Entry) *store.Spool {
	t.Helper()
	sp, err := te.cfg.Store.NewSpool()
	if err != nil {
		t.Fatal(err)
	}
	for len(es) > 0 {
		n := min(len(es), 500)
		if err := sp.Add(es[:n]); err != nil {
			t.Fatal(err)
		}
		es = es[n:]
	}
	return sp
}

func noDiff(ctx context.Context, t *testing.T, te *testEngine) {
	t.Helper()
	cs, err := diffAll(ctx, te.Engine, testBridge)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) > 0 {
		t.Fatalf("the switch differs from the store by %d changes, the first %+v", len(cs), cs[0])
	}
}

// TestStagedWrite: a spooled Put or Sync reaches the switch and the store
// together, all or nothing: a request the store refuses half way (an
// identity another module owns) or the switch refuses (a full table)
// leaves both as they were, with the entry named by its place in the
// request; one with a group goes the usual way.
func TestStagedWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	te := startEngine(ctx, t, writeFaults{})

	owned := pipelineFlows(t, 1, 9000)
	if _, err := te.Put(ctx, testBridge, "other", owned); err != nil {
		t.Fatal(err)
	}
	bad := append(pipelineFlows(t, 8000, 0), owned...)
	_, err := te.PutSpool(ctx, testBridge, "m", spooled(t, te, bad))
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 8000 || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `owned by module "other"`) {
		t.Fatalf("staged Put over another module's flow: %v, want entry 8000 owned by module \"other\"", err)
	}
	if n := dumpCount(ctx, t, te); n != 1 {
		t.Fatalf("the switch holds %d flows after a refused staged write, want 1 (the other module's)", n)
	}
	if n := stored(t, te, "m"); n != 0 {
		t.Fatalf("%d flows stored by a refused staged write", n)
	}

	applied, err := te.PutSpool(ctx, testBridge, "m", spooled(t, te, pipelineFlows(t, 8000, 0)))
	if err != nil || !applied {
		t.Fatalf("staged Put: applied=%v err=%v", applied, err)
	}
	if n := dumpCount(ctx, t, te); n != 8001 {
		t.Fatalf("the switch holds %d flows, want 8001", n)
	}
	noDiff(ctx, t, te)

	next := append(pipelineFlows(t, 4000, 4000), pipelineFlows(t, 4000, 10000)...) // keeps half
	res, err := te.SyncSpool(ctx, testBridge, "m", spooled(t, te, next), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (SyncResult{Applied: true, Added: 4000, Removed: 4000}); res != want {
		t.Fatalf("staged Sync: %+v, want %+v", res, want)
	}
	if n := dumpCount(ctx, t, te); n != 8001 || stored(t, te, "m") != 8000 {
		t.Fatalf("after the Sync the switch holds %d flows (want 8001), the store %d of m (want 8000)", n, stored(t, te, "m"))
	}
	noDiff(ctx, t, te)
	if !te.Engine.bridges[testBridge].isConverged() {
		t.Fatal("bridge not converged after staged writes")
	}

	lines := fullTable5(ctx, t, te)
	_, err = te.SyncSpool(ctx, testBridge, "m", spooled(t, te, flows(t, lines...)), false)
	if !errors.As(err, &ee) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "TABLE_FULL") {
		t.Fatalf("staged Sync into a full table: %v, want INVALID_ARGUMENT naming an entry and OFPFMFC_TABLE_FULL", err)
	}
	if ee.Index < 0 || ee.Index >= len(lines) {
		t.Fatalf("refused entry %d, not one of the request's %d", ee.Index, len(lines))
	}
	if n := dumpCount(ctx, t, te); n != 8001 || stored(t, te, "m") != 8000 {
		t.Fatalf("after a refused Sync the switch holds %d flows (want 8001), the store %d of m (want 8000)", n, stored(t, te, "m"))
	}
	noDiff(ctx, t, te)

	// The two staged writes that went through, not the two refused.
	if n := counter(t, te, "flowstate_staged_writes_total"); n != 2 {
		t.Fatalf("flowstate_staged_writes_total %v, want 2", n)
	}

	// A group in the request: written the usual way, from the spool.
	withGroup := append([]entry.Entry{textEntry(t, entry.KindGroup, "group_id=7,type=select,bucket=actions=drop")},
		flows(t, "table=0,priority=20,ip,actions=group:7")...)
	if applied, err := te.PutSpool(ctx, testBridge, "lb", spooled(t, te, withGroup)); err != nil || !applied {
		t.Fatalf("spooled Put with a group: applied=%v err=%v", applied, err)
	}
	if out, err := te.sb.Ofctl(ctx, "dump-groups", testBridge); err != nil || !strings.Contains(out, "group_id=7") {
		t.Fatalf("group 7 not on the switch: %v\n%s", err, out)
	}
	noDiff(ctx, t, te)

	// Past maxUnstaged such a request is refused before it is read into
	// memory, naming the limit and the way out; nothing changes.
	defer func(n int) { maxUnstaged = n }(maxUnstaged)
	maxUnstaged = 100
	tooLarge := append([]entry.Entry{textEntry(t, entry.KindGroup, "group_id=8,type=select,bucket=actions=drop")},
		pipelineFlows(t, 200, 20000)...)
	before := dumpCount(ctx, t, te)
	_, err = te.PutSpool(ctx, testBridge, "lb2", spooled(t, te, tooLarge))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "limit of 100") || !strings.Contains(err.Error(), "module of their own") {
		t.Fatalf("spooled Put of 201 entries with a group past a limit of 100: %v, want INVALID_ARGUMENT naming the limit and the remedy", err)
	}
	if n := stored(t, te, "lb2"); n != 0 {
		t.Fatalf("%d entries stored by a refused request", n)
	}
	if n := dumpCount(ctx, t, te); n != before {
		t.Fatalf("the switch holds %d flows after a refused request, want %d", n, before)
	}
	noDiff(ctx, t, te)
	// The same flows alone stage on disk.
	if applied, err := te.PutSpool(ctx, testBridge, "lb2", spooled(t, te, tooLarge[1:])); err != nil || !applied {
		t.Fatalf("the same flows without the group: applied=%v err=%v", applied, err)
	}
	noDiff(ctx, t, te)
}

// TestStagedStoreFailsAfterApply: the switch took a staged write, then the
// store could not commit it: the bridge replays, which takes the write off
// the switch again; nothing is stored.
func TestStagedStoreFailsAfterApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var armed atomic.Bool
	errDisk := errors.New("disk gone")
	te := startEngine(ctx, t, writeFaults{beforeStoreCommit: func() error {
		if armed.CompareAndSwap(true, false) {
			return errDisk
		}
		return nil
	}})
	t0 := time.Now()
	armed.Store(true)
	if _, err := te.PutSpool(ctx, testBridge, "m", spooled(t, te, pipelineFlows(t, 3000, 0))); !errors.Is(err, errDisk) {
		t.Fatalf("staged Put: %v, want the store's error", err)
	}
	convergedAfter(ctx, t, te, t0)
	if n := stored(t, te, "m"); n != 0 {
		t.Fatalf("%d entries stored by a failed staged write", n)
	}
	if n := dumpCount(ctx, t, te); n != 0 {
		t.Fatalf("the switch holds %d of the failed write's flows after the replay", n)
	}
}

// TestStagedOutcomeUnknown: when the switch's verdict on a staged bundle is
// lost (here: replaced by a connection error), the write is stored,
// reported not applied, and the replay makes the switch equal to the store.
func TestStagedOutcomeUnknown(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var armed atomic.Bool
	te := startEngine(ctx, t, writeFaults{streamVerdict: func(err error) error {
		if armed.CompareAndSwap(true, false) {
			// What the verdict says does not matter: the bundle may or may
			// not have been committed.
			return errors.New("connection reset (injected)")
		}
		return err
	}})
	t0 := time.Now()
	armed.Store(true)
	applied, err := te.PutSpool(ctx, testBridge, "m", spooled(t, te, pipelineFlows(t, 3000, 0)))
	if err != nil || applied {
		t.Fatalf("staged Put with a lost verdict: applied=%v err=%v, want stored, not applied", applied, err)
	}
	convergedAfter(ctx, t, te, t0)
	if n := stored(t, te, "m"); n != 3000 {
		t.Fatalf("%d entries stored, want 3000", n)
	}
	if n := dumpCount(ctx, t, te); n != 3000 {
		t.Fatalf("the switch holds %d flows after the replay, want 3000", n)
	}
}

// TestStagedCallerGivesUp: a caller whose context ends once its staged write
// was taken gets ErrOutcomeUnknown at once; the write goes on, reads the
// spool it was handed (the caller's side no longer closes it) and is stored
// and applied.
func TestStagedCallerGivesUp(t *testing.T) {
	ctx, te, h := startHeld(t, 1)
	sp := spooled(t, te, pipelineFlows(t, 3000, 0))
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := te.PutSpool(cctx, testBridge, "m", sp)
		done <- err
	}()
	h.wait(ctx, t, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("caller gone after its staged write was taken: %v, want ErrOutcomeUnknown", err)
		}
	case <-ctx.Done():
		t.Fatal("the caller did not return")
	}
	h.held[1].open()
	poll(ctx, t, "the write stored", func() bool { return stored(t, te, "m") == 3000 })
	poll(ctx, t, "the write applied", func() bool { return dumpCount(ctx, t, te) == 3000 })
	noDiff(ctx, t, te)
}
