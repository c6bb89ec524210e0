package write

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// A streamed write sends a batch's changes to the switch while the store
// decides and writes them, instead of after: the switch decodes and checks
// each BUNDLE_ADD as it arrives, on its own CPU, while flowstated inserts
// the next entries into bbolt. Everything else is as in commitGroup: one
// bundle, committed by the switch before the store commits, discarded when
// the store or the switch refuses anything.
//
//  1. startStream opens the bundle on a goroutine of its own (the producer),
//     bounded by the number of entries the batch declares.
//  2. The store calls add with each change as it decides it (store.Writer
//     Observe); add hands changes to the producer in batches. The store's
//     Result keeps them, in the same order: a refused position is mapped
//     back through it (streamedAt), with no second copy.
//  3. finish(true) ends the bundle: barrier, then COMMIT, and returns the
//     switch's verdict. finish(false) (the store failed) discards it:
//     nothing was committed. Either way finish returns only once the
//     producer has stopped, so the bundle never outlives the bridge's lock.
//
// Of group commit's batches, only writes that declare flows alone stream
// (Put, and Sync with what it removes; a pipe streams its Puts of flows the
// same way): a flow takes one message and flows need no order among
// themselves (groups must precede the flows that use them, meters cannot be
// bundled), and a batch holds one change per identity (errOverlap). A Sync
// reports its removals last: flow and group deletes go to the end of the
// bundle, as in a sendOrder; a removed meter, which must follow the bundle,
// makes the batch fall back to the usual path before anything is committed.
// A staged write (writestaged.go) streams groups and meters too: it knows
// them before the first flow (store.PlanStage) and gives the stream a
// sendOrder's order itself, meters before and after the bundle.

// streamBatch is how many changes go to the producer at a time.
const streamBatch = 512

type writeStream struct {
	batches chan []plan.Change
	// stopped is closed when the producer reads no more batches.
	stopped chan struct{}
	done    chan error
	// decided is closed once the verdict is in done.
	decided chan struct{}
	pending []plan.Change
	// aborted is set before batches is closed: the producer discards the
	// bundle.
	aborted bool
	// fallback is set when a change cannot stream (a removed meter, more
	// changes than the bound has room for): the batch is then sent the
	// usual way. room is what is left of the bound.
	fallback bool
	room     int
}

// bundle is one exchange of a write transaction with the switch: a streamed
// bundle, or what was sent after the store. Its verdict is decided once
// (decide).
type bundle struct {
	stream *writeStream // nil for a send after the store
	cancel context.CancelFunc
	h      held // what a whole refusal does (resendWhole)
	// sent: the COMMIT (or the send) went, so the switch may hold it;
	// ended: the stream has stopped.
	sent, ended bool
	decided     bool
	o           Outcome
	re          *plan.RejectedError
	// dropped: refused, left out of the rest of the transaction; undone:
	// sent, then taken back.
	dropped, undone bool
}

// openBundle opens the streamed bundle of spec on conn (startStream),
// bounded by Config.WriteTimeout.
func (ws *Writes) openBundle(ctx context.Context, conn *ofconn.Conn, spec streamSpec) *bundle {
	sctx, cancel := context.WithTimeout(ctx, ws.cfg.WriteTimeout)
	return &bundle{stream: startStream(sctx, conn, spec.pre, spec.bound, spec.post, spec.at), cancel: cancel, h: spec.h}
}

// refused reports whether the switch refused b.
func (b *bundle) refused() bool { return b.o == Refused || b.o == RefusedWhole }

// holds reports whether the switch may hold b's changes.
func (b *bundle) holds() bool { return b.sent && !b.undone && !(b.decided && b.refused()) }

// startStream opens a bundle of at most n messages on conn; at returns the
// changes behind bundle positions (streamedAt) once every change was added.
// pre and post are meter changes, sent before and after the bundle as in
// applyChanges (a staged write's; nil for the others).
func startStream(ctx context.Context, conn *ofconn.Conn, pre []plan.Change, n int, post []plan.Change, at func(idx []int) ([]plan.Change, error)) *writeStream {
	s := &writeStream{
		batches: make(chan []plan.Change, 4),
		stopped: make(chan struct{}),
		done:    make(chan error, 1),
		decided: make(chan struct{}),
		room:    n,
	}
	produced := false // set and read by the goroutine below
	src := plan.BundleSource{
		N:    n,
		UpTo: true,
		Produce: func(emit func(ofconn.Message) error) error {
			defer close(s.stopped)
			produced = true
			for batch := range s.batches {
				for _, c := range batch {
					// One message each but for a large group.
					for _, m := range c.Messages() {
						if err := emit(m); err != nil {
							return err
						}
					}
				}
			}
			if s.aborted {
				return plan.ErrAborted
			}
			return nil
		},
		At: at,
	}
	go func() {
		_, err := plan.ApplyChanges(ctx, conn, pre, src, post)
		if !produced {
			// The bundle never opened (a meter refused, the context
			// ended): add must not wait for a reader.
			close(s.stopped)
		}
		s.done <- err
		close(s.decided)
	}()
	return s
}

