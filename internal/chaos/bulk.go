package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// The bulk of a crash loop (StoreBulk). Issue 31's fault 6 needs vswitchd
// killed twice while a replay is still sending: flowstated counts a death
// only when the replay's connection dropped under it. The harness's own
// store replays in milliseconds, mostly in the dump before anything is
// sent, so kills timed by @replay landed after the replay and the old
// bisection named nothing. bulkEntries plain drops in a table nothing
// reaches make each replay send for a few hundred milliseconds, as the
// issue's 150k drops do on a real node.
const (
	bulkModule  = "bulk"
	bulkTable   = 50
	bulkEntries = 20_000
)

// bulkFlows are the bulk's flows: harmless, distinct drops.
func bulkFlows() []client.Entry {
	es := make([]client.Entry, bulkEntries)
	for i := range es {
		es[i] = client.FlowText(fmt.Sprintf("table=%d,priority=10,ip,nw_dst=10.%d.%d.%d,actions=drop", bulkTable, 100+(i>>16), (i>>8)&255, i&255))
	}
	return es
}

// storeBulk declares the bulk, holds it for hold and until no bisection
// of crash suspects is under way, then empties the module again (retried
// while flowstated is away, at most bulkClearWait), so the rest of the run
// replays the harness's usual store.
func (r *run) storeBulk(ctx context.Context, hold time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := r.n.c.Sync(cctx, client.Module{Bridge: Managed, Name: bulkModule}, true, bulkFlows()...)
	cancel()
	sleepCtx(ctx, hold)
	// The bulk's entries are the suspects a bisection probes: emptied
	// under it, they would end it with no verdict.
	r.waitBisection(ctx, bisectionWait)
	if cerr := r.clearBulk(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("chaos: store-bulk: %w", err)
	}
	return nil
}

// bulkClearWait bounds how long storeBulk retries emptying the bulk.
const bulkClearWait = 60 * time.Second

func (r *run) clearBulk(ctx context.Context) error {
	deadline := time.Now().Add(bulkClearWait)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.n.c.Sync(cctx, client.Module{Bridge: Managed, Name: bulkModule}, true)
		cancel()
		if err == nil || time.Now().After(deadline) || !sleepCtx(ctx, 500*time.Millisecond) {
			return err
		}
	}
}

// bisectionWait bounds the wait for a bisection to end: about 10 probes
// for a crash loop's suspects, each a replay vswitchd survives for
// loopSurviveAfter with no write sent meanwhile (the writers delay it).
const bisectionWait = 90 * time.Second

// waitBisection waits, at most bound, while flowstated holds out entries
// as crash suspects (a bisection under way: its verdict, a poisoned entry
// or all of them back, is what the poisoned check reads). A status that
// fails (flowstated away) counts as under way until the bound.
func (r *run) waitBisection(ctx context.Context, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := r.n.c.Status(cctx)
		cancel()
		if err == nil {
			suspects := false
			for _, q := range st.Quarantined {
				suspects = suspects || (crashReason(q.Error) && !foundPoisoned(q.Error))
			}
			if !suspects {
				return
			}
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return
		}
	}
	r.log.Warn("a bisection of crash suspects still under way", "after", bound)
}
