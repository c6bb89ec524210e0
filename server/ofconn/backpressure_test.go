package ofconn

import (
	"testing"
	"time"
)

// TestDumpBounded: a dump read by a slow consumer holds at most about
// dumpQueue bytes in flowstated (vswitchd sends the whole dump at once), and
// the connection stays up with short echo timers while the reader waits for
// the consumer.
func TestDumpBounded(t *testing.T) {
	const n = 60_000 // about 7 MB of replies
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{Logger: discardLogger(), EchoInterval: 100 * time.Millisecond, EchoTimeout: time.Second})
	if err := c.Bundle(ctx, ipFlows(t, 0, 100, 0, n)); err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		c.pmu.Lock()
		defer c.pmu.Unlock()
		total := 0
		for _, w := range c.pending {
			w.mu.Lock()
			total += w.queued
			w.mu.Unlock()
		}
		return total
	}
	peak, seen := 0, 0
	err := c.EachFlow(ctx, func(Flow) error {
		if seen++; seen%1000 == 0 {
			// A consumer slower than the socket: the reader must
			// wait for it instead of queueing the dump.
			time.Sleep(10 * time.Millisecond)
			peak = max(peak, queued())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != n+1 {
		t.Fatalf("dumped %d flows, want %d", seen, n+1)
	}
	if limit := dumpQueue + 64<<10; peak > limit || peak == 0 {
		t.Fatalf("peak of %d bytes queued, want some and at most %d", peak, limit)
	}
	// Still alive after a dump that held the reader back for more than
	// the echo interval.
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("barrier after the dump: %v", err)
	}
	t.Logf("peak queued %d bytes of a %d-flow dump", peak, n)
}
