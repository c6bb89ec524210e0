package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/store"
)

// A staged write is a Put or Sync too large to hold in memory: the request
// arrives as a store.Spool (its flows in sorted runs on disk, its groups and
// meters in memory), and store.Stage builds the bridge's new flow bucket
// beside the old one in bounded transactions. It goes through the bridge's
// write queue like any write, but alone (runWrites), and under b.mu from
// staging to commit, so no other write or replay of the bridge slips
// between them:
//
//  1. While the bridge is live, the store first decides the groups and
//     meters (store.PlanStage), and a bundle opens with the staging (as a
//     streamed write, writestream.go), in a sendOrder's order: meters added
//     or changed before it, one by one; in it the groups added or changed,
//     then each flow change as the store decides it (removals of a Sync
//     where the merge finds them: flows need no order among themselves),
//     then the groups removed; the meters removed after it.
//  2. Staging done, the bundle is committed; only then the store swaps the
//     staged bucket in (Staged.Commit). The switch refusing an entry, or the
//     store refusing the request (an identity another module owns, a
//     duplicate, a group nobody declared or still used), discards both,
//     and the meters sent before the bundle are taken back: nothing
//     changes.
//  3. A switch that fails otherwise (the connection died, the reply to
//     COMMIT was lost, the bundle refused as a whole) does not fail the
//     write: it is stored and the bridge replays, which makes the switch
//     equal to the store, as for any write.

// stagedNonFlows are a staged write's group and meter changes in the order
// the switch takes them (see above).
type stagedNonFlows struct {
	pre, head, tail, post []Change
	// headEnds[i] is where the messages of head[i] end in the bundle.
	headEnds []int
}

func newStagedNonFlows(p *store.StagePlan) stagedNonFlows {
	var nf stagedNonFlows
	for _, sc := range p.Changed {
		c := writeChange(sc)
		if c.Kind == entry.KindMeter {
			nf.pre = append(nf.pre, c)
			continue
		}
		nf.head = append(nf.head, c)
		nf.headEnds = append(nf.headEnds, nf.headMessages()+len(c.messages()))
	}
	for _, en := range p.Removed {
		c := Change{Op: OpDelete, Kind: en.Kind, Desired: en, Actual: en.Payload, Index: -1}
		if c.Kind == entry.KindMeter {
			nf.post = append(nf.post, c)
		} else {
			nf.tail = append(nf.tail, c)
		}
	}
	return nf
}

func (nf *stagedNonFlows) headMessages() int {
	if len(nf.headEnds) == 0 {
		return 0
	}
	return nf.headEnds[len(nf.headEnds)-1]
}

// at is the change behind bundle position x, given flows, the request index
// of each flow position (-1 for a removal).
func (nf *stagedNonFlows) at(x int, flows []int32) (Change, bool) {
	if x < 0 {
		return Change{}, false
	}
	if x < nf.headMessages() {
		i, _ := slices.BinarySearch(nf.headEnds, x+1)
		return nf.head[i], true
	}
	x -= nf.headMessages()
	if x < len(flows) {
		if flows[x] < 0 {
			return Change{Op: OpDelete, Kind: entry.KindFlow, Index: -1}, true
		}
		return Change{Op: OpAdd, Kind: entry.KindFlow, Index: int(flows[x])}, true
	}
	x -= len(flows)
	if x < len(nf.tail) {
		return nf.tail[x], true
	}
	return Change{}, false
}

// commitStaged runs staged request r (see above).
func (e *Engine) commitStaged(ctx context.Context, b *bridge, r *writeReq) (res writeResult) {
	t, unlock := e.lockTxn(ctx, b, "staged write")
	defer unlock()
	t.counted()
	defer func() {
		if err := t.end(recover(), res.err); err != nil {
			res = writeResult{err: err}
		}
	}()

	start := time.Now()
	w := *r.staged
	var ss *stagedSend
	if t.live {
		var err error
		if ss, err = t.startStaged(&w); err != nil {
			return writeResult{err: err}
		}
		defer ss.abort(t)
	}
	// The quarantined entries the request declares are forgotten once it is
	// stored, as for any write: the switch tells again whether it takes
	// them.
	var unquarantine []string
	if b.quarantine.len() > 0 {
		w.Declared = func(kind entry.Kind, id []byte) {
			k := key(kind, id)
			if b.quarantine.has(k) {
				unquarantine = append(unquarantine, k)
			}
		}
	}
	staged, err := e.stagingStore().Stage(w)
	if err != nil {
		return writeResult{err: err}
	}
	defer func() {
		if !t.stored {
			if err := staged.Discard(); err != nil {
				e.log.Warn("dropping a staged write failed; the next start drops it", "bridge", b.name, "err", err)
			}
		}
	}()
	if ss != nil {
		if err := ss.commit(t); err != nil {
			return writeResult{err: err}
		}
	}
	if err := staged.Commit(); err != nil {
		return writeResult{err: err}
	}
	t.commit(unquarantine)
	e.cfg.Metrics.stagedWrites.WithLabelValues(b.name).Inc()
	if ss != nil {
		t.learn(ss.opaque)
	}
	e.log.Info("staged write stored", "bridge", b.name, "module", w.Module, "sync", w.Sync, "entries", w.Spool.Len(),
		"added", staged.Added, "changed", staged.Changed, "removed", staged.Removed, "applied", t.live, "took", time.Since(start))
	return writeResult{applied: t.live, staged: staged}
}

