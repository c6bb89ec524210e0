package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

// spooled is es in a spool of te's store, as the API hands a large
// streamed request to the engine, which closes it.
func spooled(t *testing.T, te *testEngine, es []entry.Entry) *store.Spool {
	t.Helper()
	sp, err := te.cfg.Store.Staging().NewSpool()
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
// request.
func TestStagedWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	te := startEngine(ctx, t, &Faults{})

	owned := pipelineFlows(t, 1, 9000)
	if _, err := te.Writes().Put(ctx, testBridge, "other", write.Declared{Entries: owned}); err != nil {
		t.Fatal(err)
	}
	bad := append(pipelineFlows(t, 8000, 0), owned...)
	_, err := te.Writes().Put(ctx, testBridge, "m", write.Declared{Spool: spooled(t, te, bad)})
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

	applied, err := te.Writes().Put(ctx, testBridge, "m", write.Declared{Spool: spooled(t, te, pipelineFlows(t, 8000, 0))})
	if err != nil || !applied {
		t.Fatalf("staged Put: applied=%v err=%v", applied, err)
	}
	if n := dumpCount(ctx, t, te); n != 8001 {
		t.Fatalf("the switch holds %d flows, want 8001", n)
	}
	noDiff(ctx, t, te)

	next := append(pipelineFlows(t, 4000, 4000), pipelineFlows(t, 4000, 10000)...) // keeps half
	res, err := te.Writes().Sync(ctx, testBridge, "m", write.Declared{Spool: spooled(t, te, next)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (write.SyncResult{Applied: true, Added: 4000, Removed: 4000}); res != want {
		t.Fatalf("staged Sync: %+v, want %+v", res, want)
	}
	if n := dumpCount(ctx, t, te); n != 8001 || stored(t, te, "m") != 8000 {
		t.Fatalf("after the Sync the switch holds %d flows (want 8001), the store %d of m (want 8000)", n, stored(t, te, "m"))
	}
	noDiff(ctx, t, te)
	if !te.Engine.bridges[testBridge].IsConverged() {
		t.Fatal("bridge not converged after staged writes")
	}

	lines := fullTable5(ctx, t, te)
	_, err = te.Writes().Sync(ctx, testBridge, "m", write.Declared{Spool: spooled(t, te, flows(t, lines...))}, false)
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

}

// linesUsing are n flows of table 0 from address from on whose actions are
// actions.
func linesUsing(n, from int, actions string) []string {
	lines := make([]string, n)
	for i := range lines {
		x := from + i
		lines[i] = fmt.Sprintf("table=0,priority=10,ip,nw_dst=10.%d.%d.%d,actions=%s", x>>16&255, x>>8&255, x&255, actions)
	}
	return lines
}

// TestStagedGroupsAndMeters: a spooled request with groups and meters is
// staged too, in the order the switch needs: meters before the bundle,
// groups ahead of the flows that use them, removed ones after. It stays all
// or nothing: the store refusing it (a removed group another module uses)
// or the switch refusing it (a flow into a full table, a meter band it does
// not support) leaves switch and store as they were, the meters sent ahead
// taken back.
func TestStagedGroupsAndMeters(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	te := startEngine(ctx, t, &Faults{})
	dump := func(what string) string {
		t.Helper()
		out, err := te.sb.Ofctl(ctx, what, testBridge)
		if err != nil {
			t.Fatal(err, out)
		}
		return out
	}
	has := func(what string, want, not []string) {
		t.Helper()
		out := dump(what)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s lacks %q:\n%s", what, w, out)
			}
		}
		for _, n := range not {
			if strings.Contains(out, n) {
				t.Fatalf("%s holds %q:\n%s", what, n, out)
			}
		}
	}
	group7 := textEntry(t, entry.KindGroup, "group_id=7,type=select,bucket=actions=drop")
	group7b := textEntry(t, entry.KindGroup, "group_id=7,type=select,bucket=weight:10,actions=drop,bucket=weight:20,actions=drop")
	group8 := textEntry(t, entry.KindGroup, "group_id=8,type=all,bucket=actions=drop")
	meter := func(id int) entry.Entry {
		return textEntry(t, entry.KindMeter, fmt.Sprintf("meter=%d,kbps,band=type=drop,rate=1000", id))
	}
	req := func(head []entry.Entry, lines ...[]string) []entry.Entry {
		// The groups and meters among the flows, as a module may send them.
		var fs []entry.Entry
		for _, ls := range lines {
			fs = append(fs, flows(t, ls...)...)
		}
		out := append(fs[:len(fs)/2:len(fs)/2], head...)
		return append(out, fs[len(fs)/2:]...)
	}

	// A Put of groups, a meter and the flows that use them.
	first := req([]entry.Entry{group7, meter(3)}, linesUsing(1500, 0, "group:7"), linesUsing(1500, 1500, "meter:3,resubmit(,1)"))
	if applied, err := te.Writes().Put(ctx, testBridge, "lb", write.Declared{Spool: spooled(t, te, first)}); err != nil || !applied {
		t.Fatalf("staged Put with a group and a meter: applied=%v err=%v", applied, err)
	}
	has("dump-groups", []string{"group_id=7"}, nil)
	has("dump-meters", []string{"meter=3"}, nil)
	if n := dumpCount(ctx, t, te); n != 3000 {
		t.Fatalf("the switch holds %d flows, want 3000", n)
	}
	noDiff(ctx, t, te)

	// A Sync that changes group 7, adds group 8 and meter 4 for new flows,
	// and drops meter 3 with the flows that used it.
	second := req([]entry.Entry{group7b, group8, meter(4)}, linesUsing(1500, 0, "group:7"), linesUsing(1500, 5000, "meter:4,group:8"))
	res, err := te.Writes().Sync(ctx, testBridge, "lb", write.Declared{Spool: spooled(t, te, second)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (write.SyncResult{Applied: true, Added: 1502, Changed: 1, Removed: 1501}); res != want {
		t.Fatalf("staged Sync: %+v, want %+v", res, want)
	}
	has("dump-groups", []string{"group_id=7", "weight:20", "group_id=8"}, nil)
	has("dump-meters", []string{"meter=4"}, []string{"meter=3"})
	if n := dumpCount(ctx, t, te); n != 3000 {
		t.Fatalf("the switch holds %d flows after the Sync, want 3000", n)
	}
	noDiff(ctx, t, te)

	// Another module's flow uses group 8: a Sync that drops it (adding
	// meter 9 on the way) is refused by the store once every flow is
	// staged, before the bundle commits; meter 9 is taken back.
	if _, err := te.Writes().Put(ctx, testBridge, "other", write.Declared{Entries: flows(t, "table=1,priority=5,ip,actions=group:8")}); err != nil {
		t.Fatal(err)
	}
	flowsBefore, storedBefore := dumpCount(ctx, t, te), stored(t, te, "lb")
	third := req([]entry.Entry{group7b, meter(9)}, linesUsing(3000, 0, "group:7"))
	_, err = te.Writes().Sync(ctx, testBridge, "lb", write.Declared{Spool: spooled(t, te, third)}, true)
	var iu *store.InUseError
	if !errors.As(err, &iu) || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "other") {
		t.Fatalf("staged Sync dropping a group module other uses: %v, want an InUseError naming module other", err)
	}
	has("dump-meters", []string{"meter=4"}, []string{"meter=9"})
	has("dump-groups", []string{"group_id=8"}, nil)
	if n, m := dumpCount(ctx, t, te), stored(t, te, "lb"); n != flowsBefore || m != storedBefore {
		t.Fatalf("after a refused Sync the switch holds %d flows (want %d), the store %d of lb (want %d)", n, flowsBefore, m, storedBefore)
	}
	noDiff(ctx, t, te)

	// The switch refuses a flow (a full table): meter 10, sent ahead of
	// the bundle, is taken back.
	full := fullTable5(ctx, t, te)
	fourth := req([]entry.Entry{group7b, group8, meter(4), meter(10)}, linesUsing(1500, 0, "group:7"), full)
	_, err = te.Writes().Sync(ctx, testBridge, "lb", write.Declared{Spool: spooled(t, te, fourth)}, true)
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "TABLE_FULL") {
		t.Fatalf("staged Sync into a full table: %v, want INVALID_ARGUMENT naming an entry and OFPFMFC_TABLE_FULL", err)
	}
	has("dump-meters", []string{"meter=4"}, []string{"meter=10"})
	if n, m := dumpCount(ctx, t, te), stored(t, te, "lb"); n != flowsBefore || m != storedBefore {
		t.Fatalf("after a refused Sync the switch holds %d flows (want %d), the store %d of lb (want %d)", n, flowsBefore, m, storedBefore)
	}
	noDiff(ctx, t, te)

	// The switch refuses the meter itself, before the bundle opens, while
	// the store stages more flows than the stream buffers: the write ends
	// with the refusal, naming the meter.
	bad := textEntry(t, entry.KindMeter, "meter=11,kbps,band=type=dscp_remark,rate=1000,prec_level=1")
	fifth := req([]entry.Entry{bad}, linesUsing(6000, 20000, "drop"))
	_, err = te.Writes().Put(ctx, testBridge, "lb", write.Declared{Spool: spooled(t, te, fifth)})
	if !errors.As(err, &ee) || ee.Index != 3000 || !strings.Contains(err.Error(), "BAD_BAND") {
		t.Fatalf("staged Put with a meter the switch refuses: %v, want entry 3000 refused with OFPMMFC_BAD_BAND", err)
	}
	has("dump-meters", nil, []string{"meter=11"})
	if n, m := dumpCount(ctx, t, te), stored(t, te, "lb"); n != flowsBefore || m != storedBefore {
		t.Fatalf("after a refused Put the switch holds %d flows (want %d), the store %d of lb (want %d)", n, flowsBefore, m, storedBefore)
	}
	noDiff(ctx, t, te)
	if !te.Engine.bridges[testBridge].IsConverged() {
		t.Fatal("bridge not converged after refused staged writes")
	}
}

