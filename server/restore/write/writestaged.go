package write

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// A staged write is a Put or Sync too large to hold in memory: the request
// arrives as a store.Spool (its flows in sorted runs on disk, its groups and
// meters in memory), and store.Stage builds the bridge's new flow bucket
// beside the old one in bounded transactions. It goes through the bridge's
// write queue like any write, but alone (runWrites), and under the bridge's lock from
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
	pre, head, tail, post []plan.Change
	// headEnds[i] is where the messages of head[i] end in the bundle.
	headEnds []int
}

func newStagedNonFlows(p *store.StagePlan) stagedNonFlows {
	var nf stagedNonFlows
	for _, sc := range p.Changed {
		c := plan.WriteChange(sc)
		if c.Kind == entry.KindMeter {
			nf.pre = append(nf.pre, c)
			continue
		}
		nf.head = append(nf.head, c)
		nf.headEnds = append(nf.headEnds, nf.headMessages()+len(c.Messages()))
	}
	for _, en := range p.Removed {
		c := plan.Change{Op: plan.OpDelete, Kind: en.Kind, Desired: en, Actual: en.Payload, Index: -1}
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
func (nf *stagedNonFlows) at(x int, flows []int32) (plan.Change, bool) {
	if x < 0 {
		return plan.Change{}, false
	}
	if x < nf.headMessages() {
		i, _ := slices.BinarySearch(nf.headEnds, x+1)
		return nf.head[i], true
	}
	x -= nf.headMessages()
	if x < len(flows) {
		if flows[x] < 0 {
			return plan.Change{Op: plan.OpDelete, Kind: entry.KindFlow, Index: -1}, true
		}
		return plan.Change{Op: plan.OpAdd, Kind: entry.KindFlow, Index: int(flows[x])}, true
	}
	x -= len(flows)
	if x < len(nf.tail) {
		return nf.tail[x], true
	}
	return plan.Change{}, false
}

// commitStaged runs the staged write w (see above).
func (ws *Writes) commitStaged(ctx context.Context, b *bridgeQueue, w store.StagedWrite) writeResult {
	start := time.Now()
	s := &stagedStep{w: w}
	t, err := ws.runTxn(ctx, b, "staged write", s)
	if err != nil {
		return writeResult{err: err}
	}
	ws.cfg.Metrics.StagedWrites.WithLabelValues(b.Name()).Inc()
	ws.log.Info("staged write stored", "bridge", b.Name(), "module", w.Module, "sync", w.Sync, "entries", w.Spool.Len(),
		"added", s.staged.Added, "changed", s.staged.Changed, "removed", s.staged.Removed, "applied", t.live, "took", time.Since(start))
	return writeResult{applied: t.live, staged: s.staged}
}

// stagedStep is the store step of a staged write: its groups and meters
// planned (open), its flows staged while its bundle streams them, and the
// staged bucket swapped in once the switch took the bundle.
type stagedStep struct {
	w      store.StagedWrite
	nf     stagedNonFlows
	at     []int32       // the request index behind each flow position, -1 for a removal
	opaque []plan.Change // for forms.Learn
	// unquarantine are the quarantined keys the write declares.
	unquarantine []string
	staged       *store.Staged
}

// open plans the write's groups and meters and the bundle's bound, when the
// bridge is live: its bundle in the order above.
func (s *stagedStep) open(t *txn) (streamSpec, error) {
	if !t.live {
		return streamSpec{}, nil
	}
	sp, err := t.ws.stagingStore().Plan(s.w)
	if err != nil {
		return streamSpec{}, err
	}
	s.nf = newStagedNonFlows(sp)
	s.w.Plan = sp
	bound, err := t.ws.stagingStore().Bound(s.w)
	if err != nil {
		return streamSpec{}, err
	}
	nf := &s.nf
	bound += nf.headMessages() + len(nf.tail)
	at := func(idx []int) ([]plan.Change, error) {
		out := make([]plan.Change, len(idx))
		for i, x := range idx {
			c, ok := nf.at(x, s.at)
			if !ok {
				return nil, fmt.Errorf("restore: bundle position %d is past the %d staged changes", x, nf.headMessages()+len(s.at)+len(nf.tail))
			}
			out[i] = c
		}
		return out, nil
	}
	// Its changes are not in memory to send again: onDisk.
	return streamSpec{stream: true, pre: nf.pre, bound: bound, post: nf.post, at: at, h: onDisk}, nil
}

// store stages the write, streaming each flow change as the store decides
// it, and commits the staged bucket once the switch took the bundle.
func (s *stagedStep) store(t *txn, atSwitch func() error) (committed, error) {
	if t.stream != nil {
		s.streamTo(t.stream)
	}
	// The quarantined entries the request declares are forgotten once it is
	// stored, as for any write: the switch tells again whether it takes
	// them.
	if q := t.b.Quarantine(); q.Len() > 0 {
		s.w.Declared = func(kind entry.Kind, id []byte) {
			if k := plan.Key(kind, id); q.Has(k) {
				s.unquarantine = append(s.unquarantine, k)
			}
		}
	}
	staged, err := t.ws.stagingStore().Stage(s.w)
	if err != nil {
		return committed{}, err
	}
	defer func() {
		if s.staged == nil {
			if err := staged.Discard(); err != nil {
				t.ws.log.Warn("dropping a staged write failed; the next start drops it", "bridge", t.b.Name(), "err", err)
			}
		}
	}()
	if st := t.stream; st != nil {
		// The groups it removes end the bundle.
		for _, c := range s.nf.tail {
			st.add(c)
		}
		if st.fallback {
			// More changes than the bound: cannot happen, the bound counts
			// every flow either side may hold.
			return committed{}, fmt.Errorf("restore: bridge %s: a staged write outgrew its bundle: %w", t.b.Name(), errdefs.ErrInternal)
		}
	}
	if err := atSwitch(); err != nil {
		return committed{}, err
	}
	if err := staged.Commit(); err != nil {
		return committed{}, err
	}
	s.staged = staged
	return committed{keys: s.unquarantine, learn: s.opaque}, nil
}

// after: nothing, the write's changes are only on disk.
func (s *stagedStep) after(*txn) (sendAfter, error) { return sendAfter{}, nil }

func (s *stagedStep) refused(re *plan.RejectedError) error { return rejection(re) }

// stagingStore is what a staged write needs of the store: the plan of its
// groups and meters, the bound of its bundle, and the staging, whose
// Staged it commits or discards.
type stagingStore interface {
	Plan(w store.StagedWrite) (*store.StagePlan, error)
	Bound(w store.StagedWrite) (int, error)
	Stage(w store.StagedWrite) (*store.Staged, error)
}

func (ws *Writes) stagingStore() stagingStore { return ws.cfg.Store.Staging() }

// streamTo starts the bundle with the groups added or changed and sets the
// write's hooks to stream each flow change into st as the store decides it.
func (s *stagedStep) streamTo(st *writeStream) {
	nf := &s.nf
	for _, c := range slices.Concat(nf.pre, nf.head) {
		if c.Desired.Opaque {
			s.opaque = append(s.opaque, c)
		}
	}
	for _, c := range nf.head {
		st.add(c)
	}
	s.w.Changed = func(sc store.Change) {
		c := plan.WriteChange(sc)
		s.at = append(s.at, int32(sc.Index))
		st.add(c)
		if sc.Entry.Opaque {
			s.opaque = append(s.opaque, c)
		}
	}
	s.w.Removed = func(en entry.Entry) {
		s.at = append(s.at, -1)
		st.add(plan.Change{Op: plan.OpDelete, Kind: en.Kind, Actual: en.Payload, Index: -1})
	}
}
