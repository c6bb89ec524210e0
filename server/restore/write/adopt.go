package write

import (
	"context"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// An adoption is a write whose changes are read from the switch: what a
// controller relayed by the guard installed while flowstated was away
// becomes its module's (package owner, adopt.go), before a replay reads
// the desired state. Like every write it goes through the bridge's queue,
// alone, and runs in the one transaction (txn.go). It changes nothing on
// the switch, which already holds what it stores: its switch step is
// empty, so the transaction sends nothing and decides no verdict, as for
// any write while the bridge is not live; and the replay that waits for it
// applies it, so it asks for no other.

// An Adopter is what an adoption asks of its maker (owner.Learning). Both
// methods run in the write's transaction, under the bridge's lock.
type Adopter interface {
	// Learn reads the switch and the store: the entries module declares
	// anew or in the switch's version (puts), and the module's entries to
	// remove (removed, Kind and ID); none, nothing is stored. Its error
	// stores nothing and is the write's.
	Learn(ctx context.Context) (module string, puts, removed []entry.Entry, err error)
	// Stored is told the store's outcome of what Learn returned (nil:
	// stored, or nothing to store). When the store failed, its error is
	// the write's (nil: the replay goes on).
	Stored(err error) error
}

// Adopt runs a as a write of bridge and waits for it, or for ctx (submit).
func (ws *Writes) Adopt(ctx context.Context, bridge string, a Adopter) error {
	s := &adoptStep{a: a}
	_, err := ws.submit(ctx, bridge, &writeReq{alone: func(ctx context.Context, b *bridgeQueue) writeResult {
		_, err := ws.runTxn(ctx, b, "adoption", s)
		if s.told {
			err = s.err
		}
		return writeResult{err: err}
	}})
	return err
}

// adoptStep is the store step of an adoption.
type adoptStep struct {
	a Adopter
	// told: the store failed and Stored was told; err is then the
	// write's error.
	told bool
	err  error
}

// store stores what Learn read, in one store transaction whose commit
// point is the write's (atSwitch: nothing to send).
func (s *adoptStep) store(t *txn, atSwitch func() error) (committed, error) {
	module, puts, removed, err := s.a.Learn(t.ctx)
	if err != nil {
		return committed{}, err
	}
	if len(puts)+len(removed) > 0 {
		err = t.ws.batchStore().Update(func(w *store.Writer) error {
			if len(puts) > 0 {
				if _, err := w.Put(t.b.Name(), module, puts); err != nil {
					return err
				}
			}
			if len(removed) > 0 {
				if _, err := w.Delete(t.b.Name(), module, removed); err != nil {
					return err
				}
			}
			return atSwitch()
		})
	}
	if serr := s.a.Stored(err); err != nil {
		s.told, s.err = true, serr
		return committed{}, err
	}
	return committed{declared: [][]entry.Entry{puts, removed}, replaying: true}, nil
}

// after is empty: the switch holds what an adoption stores.
func (*adoptStep) after(*txn) (sendAfter, error) { return sendAfter{}, nil }

// refused is never called: an adoption sends nothing.
func (*adoptStep) refused(re *plan.RejectedError) error { return re }