// TestStagedStoreFailsAfterApply: the switch took a staged write, then the
// store could not commit it: the bridge replays, which takes the write off
// the switch again; nothing is stored.
func TestStagedStoreFailsAfterApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errDisk := errors.New("disk gone")
	disk := &oneShot{err: errDisk}
	te := startEngine(ctx, t, &Faults{BeforeStoreCommit: disk.fire})
	t0 := time.Now()
	disk.arm()
	if _, err := te.Writes().Put(ctx, testBridge, "m", write.Declared{Spool: spooled(t, te, pipelineFlows(t, 3000, 0))}); !errors.Is(err, errDisk) {
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
	te := startEngine(ctx, t, &Faults{StreamVerdict: func(err error) error {
		if armed.CompareAndSwap(true, false) {
			// What the verdict says does not matter: the bundle may or may
			// not have been committed.
			return errors.New("connection reset (injected)")
		}
		return err
	}})
	t0 := time.Now()
	armed.Store(true)
	applied, err := te.Writes().Put(ctx, testBridge, "m", write.Declared{Spool: spooled(t, te, pipelineFlows(t, 3000, 0))})
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
// was taken gets write.ErrOutcomeUnknown at once; the write goes on, reads the
// spool it was handed (the caller's side no longer closes it) and is stored
// and applied.
func TestStagedCallerGivesUp(t *testing.T) {
	ctx, te, h := startHeld(t, 1)
	sp := spooled(t, te, pipelineFlows(t, 3000, 0))
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := te.Writes().Put(cctx, testBridge, "m", write.Declared{Spool: sp})
		done <- err
	}()
	h.wait(ctx, t, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, write.ErrOutcomeUnknown) {
			t.Fatalf("caller gone after its staged write was taken: %v, want write.ErrOutcomeUnknown", err)
		}
	case <-ctx.Done():
		t.Fatal("the caller did not return")
	}
	h.held[1].open()
	poll(ctx, t, "the write stored", func() bool { return stored(t, te, "m") == 3000 })
	poll(ctx, t, "the write applied", func() bool { return dumpCount(ctx, t, te) == 3000 })
	noDiff(ctx, t, te)
}

// TestDeclaredBoth: a write that declares entries and a spool at once is
// refused as invalid, and stores nothing of either.
func TestDeclaredBoth(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	te := startEngine(ctx, t, &Faults{})
	d := write.Declared{Entries: pipelineFlows(t, 3, 0), Spool: spooled(t, te, pipelineFlows(t, 3, 100))}
	if _, err := te.Writes().Put(ctx, testBridge, "m", d); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "both entries and a spool") {
		t.Fatalf("Put of entries and a spool: %v, want invalid argument naming both", err)
	}
	d.Spool = spooled(t, te, pipelineFlows(t, 3, 100))
	if _, err := te.Writes().Sync(ctx, testBridge, "m", d, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Sync of entries and a spool: %v, want invalid argument", err)
	}
	if n := stored(t, te, "m"); n != 0 {
		t.Fatalf("%d entries stored after the refused writes, want 0", n)
	}
}
