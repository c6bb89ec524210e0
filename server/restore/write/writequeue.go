package write

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/store"
)

// The write queue and its owner
//
// Every write of a bridge is a request in the bridge's queue (writeQueue);
// one owner goroutine per bridge (runWrites, started by Run) takes the
// queued requests and commits them: by group commit (groupcommit.go), in a
// pipe (writepipe.go), or alone, in a transaction of their own (a staged
// write, writestaged.go; a TLV table change, tlv.go; an adoption,
// adopt.go). The caller
// waits for its own result or its own ctx (submit), never commits anyone
// else's request, and a request the owner has taken goes on without its
// caller.

// ErrOutcomeUnknown is wrapped (with the caller's ctx error) by the error of a
// write whose caller gave up after the owner had taken the request into a
// commit: it may have been stored and applied, or not. Read the state back
// (List, Diff) to find out; rewriting the same entries is idempotent.
var ErrOutcomeUnknown = errors.New("restore: write outcome unknown")

// writeQueue is the group-commit queue of one bridge. Its owner is runWrites.
type writeQueue struct {
	mu   sync.Mutex
	reqs []*writeReq
	// stopped is set when runWrites has returned: nobody takes requests any
	// more.
	stopped bool
	wake    chan struct{} // cap 1: a request was queued
}

func newWriteQueue() writeQueue { return writeQueue{wake: make(chan struct{}, 1)} }

// writeReq is one write waiting for its bridge.
type writeReq struct {
	op func(w *store.Writer) (store.Result, error)
	// declared are the entries the request declares (their quarantine is
	// lifted: the write itself tells whether the switch takes them now).
	declared []entry.Entry
	// flowsOnly says op is a Put or Sync (sync) of declared, all flows:
	// its changes can go to the switch while they are stored (writeStream).
	flowsOnly, sync bool
	// put says op is a Put of declared, all flows, none opaque, for
	// module: it may be pipelined (writepipe.go).
	put    bool
	module string
	// alone, when set, commits the request in a transaction of its own, on
	// the owner: a spooled Put or Sync (writestaged.go), a controller's TLV
	// table change (tlv.go), an adoption (adopt.go).
	alone func(ctx context.Context, b *bridgeQueue) writeResult
	// release, if set, frees what the request holds (a staged write's
	// spool) once nothing reads it any more: by the owner once it took the
	// request, by the caller's side when the request never was. finish
	// calls it once.
	release func()
	// taken is set (under writeQueue.mu) when the owner takes the request
	// into a batch; from then on its outcome no longer depends on its caller.
	taken bool
	// done receives the one result; buffered, so the owner never blocks on a
	// caller that gave up.
	done chan writeResult
}

type writeResult struct {
	applied bool
	// unknown, when set, is why the write is stored but its outcome on the
	// switch is unknown (applied is false): the replay it asked for
	// settles it.
	unknown error
	res     store.Result
	// staged is the outcome of a staged write, which has no Result.
	staged *store.Staged
	err    error
}

// finish releases what r holds (release), once.
func (r *writeReq) finish() {
	if f := r.release; f != nil {
		r.release = nil
		f()
	}
}

func (q *writeQueue) push(r *writeReq) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return fmt.Errorf("flowstated is stopping: %w", errdefs.ErrUnavailable)
	}
	q.reqs = append(q.reqs, r)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// maxBatchEntries bounds the entries one group commit takes from the queue
// (a request larger than that goes alone): a write transaction holds about
// 1.2 KB an entry until it commits, so concurrent large requests must not
// add up to one huge transaction. Larger streamed requests are staged
// (writestaged.go) and do not count.
const maxBatchEntries = 50_000

// take returns the queued requests, oldest first, up to maxBatchEntries
// entries (at least one request), marked taken.
func (q *writeQueue) take() []*writeReq {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, entries := 0, 0
	for n < len(q.reqs) {
		entries += len(q.reqs[n].declared)
		if n > 0 && entries > maxBatchEntries {
			break
		}
		n++
	}
	batch := q.reqs[:n:n]
	q.reqs = slices.Clone(q.reqs[n:])
	for _, r := range batch {
		r.taken = true
	}
	return batch
}

// entries is how many entries the queued requests declare.
func (q *writeQueue) entries() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, r := range q.reqs {
		n += len(r.declared)
	}
	return n
}

// drop removes r from the queue unless it was taken; it reports whether it
// did.
func (q *writeQueue) drop(r *writeReq) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.taken {
		return false
	}
	q.reqs = slices.DeleteFunc(q.reqs, func(x *writeReq) bool { return x == r })
	return true
}

// stop refuses later requests and returns the queued ones.
func (q *writeQueue) stop() []*writeReq {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	rest := q.reqs
	q.reqs = nil
	for _, r := range rest {
		r.taken = true
	}
	return rest
}

// write queues a store operation for bridgeName and waits for its outcome or
// for ctx. If ctx ends first: a request still queued is dropped and the
// error is ctx's; a request already taken into a commit goes on without its
// caller, whose error then wraps ErrOutcomeUnknown and ctx's error.
func (ws *Writes) write(ctx context.Context, bridgeName string, req *writeReq) (applied bool, res store.Result, err error) {
	r, err := ws.submit(ctx, bridgeName, req)
	return r.applied, r.res, err
}

