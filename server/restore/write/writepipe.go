package write

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Pipelined writes
//
// Group commit runs its batches one after the other: store the batch (while
// its bundle streams), wait for the switch's verdict, commit bbolt, then take
// the next. Under many small concurrent Puts (controllers declaring their
// flows a thousand at a time) the switch, the store and the callers then
// take turns, each waiting while another works (docs/benchmarks.md). A
// pipe lets them overlap:
//
//  1. The owner (runWrites) plans a batch against the store without writing
//     (store.PlanPut: ownership, duplicates, refs, what changes), streams
//     each request's changes into the batch's bundle as soon as it is
//     planned, sends the COMMIT, and goes on to the next batch while the
//     switch decides this one: at once when pipeBatchEntries are
//     queued, else once the verdict is in, so that batches grow under load.
//  2. The storer, the pipe's own goroutine, takes the batches in order, as
//     many as are queued, writes their plans (store.Writer.PutPlanned) in one
//     transaction and commits it while the switch decides them (pipeStep),
//     taking it back if the switch refuses. Once every verdict is in and
//     the commit is durable, it answers the callers.
//
// The guarantees are group commit's:
//
//   - The store keeps only what the switch accepted, or what it may hold
//     (a verdict lost: stored, not applied, the bridge replays). A batch the
//     switch refused is undone, taken out, and the transaction written again
//     without it. A lone request gets its error as group commit would give it; the
//     requests of a larger batch go back to group commit once the pipe is
//     closed, split as commitBatch splits them (the culprits of a refusal
//     alone, everyone alone after a failure that names nobody).
//   - A plan is right only if nothing changes its entries before it is
//     written: a request that declares an entry that a batch still in the pipe
//     changes does not enter it (it goes to group commit, after the pipe), and
//     the pipe holds the bridge's lock from its first batch to its close, so no other write,
//     replay or reconcile of the bridge runs meanwhile. The refs of the plans
//     hold too: only Puts of flows enter a pipe, and they remove no group or
//     meter.
//   - Only Puts of flows, nothing opaque (forms.Learn), on a live bridge (as
//     commitGroup's live) with nothing quarantined, enter a pipe; everything
//     else goes to group commit, after the pipe.
//
// The pipe closes when it is empty and no request is waiting, after
// pipeMaxBatches batches (so that a bridge's lock is not held for long under
// a flood of writes), and before any request it does not take.

// pipeDepth is how many batches may be in the pipe (sent, not yet stored)
// while the owner plans the next one.
const pipeDepth = 4

// pipeBatchEntries is how many queued entries make the owner send the next
// batch before the switch decided the last one: fewer wait for its verdict,
// so that batches grow under load instead of paying a bundle and a commit
// each (a thousand-entry batch costs the store about twice as much an entry
// as a five-thousand-entry one, the switch a bundle more).
const pipeBatchEntries = 4096

// pipeMaxBatches is how many batches one pipe takes before it is closed,
// which hands the bridge's lock to whoever waits for it.
const pipeMaxBatches = 32

// pipe is the pipeline of one bridge while it is open. Its owner is
// runWrites; its storer goroutine ends when the owner closes queue.
type pipe struct {
	ws   *Writes
	b    *bridgeQueue
	ctx  context.Context
	conn *ofconn.Conn
	// unlock releases the bridge's lock and the bridge's busy mark.
	unlock func()

	queue   chan *pipedBatch
	stopped chan struct{} // closed when the storer has returned
	// empty receives (cap 1) when the last batch in the pipe is done.
	empty chan struct{}
	taken int // batches taken, by the owner
	// last is the batch the owner sent last.
	last *pipedBatch

	mu sync.Mutex
	// changing counts, per identity (flows only, so the ID) by its hash
	// (idKey), the batches in the pipe that change it. Two identities that
	// share a hash only make a request wait for the pipe (overlaps), and
	// hashes spare a string allocated per change.
	changing map[uint64]int32
	seed     maphash.Seed
	inPipe   int
	// broken is set when the bridge is no longer live (a verdict lost, the
	// store failed after the switch took a batch): no more batches enter.
	broken bool
	// back are the requests the storer hands back to group commit, to run
	// together, solo those to run alone.
	back, solo []*writeReq
}

// pipeStore is what a pipe needs of the store: plans made without writing
// (Entries.PlanPut), on the owner, and the transaction that writes them
// (Writer.PutPlanned), on the storer.
type pipeStore interface {
	PlanPut(bridge, module string, es []entry.Entry) (store.PutPlan, error)
	Update(fn func(w *store.Writer) error) error
}

func (ws *Writes) pipeStore() pipeStore { return storePipe{ws.cfg.Store} }

// storePipe is the store as a pipe uses it: its transaction, and the plans
// of its Entries.
type storePipe struct{ *store.Store }

