package restore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/owner"
)

// TestAdoptionGoesThroughWriteQueue: the first replay's learning of what a
// relayed controller installed is a write of the bridge's queue. Held as
// the owner's first batch, it has stored nothing and the bridge has not
// converged; a Put queued behind it of the flow it learns is refused,
// the flow being the learning module's by then; the guard's evidence is
// taken once it is stored, and the one replay leaves the flow on the
// switch.
func TestAdoptionGoesThroughWriteQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := &hold{held: map[int32]*heldBatch{1: {entered: make(chan struct{}), release: make(chan struct{})}}}
	te := newEngine(ctx, t, &Faults{Taken: h.taken})
	// The bridge is this store's, as after an earlier flowstated's claim.
	if _, err := te.sb.Vsctl(ctx, "set", "Bridge", testBridge, "external_ids:"+owner.ExternalIDStore+"="+te.cfg.Store.Identity().ID()); err != nil {
		t.Fatal(err)
	}
	const relayed = "table=1,priority=200,ip,nw_dst=10.9.9.9,actions=drop"
	if _, err := te.sb.Ofctl(ctx, "add-flow", testBridge, relayed); err != nil {
		t.Fatal(err)
	}
	var taken atomic.Int32
	if err := te.Owners().AdoptRelayed(testBridge, "ovn", owner.Relayed{Taken: func() { taken.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	te.run(ctx, t)
	t.Cleanup(h.held[1].open) // runs before the engine's stop

	h.wait(ctx, t, 1)
	if n := h.held[1].size.Load(); n != 1 {
		t.Fatalf("the owner's first batch holds %d requests, want the adoption alone", n)
	}
	if n := stored(t, te, "ovn"); n != 0 || taken.Load() != 0 || te.bridges[testBridge].IsConverged() {
		t.Fatalf("adoption held in the queue: %d entries of ovn stored, evidence taken %d times, converged %v",
			n, taken.Load(), te.bridges[testBridge].IsConverged())
	}
	put := goPut(ctx, te, "other", flows(t, relayed))
	poll(ctx, t, "the Put queued behind the adoption", func() bool { return queued(te) == 1 })
	h.held[1].open()

	if o := await(ctx, t, "the Put behind the adoption", put); !errors.Is(o.err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a Put of the flow the adoption made ovn's: applied %v, %v; want refused (owned by ovn)", o.applied, o.err)
	}
	te.waitConverged(ctx, t)
	if n := stored(t, te, "ovn"); n != 1 || taken.Load() != 1 {
		t.Fatalf("after the first replay: %d entries of ovn stored, evidence taken %d times; want 1, 1", n, taken.Load())
	}
	// The replay that waited for the adoption applied it: it asked for
	// no other.
	time.Sleep(200 * time.Millisecond)
	if n := counter(t, te, "flowstate_replays_total"); n != 1 {
		t.Errorf("%v replays, want 1", n)
	}
	if n := counter(t, te, "flowstate_write_requests_total"); n != 2 {
		t.Errorf("%v write requests, want 2 (the adoption, the Put)", n)
	}
	if out, err := te.sb.Ofctl(ctx, "dump-flows", testBridge, "table=1"); err != nil || !strings.Contains(out, "nw_dst=10.9.9.9") {
		t.Errorf("the learned flow is gone from the switch after the first replay (%v):\n%s", err, out)
	}
}
