package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

// These tests drive group commit from inside the package, against a private
// OVS sandbox, with faults injected through Config.Faults.

const testBridge = "br0"

// startEngine runs an engine on one sandbox bridge with faults, and waits
// until the bridge has converged.
func startEngine(ctx context.Context, t *testing.T, faults *Faults) *testEngine {
	t.Helper()
	te := newEngine(ctx, t, faults)
	te.run(ctx, t)
	te.waitConverged(ctx, t)
	return te
}

// newEngine makes an engine on one sandbox bridge with faults, not running.
func newEngine(ctx context.Context, t *testing.T, faults *Faults) *testEngine {
	t.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	if err := sb.AddBridge(ctx, testBridge); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	st, err := store.Open(filepath.Join(sb.Dir(), "fs.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e, err := New(Config{
		Store: st, RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{testBridge}, BootID: "test-boot",
		Logger:  slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics: NewMetrics(reg), Faults: faults,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &testEngine{Engine: e, registry: reg, sb: sb}
}

// run runs te until the test ends.
func (te *testEngine) run(ctx context.Context, t *testing.T) {
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		te.Run(rctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
}

// waitConverged waits until te's bridge has converged.
func (te *testEngine) waitConverged(ctx context.Context, t *testing.T) {
	t.Helper()
	poll(ctx, t, "bridge converged", func() bool { return te.bridges[testBridge].IsConverged() })
	// Stopping while the OVSDB dial is in its monitor call trips a data race
	// inside libovsdb v0.7.0 (the reply is written after the cancelled call
	// read it): let the dial finish.
	poll(ctx, t, "ovsdb connected", func() bool { return te.flag.OVSDB() != nil })
}

type testEngine struct {
	*Engine
	registry *prometheus.Registry
	sb       *sandbox.Sandbox
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func poll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// flows encodes ovs-ofctl lines as flow entries.
func flows(t *testing.T, lines ...string) []entry.Entry {
	t.Helper()
	out := make([]entry.Entry, len(lines))
	for i, l := range lines {
		fm, err := ofctl.ParseFlow(l)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := fm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		payload, id, err := entry.Identify(entry.KindFlow, raw)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = entry.Entry{Kind: entry.KindFlow, ID: id, Payload: payload}
	}
	return out
}

func flow(t *testing.T, n int) []entry.Entry {
	return flows(t, fmt.Sprintf("table=1,priority=%d,ip,nw_dst=10.0.0.%d,actions=drop", 100+n, n))
}

// hold makes the owner wait at the batches whose numbers (from 1) are held,
// until released.
type hold struct {
	batches atomic.Int32
	held    map[int32]*heldBatch
}

type heldBatch struct {
	entered, release chan struct{}
	once             sync.Once
	size             atomic.Int32
}

// startHeld starts an engine that holds the given batches, and bounds the
// test.
func startHeld(t *testing.T, batches ...int32) (context.Context, *testEngine, *hold) {
	return startHeldWith(t, &Faults{}, batches...)
}

// startHeldWith is startHeld with faults (whose taken it sets).
func startHeldWith(t *testing.T, faults *Faults, batches ...int32) (context.Context, *testEngine, *hold) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	h := &hold{held: map[int32]*heldBatch{}}
	for _, n := range batches {
		h.held[n] = &heldBatch{entered: make(chan struct{}), release: make(chan struct{})}
	}
	faults.Taken = h.taken
	e := startEngine(ctx, t, faults)
	// Registered after the engine's stop, so it runs before it.
	t.Cleanup(func() {
		for _, g := range h.held {
			g.open()
		}
	})
	return ctx, e, h
}

func (g *heldBatch) open() { g.once.Do(func() { close(g.release) }) }

func (h *hold) taken(n int) {
	if g := h.held[h.batches.Add(1)]; g != nil {
		g.size.Store(int32(n))
		close(g.entered)
		<-g.release
	}
}

func (h *hold) wait(ctx context.Context, t *testing.T, batch int32) {
	t.Helper()
	select {
	case <-h.held[batch].entered:
	case <-ctx.Done():
		t.Fatalf("batch %d never taken", batch)
	}
}

func queued(e *testEngine) int { return e.writes.Queued(testBridge) }

type outcome struct {
	applied bool
	err     error
}

// goPut puts es as module in the background.
func goPut(ctx context.Context, e *testEngine, module string, es []entry.Entry) <-chan outcome {
	c := make(chan outcome, 1)
	go func() {
		applied, err := e.Writes().Put(ctx, testBridge, module, write.Declared{Entries: es})
		c <- outcome{applied, err}
	}()
	return c
}

func await(ctx context.Context, t *testing.T, what string, c <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-c:
		return o
	case <-ctx.Done():
		t.Fatalf("%s did not return", what)
		return outcome{}
	}
}

// stored reports how many entries module has on the bridge.
func stored(t *testing.T, e *testEngine, module string) int {
	t.Helper()
	es, err := e.cfg.Store.Entries().All(testBridge)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range es {
		if en.Module == module {
			n++
		}
	}
	return n
}

// TestWritePanicDoesNotWedge: a panic in a request's op fails the requests of
// its transaction with ErrInternal, and the bridge takes later writes.
func TestWritePanicDoesNotWedge(t *testing.T) {
	ctx, e, h := startHeldWith(t, &Faults{NoPipe: true}, 1)

	first := goPut(ctx, e, "first", flow(t, 1))
	h.wait(ctx, t, 1)
	// Queued behind the held batch, so the two share the next one.
	panicked := make(chan error, 1)
	go func() {
		_, _, err := e.writes.Do(ctx, testBridge, func(*store.Writer) (store.Result, error) { panic("boom") })
		panicked <- err
	}()
	poll(ctx, t, "panicking request queued", func() bool { return queued(e) == 1 })
	mate := goPut(ctx, e, "mate", flow(t, 2))
	poll(ctx, t, "second request queued", func() bool { return queued(e) == 2 })
	h.held[1].open()

	if o := await(ctx, t, "first put", first); o.err != nil || !o.applied {
		t.Fatalf("first put: applied %v, %v", o.applied, o.err)
	}
	if err := <-panicked; !errors.Is(err, errdefs.ErrInternal) {
		t.Fatalf("panicking request: %v, want ErrInternal", err)
	}
	if o := await(ctx, t, "batch mate", mate); !errors.Is(o.err, errdefs.ErrInternal) {
		t.Fatalf("request sharing the panicking batch: %v, want ErrInternal", o.err)
	}
	if n := stored(t, e, "mate"); n != 0 {
		t.Fatalf("the panicked transaction stored %d entries", n)
	}
	applied, err := e.Writes().Put(ctx, testBridge, "later", write.Declared{Entries: flow(t, 3)})
	if err != nil || !applied {
		t.Fatalf("write after the panic: applied %v, %v", applied, err)
	}
	if cs, err := diffAll(ctx, e.Engine, testBridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff after the panic: %d changes, %v", len(cs), err)
	}
}

// TestWriteFollowerGivesUp: while a batch is stuck, a caller whose request is
// still queued returns at once with its ctx error and its request never
// runs; a caller whose request was taken returns at once too, told the
// outcome is unknown, and its request is committed without it.
func TestWriteFollowerGivesUp(t *testing.T) {
	ctx, e, h := startHeld(t, 1)

	takenCtx, cancelTaken := context.WithCancel(ctx)
	defer cancelTaken()
	taken := goPut(takenCtx, e, "taken", flow(t, 1))
	h.wait(ctx, t, 1)
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	defer cancelQueued()
	waiting := goPut(queuedCtx, e, "queued", flow(t, 2))
	poll(ctx, t, "second request queued", func() bool { return queued(e) == 1 })

	// Both return while the batch is still held.
	cancelQueued()
	if o := await(ctx, t, "queued caller", waiting); !errors.Is(o.err, context.Canceled) || errors.Is(o.err, write.ErrOutcomeUnknown) {
		t.Fatalf("queued caller: %v, want context.Canceled", o.err)
	}
	if n := queued(e); n != 0 {
		t.Fatalf("%d requests left in the queue", n)
	}
	cancelTaken()
	if o := await(ctx, t, "taken caller", taken); !errors.Is(o.err, write.ErrOutcomeUnknown) || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("taken caller: %v, want write.ErrOutcomeUnknown wrapping context.Canceled", o.err)
	}

	h.held[1].open()
	poll(ctx, t, "the taken request committed", func() bool { return stored(t, e, "taken") == 1 })
	// A later write runs after the dropped one would have: it never ran.
	if _, err := e.Writes().Put(ctx, testBridge, "later", write.Declared{Entries: flow(t, 3)}); err != nil {
		t.Fatal(err)
	}
	if n := stored(t, e, "queued"); n != 0 {
		t.Fatalf("the dropped request stored %d entries", n)
	}
}

// TestWriteCallerReturnsWhenDone: a caller returns once its own request is
// committed, while later requests are queued and the next batch is stuck.
func TestWriteCallerReturnsWhenDone(t *testing.T) {
	ctx, e, h := startHeld(t, 1, 2)

	first := goPut(ctx, e, "first", flow(t, 1))
	h.wait(ctx, t, 1)
	second := goPut(ctx, e, "second", flow(t, 2))
	poll(ctx, t, "second request queued", func() bool { return queued(e) == 1 })
	h.held[1].open()

	if o := await(ctx, t, "first caller", first); o.err != nil || !o.applied {
		t.Fatalf("first: applied %v, %v", o.applied, o.err)
	}
	h.wait(ctx, t, 2)
	third := goPut(ctx, e, "third", flow(t, 3))
	poll(ctx, t, "third request queued", func() bool { return queued(e) == 1 })
	select {
	case o := <-second:
		t.Fatalf("second returned while its batch is held: %v", o.err)
	default:
	}
	h.held[2].open()
	for what, c := range map[string]<-chan outcome{"second": second, "third": third} {
		if o := await(ctx, t, what, c); o.err != nil || !o.applied {
			t.Fatalf("%s: applied %v, %v", what, o.applied, o.err)
		}
	}
}

// writeBatches reads flowstate_write_batches_total: the write transactions
// run.
func writeBatches(t *testing.T, e *testEngine) float64 {
	t.Helper()
	mfs, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "flowstate_write_batches_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestGroupCommitTrySolo: a request that fails in a batch is taken out, the
// rest commit together in one more transaction, and it runs alone; two
// requests changing one entry never share a batch.
func TestGroupCommitTrySolo(t *testing.T) {
	ctx, e, h := startHeldWith(t, &Faults{NoPipe: true}, 1)
	batches := func() float64 { return writeBatches(t, e) }

	first := goPut(ctx, e, "first", flow(t, 1))
	h.wait(ctx, t, 1)
	// One bad request (a flow using an undeclared group) among good ones,
	// and two requests of one module changing the same flow.
	reqs := []struct {
		module string
		es     []entry.Entry
	}{
		{"a", flow(t, 2)},
		{"bad", flows(t, "table=1,priority=5,ip,actions=group:7")},
		{"b", flows(t, "table=2,priority=9,ip,actions=drop")},
		{"b", flows(t, "table=2,priority=9,ip,actions=normal")},
		{"c", flow(t, 3)},
	}
	var outs []<-chan outcome
	for i, r := range reqs {
		outs = append(outs, goPut(ctx, e, r.module, r.es))
		poll(ctx, t, "request queued", func() bool { return queued(e) == i+1 })
	}
	before := batches()
	h.held[1].open()
	if o := await(ctx, t, "first", first); o.err != nil {
		t.Fatal(o.err)
	}
	for i, c := range outs {
		o := await(ctx, t, reqs[i].module, c)
		switch {
		case reqs[i].module == "bad":
			if !errors.Is(o.err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("bad request: %v, want FAILED_PRECONDITION", o.err)
			}
		case o.err != nil || !o.applied:
			t.Fatalf("request %d (%s): applied %v, %v", i, reqs[i].module, o.applied, o.err)
		}
	}
	// The held batch, then for the five: failing on "bad", then on the
	// overlap, then the three left together, then "bad" and the overlapping
	// request alone.
	if got := batches() - before; got != 6 {
		t.Fatalf("%v transactions, want 6", got)
	}
	es, err := e.cfg.Store.Entries().All(testBridge)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		if en.Module == "b" && string(en.Payload) != string(reqs[3].es[0].Payload) {
			t.Fatal("the overlapping request committed before the one queued first")
		}
	}
	if cs, err := diffAll(ctx, e.Engine, testBridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff: %d changes, %v", len(cs), err)
	}
}

// oneShot is a fault hook (Faults.AfterBundle, BeforeStoreCommit) that
// fails once with err each time it is armed.
type oneShot struct {
	armed atomic.Bool
	err   error
}

func (o *oneShot) arm() { o.armed.Store(true) }

// fired reports whether the hook ran since it was armed last.
func (o *oneShot) fired() bool { return !o.armed.Load() }

func (o *oneShot) fire() error {
	if o.armed.CompareAndSwap(true, false) {
		return o.err
	}
	return nil
}

// convergedAfter waits until the bridge replayed after t0 and holds exactly
// its desired state: a replay was scheduled without anyone asking.
func convergedAfter(ctx context.Context, t *testing.T, e *testEngine, t0 time.Time) {
	t.Helper()
	b := e.bridges[testBridge]
	poll(ctx, t, "a replay after the write", func() bool {
		st := b.Snapshot()
		return st.Converged && st.Last.Finished.After(t0) && st.Last.Err == nil
	})
	cs, err := diffAll(ctx, e.Engine, testBridge)
	if err != nil || len(cs) != 0 {
		t.Fatalf("diff after the replay: %v, %v", cs, err)
	}
}

// TestWriteCancelledAfterCommit: the reply to COMMIT is lost and the caller
// gives up at that moment. The write is stored, the bridge replays by itself
// and switch and store agree.
func TestWriteCancelledAfterCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wctx, cancelWrite := context.WithCancel(ctx)
	defer cancelWrite()
	var armed atomic.Bool
	e := startEngine(ctx, t, &Faults{AfterBundle: func() error {
		if !armed.CompareAndSwap(true, false) {
			return nil
		}
		cancelWrite()
		return fmt.Errorf("ofconn: bundle commit sent, outcome unknown: %w", context.DeadlineExceeded)
	}})
	t0 := time.Now()
	armed.Store(true)
	applied, err := e.Writes().Put(wctx, testBridge, "m", write.Declared{Entries: flow(t, 1)})
	// The caller may see the outcome-unknown error or, if the result came
	// first, the stored write.
	if !errors.Is(err, write.ErrOutcomeUnknown) && (err != nil || applied) {
		t.Fatalf("put: applied %v, %v", applied, err)
	}
	convergedAfter(ctx, t, e, t0)
	if n := stored(t, e, "m"); n != 1 {
		t.Fatalf("%d entries stored, want the write kept for the replay", n)
	}
}

// TestWriteStoreFailsAfterApply: the switch accepted the bundle and the store
// transaction then failed. The write fails, and the replay the engine
// schedules takes the changes off the switch again.
func TestWriteStoreFailsAfterApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errDisk := errors.New("disk gone")
	disk := &oneShot{err: errDisk}
	e := startEngine(ctx, t, &Faults{BeforeStoreCommit: disk.fire})
	t0 := time.Now()
	disk.arm()
	if _, err := e.Writes().Put(ctx, testBridge, "m", write.Declared{Entries: flow(t, 1)}); !errors.Is(err, errDisk) {
		t.Fatalf("put: %v, want the store's error", err)
	}
	convergedAfter(ctx, t, e, t0)
	if n := stored(t, e, "m"); n != 0 {
		t.Fatalf("%d entries stored by a failed write", n)
	}
}

// diffAll collects what Engine.Diff reports for bridge.
func diffAll(ctx context.Context, e *Engine, bridge string) ([]plan.Change, error) {
	var cs []plan.Change
	err := e.Diff(ctx, bridge, func(c plan.Change) error {
		cs = append(cs, c)
		return nil
	})
	return cs, err
}