func (p storePipe) PlanPut(bridge, module string, es []entry.Entry) (store.PutPlan, error) {
	return p.Entries().PlanPut(bridge, module, es)
}

// pipedBatch is a batch in the pipe: its plans, in request order, and the
// bundle of their changes (nil when nothing changes).
type pipedBatch struct {
	reqs    []*writeReq
	plans   []store.PutPlan
	results []writeResult
	// bundle is the batch's, committed by the owner and decided by the
	// storer's transaction (nil when nothing changes).
	bundle *bundle
}

// pipeable reports whether r may enter a pipe (see Pipelined writes).
func pipeable(r *writeReq) bool { return r.put && r.alone == nil }

// openPipe takes the bridge's lock and opens a pipe for batch when a request of it may
// enter one and b is live with nothing quarantined; otherwise it returns
// nil, holding nothing.
func (ws *Writes) openPipe(ctx context.Context, b *bridgeQueue, batch []*writeReq) *pipe {
	if !slices.ContainsFunc(batch, pipeable) {
		return nil
	}
	conn, live, unlock := ws.lockLive(ctx, b)
	if !live || b.Quarantine().Len() > 0 {
		unlock()
		return nil
	}
	p := &pipe{
		ws: ws, b: b, ctx: ctx, conn: conn,
		unlock:   unlock,
		queue:    make(chan *pipedBatch, pipeDepth-1),
		stopped:  make(chan struct{}),
		empty:    make(chan struct{}, 1),
		changing: map[uint64]int32{},
		seed:     maphash.MakeSeed(),
	}
	go p.store()
	return p
}

// takes reports whether the pipe takes another batch.
func (p *pipe) takes() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.broken && p.taken < pipeMaxBatches && p.ws.cfg.Gate.IsOpen() && p.ctx.Err() == nil
}

// run puts the requests of batch that may enter the pipe into it, as one
// batch, and returns the others. Requests whose plan fails get their error.
func (p *pipe) run(batch []*writeReq) (rest []*writeReq) {
	p.taken++
	pb := &pipedBatch{}
	// The bundle opens with the first change and takes each request's
	// changes once it is planned, so vswitchd decodes them while the next
	// is planned. Its bound, which reserves its xids, is what the batch
	// declares.
	bound := 0
	for _, r := range batch {
		if pipeable(r) {
			bound += len(r.declared)
		}
	}
	for _, r := range batch {
		// A request declaring what a batch in the pipe changes (this one
		// included) would be planned without that change. The storer drops
		// a batch's identities only once it is stored, so a plan made after
		// this check sees every batch whose identities are gone.
		if !pipeable(r) || p.overlaps(r.declared) {
			rest = append(rest, r)
			continue
		}
		pp, err := p.planPut(r)
		if err != nil {
			r.finish()
			r.done <- writeResult{err: err}
			continue
		}
		p.mu.Lock()
		for _, c := range pp.Changed {
			p.changing[p.idKey(c.Entry.ID)]++
		}
		p.mu.Unlock()
		pb.reqs = append(pb.reqs, r)
		pb.plans = append(pb.plans, pp)
		pb.results = append(pb.results, writeResult{res: pp.Result})
		if len(pp.Changed) == 0 {
			continue
		}
		if pb.bundle == nil {
			// A refused position is mapped through the results once the
			// bundle is sent, when no more requests join. Refused as a
			// whole, its requests go back to group commit (resendWhole).
			at := func(idx []int) ([]plan.Change, error) { return streamedAt(pb.results)(idx) }
			pb.bundle = p.ws.openBundle(p.ctx, p.conn, streamSpec{bound: bound, at: at, h: resendable})
		}
		for _, c := range pp.Changed {
			pb.bundle.stream.add(plan.WriteChange(c))
		}
		pb.bundle.stream.flush()
	}
	if len(pb.reqs) == 0 {
		// Every request failed its plan: nothing entered the pipe. An
		// empty pipe must still say so, or the owner waits for it with
		// the bridge's lock held, and the bridge is wedged.
		p.mu.Lock()
		if p.inPipe == 0 {
			select {
			case p.empty <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
		return rest
	}
	if pb.bundle != nil {
		// The COMMIT goes now, not when the storer gets to the batch.
		pb.bundle.stream.send()
		pb.bundle.sent = true
	}
	p.mu.Lock()
	p.inPipe++
	p.mu.Unlock()
	p.ws.cfg.Faults.Piped(len(pb.reqs))
	p.last = pb
	p.queue <- pb
	return rest
}

// planPut is PlanPut of r; a panic (a store bbolt cannot read) fails r with
// ErrInternal, as in commitGroup, and the bridge goes on.
func (p *pipe) planPut(r *writeReq) (plan store.PutPlan, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = p.ws.writePanic(p.b, v, "pipelined write's plan")
		}
	}()
	return p.ws.pipeStore().PlanPut(p.b.Name(), r.module, r.declared)
}

