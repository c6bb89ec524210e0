package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

// pipeCount counts the batches and requests pipes sent.
type pipeCount struct{ batches, reqs atomic.Int32 }

func (c *pipeCount) piped(n int) {
	c.batches.Add(1)
	c.reqs.Add(int32(n))
}

// writerFlows are the n flows of writer w's round: distinct identities per
// writer, their actions set by round.
func writerFlows(t *testing.T, w, n int, actions string) []entry.Entry {
	t.Helper()
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("table=3,priority=10,ip,nw_src=10.%d.%d.%d,actions=%s", w, i>>8&255, i&255, actions)
	}
	return flows(t, lines...)
}

// putConcurrently starts writers goroutines, each Putting its
// writerFlows, per flows at a time, puts times; the channel yields their
// errors (with applied, a write not applied is one) and is closed once they
// are all done.
func putConcurrently(ctx context.Context, t *testing.T, te *testEngine, writers, puts, per int, actions string, applied bool) <-chan error {
	errs := make(chan error, writers*puts)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			es := writerFlows(t, w, puts*per, actions)
			for i := range puts {
				ok, err := te.Writes().Put(ctx, testBridge, fmt.Sprint("w", w), write.Declared{Entries: es[i*per : (i+1)*per]})
				if err == nil && applied && !ok {
					err = errors.New("not applied on a live bridge")
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d, put %d: %w", w, i, err)
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(errs)
	}()
	return errs
}

// TestPipelinedWrites: concurrent Puts go through pipes (every request of
// them: no overlap, a live bridge), new and then changed, and leave the
// switch equal to the store with every flow on it.
func TestPipelinedWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var count pipeCount
	te := startEngine(ctx, t, &Faults{Piped: count.piped})
	const writers, puts, per = 8, 10, 50
	for round, actions := range []string{"drop", "normal"} {
		for err := range putConcurrently(ctx, t, te, writers, puts, per, actions, true) {
			t.Errorf("round %d: %v", round, err)
		}
		if t.Failed() {
			t.FailNow()
		}
		if got, want := count.reqs.Load(), int32((round+1)*writers*puts); got != want {
			t.Fatalf("round %d: %d requests went through pipes, want all %d", round, got, want)
		}
		out, err := te.sb.Ofctl(ctx, "dump-flows", testBridge, "table=3")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(strings.ToLower(out), "actions="+actions); n != writers*puts*per {
			t.Fatalf("round %d: the switch holds %d flows of table 3 with actions=%s, want %d", round, n, actions, writers*puts*per)
		}
		if cs, err := diffAll(ctx, te.Engine, testBridge); err != nil || len(cs) != 0 {
			t.Fatalf("round %d: diff: %d changes, %v", round, len(cs), err)
		}
	}
	t.Logf("%d requests in %d pipelined batches", count.reqs.Load(), count.batches.Load())
}