// add queues c for the bundle. After the producer stopped (the connection
// failed), changes are dropped: finish reports the failure. Past the bound,
// the batch falls back.
func (s *writeStream) add(c plan.Change) {
	if s.fallback {
		return
	}
	k := 1
	if c.Kind == entry.KindGroup && c.Op != plan.OpDelete {
		k = len(c.Messages())
	}
	if s.room < k {
		s.fallback = true
		return
	}
	s.room -= k
	s.pending = append(s.pending, c)
	if len(s.pending) < streamBatch {
		return
	}
	s.flush()
}

func (s *writeStream) flush() {
	if len(s.pending) == 0 {
		return
	}
	select {
	case s.batches <- s.pending:
	case <-s.stopped:
	}
	s.pending = make([]plan.Change, 0, streamBatch)
}

// finish ends the bundle: committed when commit is true, discarded when not.
// It returns the switch's verdict (nil: committed).
func (s *writeStream) finish(commit bool) error {
	if commit {
		s.send()
	} else {
		s.aborted = true
		close(s.batches)
	}
	return <-s.done
}

// send ends the bundle to be committed without waiting for the verdict,
// which done then delivers.
func (s *writeStream) send() {
	s.flush()
	close(s.batches)
}

// streamedAt maps positions in a streamed batch's bundle to its changes
// without a copy of them: the bundle holds them in the order the store
// reported them, request by request, its changes (Result.Changed) then its
// removals (a removed meter makes the batch fall back: never streamed). It
// reads results once the store is done with them (after finish closed the
// stream).
func streamedAt(results []writeResult) func(idx []int) ([]plan.Change, error) {
	return func(idx []int) ([]plan.Change, error) {
		out := make([]plan.Change, len(idx))
		for i, x := range idx {
			c, ok := nthStreamed(results, x)
			if !ok {
				return nil, fmt.Errorf("restore: bundle position %d is past the %d streamed changes", x, streamedLen(results))
			}
			out[i] = c
		}
		return out, nil
	}
}

func nthStreamed(results []writeResult, x int) (plan.Change, bool) {
	for _, r := range results {
		if x < len(r.res.Changed) {
			return plan.WriteChange(r.res.Changed[x]), true
		}
		x -= len(r.res.Changed)
		if x < len(r.res.Removed) {
			e := r.res.Removed[x]
			return plan.Change{Op: plan.OpDelete, Kind: e.Kind, Actual: e.Payload, Index: -1}, true
		}
		x -= len(r.res.Removed)
	}
	return plan.Change{}, false
}

func streamedLen(results []writeResult) int {
	n := 0
	for _, r := range results {
		n += len(r.res.Changed) + len(r.res.Removed)
	}
	return n
}

// observe sets the store observers of request i of a streamed batch on w:
// each change goes to s, and its key to owner (nil for a lone request) so
// that two requests changing one entry fail the batch (errOverlap, recorded
// in *overlap).
func (s *writeStream) observe(w *store.Writer, i int, owner map[string]int, overlap **failedError) {
	add := func(c plan.Change) {
		if owner != nil {
			k := plan.Key(c.Kind, c.ID())
			if other, dup := owner[k]; dup && other != i && *overlap == nil {
				*overlap = failed(i, errOverlap)
			}
			owner[k] = i
		}
		s.add(c)
	}
	w.Observe(func(sc store.Change) { add(plan.WriteChange(sc)) }, func(e entry.Entry) {
		if e.Kind == entry.KindMeter {
			s.fallback = true
			return
		}
		add(plan.Change{Op: plan.OpDelete, Kind: e.Kind, Actual: e.Payload, Index: -1})
	})
}

// opaqueWrites returns the changes of a streamed batch that forms.Learn looks
// at after a write: those whose payload holds something kept as sent.
func opaqueWrites(results []writeResult) []plan.Change {
	var out []plan.Change
	for _, r := range results {
		for _, c := range r.res.Changed {
			if c.Entry.Opaque {
				out = append(out, plan.WriteChange(c))
			}
		}
	}
	return out
}