// submit is write with the whole result.
func (ws *Writes) submit(ctx context.Context, bridgeName string, req *writeReq) (_ writeResult, err error) {
	b, err := ws.bridge(bridgeName)
	if err != nil {
		req.finish()
		return writeResult{}, err
	}
	defer func() { ws.cfg.Metrics.WriteRequests.WithLabelValues(b.Name(), resultLabel(err)).Inc() }()
	if err := ctx.Err(); err != nil {
		req.finish()
		return writeResult{}, err
	}
	req.done = make(chan writeResult, 1)
	if err := b.writes.push(req); err != nil {
		req.finish()
		return writeResult{}, fmt.Errorf("restore: bridge %s: %w", b.Name(), err)
	}
	select {
	case r := <-req.done:
		return r, r.err
	case <-ctx.Done():
	}
	if b.writes.drop(req) {
		req.finish()
		return writeResult{}, ctx.Err()
	}
	select {
	case r := <-req.done: // decided while ctx ended
		return r, r.err
	default:
	}
	return writeResult{}, fmt.Errorf("restore: bridge %s: caller gone while its write was being committed: %w: %w", b.Name(), ErrOutcomeUnknown, ctx.Err())
}

// runWrites is the owner of b's write queue: it commits queued requests
// until ctx ends, then fails those still queued with ErrUnavailable. A batch
// under way when ctx ends finishes (its switch I/O is cut short, so its
// requests are stored for the next replay).
func (ws *Writes) runWrites(ctx context.Context, b *bridgeQueue) {
	defer func() {
		err := fmt.Errorf("restore: bridge %s: flowstated stopped before the write was committed: %w", b.Name(), errdefs.ErrUnavailable)
		for _, r := range b.writes.stop() {
			r.finish()
			r.done <- writeResult{err: err}
		}
	}()
	// p is the open pipe (writepipe.go), if any: what it hands back goes to
	// group commit when it closes.
	var p *pipe
	closePipe := func() {
		if p != nil {
			back, solo := p.close()
			p = nil
			ws.commitBatch(ctx, b, back)
			for _, r := range solo {
				ws.commitBatch(ctx, b, []*writeReq{r})
			}
		}
	}
	defer closePipe()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.writes.wake:
		}
		for ctx.Err() == nil {
			if p != nil {
				if c := p.atSwitch(); c != nil && b.writes.entries() < pipeBatchEntries {
					select {
					case <-c:
					case <-b.writes.wake:
					case <-ctx.Done():
					}
					continue
				}
			}
			batch := b.writes.take()
			if len(batch) == 0 {
				if p == nil {
					break
				}
				// The pipe stays open while requests come in.
				select {
				case <-p.empty:
					closePipe()
				case <-b.writes.wake:
				case <-ctx.Done():
				}
				continue
			}
			ws.cfg.Faults.Taken(len(batch))
			if p != nil && !p.takes() {
				closePipe()
			}
			if p == nil && ws.cfg.Faults.Pipes() {
				p = ws.openPipe(ctx, b, batch)
			}
			if p != nil {
				batch = p.run(batch)
			}
			if len(batch) > 0 {
				closePipe()
				for _, s := range ws.sources() {
					batch = s.commit(ctx, b, batch)
				}
			}
		}
	}
}

// A source is one way the owner commits requests. commit takes the requests
// of batch it carries, runs them in write transactions (txn, txn.go), gives
// each exactly one result, and returns the others, in order, for the next
// source. The owner offers every batch to the sources in order (sources);
// group commit, last, takes everything left. The pipe (writepipe.go) is a
// source with a life of its own across batches, so runWrites opens and
// closes it around them.
//
// The OpenFlow proxy needs no source of its own: each change of a
// controller is a request whose op turns its messages into the module's
// net change inside the transaction (proxy.go), and group commit carries it
// as it carries a Put.
type source interface {
	commit(ctx context.Context, b *bridgeQueue, batch []*writeReq) (rest []*writeReq)
}

// sources are the sources after the pipe, in the order the owner offers a
// batch to them.
func (ws *Writes) sources() [2]source { return [2]source{aloneSource{}, batchSource{ws}} }

// aloneSource commits the requests of a batch that carry their own
// transaction (writeReq.alone), each alone.
type aloneSource struct{}

func (aloneSource) commit(ctx context.Context, b *bridgeQueue, batch []*writeReq) []*writeReq {
	rest := batch[:0:0]
	for _, r := range batch {
		if r.alone == nil {
			rest = append(rest, r)
			continue
		}
		res := r.alone(ctx, b)
		r.finish()
		r.done <- res
	}
	return rest
}

// batchSource group-commits whatever is left (groupcommit.go).
type batchSource struct{ ws *Writes }

func (s batchSource) commit(ctx context.Context, b *bridgeQueue, batch []*writeReq) []*writeReq {
	s.ws.commitBatch(ctx, b, batch)
	return nil
}

// resultLabel names the outcome of a write for flowstate_write_requests_total.
func resultLabel(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	if k := errdefs.Kind(err); k != nil {
		return strings.ReplaceAll(k.Error(), " ", "_")
	}
	return "unknown"
}
