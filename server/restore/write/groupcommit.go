package write

import (
	"context"
	"errors"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Group commit
//
// Writes to one bridge are group-committed by one owner goroutine per bridge
// (runWrites, started by Run), as etcd's backend.run batches for its
// callers:
//
//  1. write queues the request and waits for its own result or its own ctx,
//     whichever comes first. A caller never commits anyone else's request.
//  2. The owner takes every queued request (a batch) and runs them in one
//     store transaction whose changes go to the switch in one bundle before
//     the commit (commitGroup). Each caller gets its result as soon as its
//     request is decided.
//  3. A request that fails in a batch (its op, the switch's refusal of one of
//     its entries, a change to an entry another request of the batch also
//     changes, a meter) is taken out, the rest re-run together, and the
//     request taken out then runs alone, so it fails (or succeeds) with its own
//     error, as bbolt's DB.Batch does with trySolo. A failure that names no
//     request sends every request of the batch alone.
//  4. Switch I/O runs under a context derived from Run's, bounded by
//     Config.WriteTimeout: a caller that gives up can neither abandon a
//     bundle half way nor kill the OpenFlow connection (ofconn closes it when
//     a write is interrupted).
//  5. Whenever the switch may hold what the store does not (the outcome of a
//     bundle is unknown, the store failed after the switch accepted, a panic
//     after the bundle), the bridge is marked unconverged and replays, which
//     makes the switch equal to the store again.

// commitBatch commits batch, taking failing requests out and running them
// alone (see Group commit above). Every request gets exactly one result.
func (ws *Writes) commitBatch(ctx context.Context, b *bridgeQueue, batch []*writeReq) {
	if len(batch) == 0 {
		return
	}
	group, solo := batch, []*writeReq(nil)
	for len(group) > 0 {
		results, err := ws.commitGroup(ctx, b, group)
		if err == nil {
			for i, r := range group {
				r.done <- results[i]
			}
			break
		}
		var fe *failedError
		switch {
		case len(group) == 1:
			group[0].done <- writeResult{err: err}
			group = nil
		case errors.Is(err, errdefs.ErrInternal):
			// A panic: the requests of this transaction fail with it.
			for _, r := range group {
				r.done <- writeResult{err: err}
			}
			group = nil
		case errors.As(err, &fe):
			var rest []*writeReq
			for i, r := range group {
				if fe.reqs[i] {
					solo = append(solo, r)
				} else {
					rest = append(rest, r)
				}
			}
			group = rest
		default:
			// Nothing names the culprit: everyone alone.
			solo = append(solo, group...)
			group = nil
		}
	}
	for _, r := range solo {
		results, err := ws.commitGroup(ctx, b, []*writeReq{r})
		if err != nil {
			r.done <- writeResult{err: err}
			continue
		}
		r.done <- results[0]
	}
}

// batchStore is what group commit needs of the store: one read-write
// transaction, whose Writer runs the requests' ops.
type batchStore interface {
	Update(fn func(w *store.Writer) error) error
}

func (ws *Writes) batchStore() batchStore { return ws.cfg.Store }

// failedError names the requests of a group that made its transaction fail.
type failedError struct {
	reqs map[int]bool
	err  error
}

func (e *failedError) Error() string { return e.err.Error() }
func (e *failedError) Unwrap() error { return e.err }

func failed(i int, err error) *failedError {
	return &failedError{reqs: map[int]bool{i: true}, err: err}
}

var (
	errOverlap = errors.New("restore: requests of a batch change the same entry")
	// Meters are sent before the bundle, one by one, and undone when the
	// switch refuses the bundle; an undo that fails would leave a request
	// retried alone to find its meter there already. Requests with meters
	// commit alone.
	errMeterInBatch = errors.New("restore: meters are not group-committed")
)

// commitGroup runs reqs in one store transaction whose changes go to the
// switch before the commit, when the bridge is live (connected, converged,
// gate open). A switch that fails otherwise than by refusing entries (the
// connection died, the reply to COMMIT never came) does not fail the write:
// it is stored unapplied and the bridge replays, so controllers are never
// blocked by an OVS restart. Taking the bridge's lock keeps a replay from slipping
// between the transaction's read of the store and its bundle.
//
// With more than one request, an error that names requests is a
// *failedError. A panic is recovered and returned as ErrInternal.
func (ws *Writes) commitGroup(ctx context.Context, b *bridgeQueue, reqs []*writeReq) ([]writeResult, error) {
	g := &groupStep{reqs: reqs, results: make([]writeResult, len(reqs))}
	if _, err := ws.runTxn(ctx, b, "write", g); err != nil {
		var fe *failedError
		if len(reqs) == 1 && errors.As(err, &fe) {
			err = fe.err
		}
		return nil, err
	}
	return g.results, nil
}

// syncRemovals is how many removals a streamed batch with a Sync has room
// for beyond one per entry it declares: the bound reserves the bundle's xids
// up front, and counting what a Sync could remove would walk the bridge's
// pages at every Sync.
const syncRemovals = 4096

// streamable reports whether reqs can stream (see writeStream) and the
// bound on their changes. A Sync that removes more than the bound leaves
// room for falls back (writeStream.add).
func streamable(reqs []*writeReq) (bool, int) {
	n, syncs := 0, false
	for _, r := range reqs {
		if !r.flowsOnly {
			return false, 0
		}
		n += len(r.declared)
		syncs = syncs || r.sync
	}
	if syncs {
		n += n + syncRemovals
	}
	return n > 0, n
}

// groupStep is the store step of a batch of group commit: the requests' ops
// in one store transaction, their changes streamed into the bundle as the
// store decides them (when they all declare flows alone) or sent after.
type groupStep struct {
	reqs    []*writeReq
	results []writeResult
	// owner maps a change's key to its request in a batch of several.
	owner map[string]int
	// n counts the changes the ops made; cs are those listed to send after
	// the store (sentAfter), when they were not streamed.
	n         int
	cs        []plan.Change
	sentAfter bool
}

func (g *groupStep) open(t *txn) (streamSpec, error) {
	ok, bound := streamable(g.reqs)
	if !ok || !t.live {
		return streamSpec{}, nil
	}
	if len(g.reqs) > 1 {
		g.owner = make(map[string]int, bound)
	}
	return streamSpec{stream: true, bound: bound, at: streamedAt(g.results), h: resendable}, nil
}

func (g *groupStep) store(t *txn, atSwitch func() error) (committed, error) {
	err := t.ws.batchStore().Update(func(w *store.Writer) error {
		n, err := g.runOps(w, t.stream)
		if err != nil {
			return err
		}
		g.n = n
		return atSwitch()
	})
	if err != nil {
		return committed{}, err
	}
	var declared [][]entry.Entry
	quarantined := t.b.Quarantine().Len() > 0
	for i, r := range g.reqs {
		g.results[i].applied, g.results[i].unknown = t.live, t.unknown
		if quarantined {
			declared = append(declared, r.declared, g.results[i].res.Removed)
		}
	}
	if g.sentAfter {
		return committed{declared: declared, learn: g.cs}, nil
	}
	// Checked as they were streamed; of a million changes, keep for learn
	// only the few it looks at.
	return committed{declared: declared, learn: opaqueWrites(g.results)}, nil
}

// after lists the batch's changes from its stored results
// (batchChangesLocked), whose errors fail the batch.
func (g *groupStep) after(t *txn) (sendAfter, error) {
	if t.stream != nil && t.stream.fallback {
		g.owner = nil // rebuilt from the results
	}
	cs, owner, err := t.b.batchChangesLocked(g.reqs, g.results, g.n, g.owner)
	g.owner = owner
	if err != nil {
		return sendAfter{}, err
	}
	g.cs, g.sentAfter = cs, true
	return sendAfter{cs: cs}, nil
}

func (g *groupStep) refused(re *plan.RejectedError) error { return refused(re, g.owner, len(g.reqs)) }

// runOps runs the requests' ops in w, streaming each change the store
// decides into stream (when not nil), and returns how many changes they
// make.
func (g *groupStep) runOps(w *store.Writer, stream *writeStream) (int, error) {
	var overlap *failedError
	n := 0
	for i, r := range g.reqs {
		if stream != nil {
			stream.observe(w, i, g.owner, &overlap)
		}
		res, err := r.op(w)
		if err != nil {
			return 0, failed(i, err)
		}
		g.results[i].res = res
		n += len(res.Changed) + len(res.Removed)
	}
	w.Observe(nil, nil)
	if overlap != nil {
		return 0, overlap
	}
	return n, nil
}

// batchChangesLocked lists the changes of a batch's stored results (n of
// them) in request order, to send after the store, and maps each to its
// request in owner (made here for a batch of several). A change to an entry
// another request of the batch also changes, or a meter in a batch of
// several, fails the request. A MODIFY of a quarantined entry becomes an ADD:
// the entry is not on the switch. the bridge's lock must be held.
func (b *bridgeQueue) batchChangesLocked(reqs []*writeReq, results []writeResult, n int, owner map[string]int) ([]plan.Change, map[string]int, error) {
	cs := make([]plan.Change, 0, n)
	if owner == nil && len(reqs) > 1 {
		owner = make(map[string]int, n)
	}
	for i := range reqs {
		res := results[i].res
		from := len(cs)
		cs = plan.AppendWriteChanges(cs, res.Changed, res.Removed)
		for j := from; j < len(cs); j++ {
			c := &cs[j]
			if len(reqs) > 1 && c.Kind == entry.KindMeter {
				return nil, owner, failed(i, errMeterInBatch)
			}
			if owner != nil || b.Quarantine().Len() > 0 {
				k := plan.Key(c.Kind, c.ID())
				if other, dup := owner[k]; dup && other != i {
					return nil, owner, failed(i, errOverlap)
				}
				if b.Quarantine().Has(k) && c.Op == plan.OpModify {
					c.Op, c.Actual = plan.OpAdd, nil
				}
				if owner != nil {
					owner[k] = i
				}
			}
		}
	}
	return cs, owner, nil
}

// refused turns the switch's refusal into the error of the requests whose
// changes it names (owner maps a change's key to its request). With one
// request it is that request's error, naming the entry.
func refused(re *plan.RejectedError, owner map[string]int, n int) error {
	if n == 1 {
		return rejection(re)
	}
	fe := &failedError{reqs: map[int]bool{}, err: re}
	for _, c := range re.Changes {
		i, ok := owner[plan.Key(c.Kind, c.ID())]
		if !ok {
			return re
		}
		fe.reqs[i] = true
	}
	if len(fe.reqs) == 0 {
		return re
	}
	return fe
}