// TestPipeRefusalsAndOverlap: requests sharing a pipelined batch get what
// group commit gives them. A plan the store refuses (a group nobody
// declared) fails alone; a request changing what an earlier one of the
// batch changes goes after it, and wins; the request whose flows the switch
// refuses fails alone, naming its entry, and the others of its batch are
// stored and applied.
func TestPipeRefusalsAndOverlap(t *testing.T) {
	var count pipeCount
	ctx, e, h := startHeldWith(t, &Faults{Piped: count.piped}, 1)
	full := fullTable5(ctx, t, e)

	first := goPut(ctx, e, "first", flow(t, 1))
	h.wait(ctx, t, 1)
	reqs := []struct {
		module string
		es     []entry.Entry
	}{
		{"a", pipelineFlows(t, 10, 0)},
		{"bad", flows(t, "table=1,priority=5,ip,actions=group:7")},
		{"b", flows(t, "table=2,priority=9,ip,actions=drop")},
		{"b", flows(t, "table=2,priority=9,ip,actions=normal")},
		{"full", flows(t, full...)},
		{"c", pipelineFlows(t, 10, 100)},
	}
	var outs []<-chan outcome
	for i, r := range reqs {
		outs = append(outs, goPut(ctx, e, r.module, r.es))
		poll(ctx, t, "request queued", func() bool { return queued(e) == i+1 })
	}
	h.held[1].open()
	if o := await(ctx, t, "first", first); o.err != nil || !o.applied {
		t.Fatalf("first: applied %v, %v", o.applied, o.err)
	}
	for i, c := range outs {
		o := await(ctx, t, reqs[i].module, c)
		var ee *errdefs.EntryError
		switch reqs[i].module {
		case "bad":
			if !errors.Is(o.err, errdefs.ErrFailedPrecondition) {
				t.Errorf("bad request: %v, want FAILED_PRECONDITION", o.err)
			}
		case "full":
			if !errors.As(o.err, &ee) || !strings.Contains(o.err.Error(), "TABLE_FULL") || ee.Index < 100 {
				t.Errorf("request into a full table: %v, want OFPFMFC_TABLE_FULL naming an entry past the 100th", o.err)
			}
		default:
			if o.err != nil || !o.applied {
				t.Errorf("request %d (%s): applied %v, %v", i, reqs[i].module, o.applied, o.err)
			}
		}
	}
	if count.batches.Load() < 2 {
		t.Fatalf("%d pipelined batches: the requests did not go through a pipe", count.batches.Load())
	}
	for module, want := range map[string]int{"a": 10, "c": 10, "b": 1, "full": 0, "bad": 0} {
		if n := stored(t, e, module); n != want {
			t.Errorf("module %s: %d entries stored, want %d", module, n, want)
		}
	}
	out, err := e.sb.Ofctl(ctx, "dump-flows", testBridge, "table=2")
	if err != nil || !strings.Contains(out, "actions=NORMAL") {
		t.Errorf("table 2 does not hold the later request's flow (%v):\n%s", err, out)
	}
	if cs, err := diffAll(ctx, e.Engine, testBridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff: %d changes, %v", len(cs), err)
	}
}

// TestPipeStoreFailsAfterApply: the switch accepted a pipelined batch of two
// requests and its store transaction then failed. The switch may now hold
// what the store does not: the bridge replays, and each request runs again
// alone through group commit (as after any failure that names no request),
// so both are stored and the switch ends equal to the store.
func TestPipeStoreFailsAfterApply(t *testing.T) {
	errDisk := errors.New("disk gone")
	disk := &oneShot{err: errDisk}
	var count pipeCount
	ctx, e, h := startHeldWith(t, &Faults{Piped: count.piped, BeforeStoreCommit: disk.fire}, 2)
	if _, err := e.Writes().Put(ctx, testBridge, "first", write.Declared{Entries: flow(t, 1)}); err != nil {
		t.Fatal(err)
	}
	// The same Put again changes nothing, so it has no transaction: the
	// next one, of the two requests, is the one that fails.
	same := goPut(ctx, e, "first", flow(t, 1))
	h.wait(ctx, t, 2)
	a := goPut(ctx, e, "a", pipelineFlows(t, 10, 0))
	poll(ctx, t, "request queued", func() bool { return queued(e) == 1 })
	c := goPut(ctx, e, "c", pipelineFlows(t, 10, 100))
	poll(ctx, t, "request queued", func() bool { return queued(e) == 2 })
	before := count.batches.Load()
	t0 := time.Now()
	disk.arm()
	h.held[2].open()
	if o := await(ctx, t, "same", same); o.err != nil {
		t.Fatal(o.err)
	}
	for what, ch := range map[string]<-chan outcome{"a": a, "c": c} {
		if o := await(ctx, t, what, ch); o.err != nil {
			t.Fatalf("%s: %v, want it stored by its second run", what, o.err)
		}
	}
	if !disk.fired() {
		t.Fatal("the store's failure was never injected")
	}
	if got := count.batches.Load() - before; got < 2 {
		t.Fatalf("%d pipelined batches, want the unchanged one and the two requests", got)
	}
	convergedAfter(ctx, t, e, t0)
	for _, module := range []string{"a", "c"} {
		if n := stored(t, e, module); n != 10 {
			t.Errorf("module %s: %d entries stored, want 10", module, n)
		}
	}
}

