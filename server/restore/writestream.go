package restore

import (
	"context"
	"errors"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
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
//     Observe); add hands changes to the producer in batches. The producer
//     keeps every change it sends, for refusals and for learnForms.
//  3. finish(true) ends the bundle: barrier, then COMMIT, and returns the
//     switch's verdict. finish(false) (the store failed) discards it:
//     nothing was committed. Either way finish returns only once the
//     producer has stopped, so the bundle never outlives the bridge's lock.
//
// Only writes that declare flows alone stream (Put, and Sync with what it
// removes): a flow takes one message and flows need no order among
// themselves (groups must precede the flows that use them, meters cannot be
// bundled), and a batch holds one change per identity (errOverlap). A Sync
// reports its removals last: flow and group deletes go to the end of the
// bundle, as in a plan; a removed meter, which must follow the bundle, makes
// the batch fall back to the usual path before anything is committed.

// streamBatch is how many changes go to the producer at a time.
const streamBatch = 512

var errWriteAborted = errors.New("restore: write abandoned by the store")

type writeStream struct {
	batches chan []Change
	// stopped is closed when the producer reads no more batches.
	stopped chan struct{}
	done    chan error
	pending []Change
	// aborted is set before batches is closed: the producer discards the
	// bundle.
	aborted bool
	// sent is the producer's until done delivers.
	sent []Change
	// fallback is set when a change cannot stream (a removed meter): the
	// batch is then sent the usual way.
	fallback bool
}

// streamable reports whether reqs can stream (see writeStream) and the
// bound on their changes; a Sync can remove whatever the bridge holds.
func streamable(reqs []*writeReq, w *store.Writer, bridge string) (bool, int) {
	n, syncs := 0, false
	for _, r := range reqs {
		if !r.flowsOnly {
			return false, 0
		}
		n += len(r.declared)
		syncs = syncs || r.sync
	}
	if syncs {
		n += w.Entries(bridge)
	}
	return n > 0, n
}

// startStream opens a bundle of at most n flow changes on conn.
func startStream(ctx context.Context, conn *ofconn.Conn, n int) *writeStream {
	s := &writeStream{
		batches: make(chan []Change, 4),
		stopped: make(chan struct{}),
		done:    make(chan error, 1),
	}
	src := bundleSource{
		n:    n,
		upTo: true,
		produce: func(emit func(ofconn.Message) error) error {
			defer close(s.stopped)
			for batch := range s.batches {
				for _, c := range batch {
					s.sent = append(s.sent, c)
					// One message each: flows, and deletes.
					if err := emit(c.messages()[0]); err != nil {
						return err
					}
				}
			}
			if s.aborted {
				return errWriteAborted
			}
			return nil
		},
		at: func(idx []int) ([]Change, error) {
			out := make([]Change, len(idx))
			for i, x := range idx {
				out[i] = s.sent[x]
			}
			return out, nil
		},
	}
	go func() {
		_, err := applyChanges(ctx, conn, nil, src, nil)
		s.done <- err
	}()
	return s
}

// add queues c for the bundle. After the producer stopped (the connection
// failed), changes are dropped: finish reports the failure.
func (s *writeStream) add(c Change) {
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
	s.pending = make([]Change, 0, streamBatch)
}

// finish ends the bundle: committed when commit is true, discarded when not.
// It returns the switch's verdict (nil: committed) and the changes sent.
func (s *writeStream) finish(commit bool) ([]Change, error) {
	if commit {
		s.flush()
	}
	s.aborted = !commit
	close(s.batches)
	err := <-s.done
	return s.sent, err
}

// observe sets the store observers of request i of a streamed batch on w:
// each change goes to s, and its key to owner (nil for a lone request) so
// that two requests changing one entry fail the batch (errOverlap, recorded
// in *overlap).
func (s *writeStream) observe(w *store.Writer, i int, owner map[string]int, overlap **failedError) {
	add := func(c Change) {
		if owner != nil {
			k := key(c.Kind, changeID(c))
			if other, dup := owner[k]; dup && other != i && *overlap == nil {
				*overlap = failed(i, errOverlap)
			}
			owner[k] = i
		}
		s.add(c)
	}
	w.Observe(func(sc store.Change) { add(writeChange(sc)) }, func(e entry.Entry) {
		if e.Kind == entry.KindMeter {
			s.fallback = true
			return
		}
		add(Change{Op: OpDelete, Kind: e.Kind, Actual: e.Payload, Index: -1})
	})
}