// commit ends the staged write's bundle: the groups it removes, then the
// COMMIT, and takes the switch's verdict (decide). Its error rolls the
// write back.
func (ss *stagedSend) commit(t *txn) error {
	t.touched = true
	for _, c := range ss.nf.tail {
		ss.stream.add(c)
	}
	if ss.stream.fallback {
		// More changes than the bound: cannot happen, the bound counts
		// every flow either side may hold.
		return fmt.Errorf("restore: bridge %s: a staged write outgrew its bundle: %w", t.b.name, errdefs.ErrInternal)
	}
	s := ss.stream
	ss.stream = nil
	// Its changes are not in memory to send again: onDisk.
	o, re, err := t.decide(t.finish(s), onDisk)
	if o == Refused {
		return rejection(re)
	}
	return err
}

// abort discards the bundle when the write ends before commit sent it;
// meters sent before the bundle that could not be taken back leave the
// switch changed. Then the bundle's context ends.
func (ss *stagedSend) abort(t *txn) {
	defer ss.cancel()
	if ss.stream == nil {
		return
	}
	var re *RejectedError
	if err := ss.stream.finish(false); errors.As(err, &re) && re.SwitchChanged {
		t.touched = true
	}
}

// stagingStore is what a staged write needs of the store: the plan of its
// groups and meters, the bound of its bundle, and the staging, whose
// Staged it commits or discards.
type stagingStore interface {
	Plan(w store.StagedWrite) (*store.StagePlan, error)
	Bound(w store.StagedWrite) (int, error)
	Stage(w store.StagedWrite) (*store.Staged, error)
}

func (e *Engine) stagingStore() stagingStore { return e.cfg.Store.Staging() }

// stagedSend is the bundle of a staged write while it is staged.
type stagedSend struct {
	stream *writeStream
	cancel context.CancelFunc
	nf     stagedNonFlows
	at     []int32  // the request index behind each flow position, -1 for a removal
	opaque []Change // for learnForms
}

// startStaged plans w's groups and meters, opens its bundle in the order
// above and sets w's hooks to stream each flow change as the store decides
// it. The caller ends it with commit or abort.
func (t *txn) startStaged(w *store.StagedWrite) (*stagedSend, error) {
	e := t.e
	plan, err := e.stagingStore().Plan(*w)
	if err != nil {
		return nil, err
	}
	ss := &stagedSend{nf: newStagedNonFlows(plan)}
	w.Plan = plan
	bound, err := e.stagingStore().Bound(*w)
	if err != nil {
		return nil, err
	}
	nf := &ss.nf
	bound += nf.headMessages() + len(nf.tail)
	ss.stream, ss.cancel = t.openStream(nf.pre, bound, nf.post, func(idx []int) ([]Change, error) {
		out := make([]Change, len(idx))
		for i, x := range idx {
			c, ok := nf.at(x, ss.at)
			if !ok {
				return nil, fmt.Errorf("restore: bundle position %d is past the %d staged changes", x, nf.headMessages()+len(ss.at)+len(nf.tail))
			}
			out[i] = c
		}
		return out, nil
	})
	for _, c := range slices.Concat(nf.pre, nf.head) {
		if c.Desired.Opaque {
			ss.opaque = append(ss.opaque, c)
		}
	}
	for _, c := range nf.head {
		ss.stream.add(c)
	}
	w.Changed = func(sc store.Change) {
		c := writeChange(sc)
		ss.at = append(ss.at, int32(sc.Index))
		ss.stream.add(c)
		if sc.Entry.Opaque {
			ss.opaque = append(ss.opaque, c)
		}
	}
	w.Removed = func(en entry.Entry) {
		ss.at = append(ss.at, -1)
		ss.stream.add(Change{Op: OpDelete, Kind: en.Kind, Actual: en.Payload, Index: -1})
	}
	return ss, nil
}