// TestPipeSwitchGone: vswitchd stops and starts again while eight writers
// Put through pipes. No write fails (what the switch may not hold is stored
// for the replay), and once the bridge is back the switch equals the store,
// which holds every flow.
func TestPipeSwitchGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var count pipeCount
	te := startEngine(ctx, t, &Faults{Piped: count.piped})
	const writers, puts, per = 8, 30, 100
	errs := putConcurrently(ctx, t, te, writers, puts, per, "drop", false)
	poll(ctx, t, "pipelined batches", func() bool { return count.batches.Load() >= 4 })
	t0 := time.Now()
	if err := te.sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := te.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	for err := range errs {
		t.Error(err)
	}
	convergedAfter(ctx, t, te, t0)
	var n int
	if err := te.cfg.Store.Entries().ScanFlows(testBridge, nil, func(store.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != writers*puts*per {
		t.Fatalf("stored %d flows, want %d", n, writers*puts*per)
	}
	if got := strings.Count(mustDump(ctx, t, te), "table=3"); got != writers*puts*per {
		t.Fatalf("the switch holds %d flows of table 3, want %d", got, writers*puts*per)
	}
}

func mustDump(ctx context.Context, t *testing.T, te *testEngine) string {
	t.Helper()
	out, err := te.sb.Ofctl(ctx, "dump-flows", testBridge, "table=3")
	if err != nil {
		t.Fatal(err, out)
	}
	return out
}

// TestPipeRefusalInGroup: the storer takes two batches into one transaction
// and the switch refuses the second (as a whole, as when it expires a
// bundle). The transaction is written again with the first alone, which is
// stored and applied; the second goes back to group commit, which sends it
// again. Both end stored and on the switch.
func TestPipeRefusalInGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var count pipeCount
	var verdicts atomic.Int32
	release := make(chan struct{})
	te := startEngine(ctx, t, &Faults{Piped: count.piped, StreamVerdict: func(err error) error {
		switch verdicts.Add(1) {
		case 1: // the first batch's: the storer waits here while two more are sent
			<-release
		case 3: // the third's, in the storer's next transaction with the second
			return &plan.RejectedError{Err: errors.New("OFPBFC_TIMEOUT (injected)")}
		}
		return err
	}})
	x := goPut(ctx, te, "x", pipelineFlows(t, 10, 0))
	poll(ctx, t, "the first batch sent", func() bool { return count.batches.Load() == 1 })
	a := goPut(ctx, te, "a", pipelineFlows(t, 10, 100))
	poll(ctx, t, "the second batch sent", func() bool { return count.batches.Load() == 2 })
	b := goPut(ctx, te, "b", pipelineFlows(t, 10, 200))
	poll(ctx, t, "the third batch sent", func() bool { return count.batches.Load() == 3 })
	close(release)
	for what, c := range map[string]<-chan outcome{"x": x, "a": a, "b": b} {
		if o := await(ctx, t, what, c); o.err != nil || !o.applied {
			t.Fatalf("%s: applied %v, %v", what, o.applied, o.err)
		}
	}
	if n := verdicts.Load(); n < 4 {
		t.Fatalf("%d verdicts, want the refused batch sent again", n)
	}
	// The first batch's transaction, the one of the second and third, and
	// group commit's of the third sent again.
	if n := writeBatches(t, te); n != 3 {
		t.Fatalf("%v write transactions, want 3: the second and third batches did not share one", n)
	}
	for _, module := range []string{"x", "a", "b"} {
		if n := stored(t, te, module); n != 10 {
			t.Errorf("module %s: %d entries stored, want 10", module, n)
		}
	}
	if n := dumpCount(ctx, t, te); n != 30 {
		t.Fatalf("the switch holds %d flows, want 30", n)
	}
	if cs, err := diffAll(ctx, te.Engine, testBridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff: %d changes, %v", len(cs), err)
	}
}

// TestPipeAllPlansFail: a pipe whose first batch enters nothing (its one
// Put is refused at plan time: another module owns the flow) closes, and
// the bridge goes on: a reconcile and the next write run. The pipe used to
// wait for an "empty" signal that only a stored batch sends, holding b.mu
// for ever (found by the proxy's conflict test).
func TestPipeAllPlansFail(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var count pipeCount
	e := startEngine(ctx, t, &Faults{Piped: count.piped})
	f := flow(t, 1)
	if _, err := e.Writes().Put(ctx, testBridge, "first", write.Declared{Entries: f}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Writes().Put(ctx, testBridge, "second", write.Declared{Entries: f}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a Put of another module's flow: %v, want FAILED_PRECONDITION", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if _, err := e.Reconcile(rctx, testBridge); err != nil {
		t.Fatalf("reconcile after a refused pipelined Put: %v (the bridge is wedged)", err)
	}
	if _, err := e.Writes().Put(rctx, testBridge, "second", write.Declared{Entries: flow(t, 2)}); err != nil {
		t.Fatalf("the next Put after a refused pipelined Put: %v", err)
	}
}