// atSwitch returns a channel closed once the switch has decided the batch
// sent last, or nil when it has.
func (p *pipe) atSwitch() <-chan struct{} {
	if p.last == nil || p.last.bundle == nil {
		return nil
	}
	select {
	case <-p.last.bundle.stream.decided:
		return nil
	default:
		return p.last.bundle.stream.decided
	}
}

// overlaps reports whether es declares an identity a batch in the pipe
// changes.
func (p *pipe) overlaps(es []entry.Entry) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.changing) == 0 {
		return false
	}
	for _, e := range es {
		if p.changing[p.idKey(e.ID)] > 0 {
			return true
		}
	}
	return false
}

// idKey is the key of identity id in changing.
func (p *pipe) idKey(id []byte) uint64 { return maphash.Bytes(p.seed, id) }

// close waits until the storer is done with every batch, releases the bridge's lock and
// returns the requests handed back to group commit: back to run together,
// solo each alone.
func (p *pipe) close() (back, solo []*writeReq) {
	close(p.queue)
	<-p.stopped
	p.unlock()
	return p.back, p.solo
}

// store is the storer: the batches in order, in transactions of as many as
// are queued (up to maxBatchEntries changes, or one larger batch alone), so
// that a flood of small batches does not pay a commit each.
func (p *pipe) store() {
	defer close(p.stopped)
	var next *pipedBatch // taken from the queue, for the next transaction
	for {
		pb := next
		next = nil
		if pb == nil {
			var ok bool
			if pb, ok = <-p.queue; !ok {
				return
			}
		}
		group, n := []*pipedBatch{pb}, pb.changes()
	more:
		for n < maxBatchEntries {
			select {
			case nb, ok := <-p.queue:
				if !ok {
					break more
				}
				if n+nb.changes() > maxBatchEntries {
					next = nb
					break more
				}
				group, n = append(group, nb), n+nb.changes()
			default:
				break more
			}
		}
		p.storeGroup(group)
		p.mu.Lock()
		for _, pb := range group {
			for _, pp := range pb.plans {
				for _, c := range pp.Changed {
					k := p.idKey(c.Entry.ID)
					if p.changing[k]--; p.changing[k] == 0 {
						delete(p.changing, k)
					}
				}
			}
		}
		p.inPipe -= len(group)
		if p.inPipe == 0 {
			select {
			case p.empty <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
	}
}

func (pb *pipedBatch) changes() int {
	n := 0
	for _, pp := range pb.plans {
		n += len(pp.Changed)
	}
	return n
}

// storeGroup decides the batches of group in one transaction: see
// Pipelined writes. What it does not answer it hands back (p.back, p.solo)
// as commitBatch would split it: a refusal names its culprits, who go
// alone, and the others of their batch go again together; a failure that
// names nobody sends everyone alone. A lone request gets its error.
func (p *pipe) storeGroup(group []*pipedBatch) {
	// The pipe decided the bridge was live when it opened, and holds the bridge's lock.
	var sent []*bundle
	for _, pb := range group {
		if pb.bundle != nil {
			sent = append(sent, pb.bundle)
		}
	}
	t := p.ws.newTxn(p.ctx, p.b, "pipelined write", p.conn, true, sent)
	err := t.run(&pipeStep{group: group, db: p.ws.pipeStore()})
	var open []*pipedBatch // not answered yet
	var back, solo []*writeReq
	for _, pb := range group {
		if pb.bundle == nil || !pb.bundle.dropped {
			open = append(open, pb)
			continue
		}
		switch b := pb.bundle; {
		case b.o == RefusedWhole:
			// Its changes are in memory: group commit sends them again.
			back = append(back, pb.reqs...)
		case len(pb.reqs) == 1:
			pb.reqs[0].done <- writeResult{err: rejection(b.re)}
		default:
			together, alone := pb.split(b.re)
			back, solo = append(back, together...), append(solo, alone...)
		}
	}
	var reqs []*writeReq
	for _, pb := range open {
		reqs = append(reqs, pb.reqs...)
	}
	switch {
	case t.panicked != nil:
		for _, r := range reqs {
			r.done <- writeResult{err: err}
		}
	case err != nil && len(reqs) == 1:
		reqs[0].done <- writeResult{err: err}
	case err != nil:
		solo = append(solo, reqs...)
	default:
		for _, pb := range open {
			for i, r := range pb.reqs {
				pb.results[i].applied = pb.bundle == nil || pb.bundle.o == Applied
				r.done <- pb.results[i]
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A verdict lost, or the store failed after the switch took a batch:
	// the bridge is no longer live.
	p.broken = p.broken || t.diverged
	p.back = append(p.back, back...)
	p.solo = append(p.solo, solo...)
}
