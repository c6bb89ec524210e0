package write

import (
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// pipeStep is the store step of a pipe's transaction: the plans of its
// batches written while the switch decides them, and kept only if the
// switch took or may hold every batch; a refused batch is left out and the
// rest written again (errRefusedInGroup). Its commit lifts no quarantine
// (nothing is quarantined while a pipe is open, openPipe) and learns
// nothing (nothing opaque enters a pipe).
//
// The store's commit overlaps the switch's verdict (the batches' COMMITs
// went before the storer took them):
//
//  1. the plans are written and committed (store.Writer.PutPlanned), their
//     fsync running while the switch decides;
//  2. then the verdicts (atSwitch): the switch took or may hold every
//     batch, and the transaction is stored;
//  3. or it refused one (or a fault stood for a failed store): the
//     commit is taken back (store.Writer.UndoPlanned) before anyone is
//     answered, and the transaction fails as if never committed. An undo
//     that fails leaves the store holding what the switch refused: the
//     bridge replays, and the replay quarantines what the switch refuses
//     (as after a death between the commit and the undo).
//
// No one reads an undone write meanwhile but the reads that take no bridge
// lock (List, Status's counts, Backup): the pipe holds the bridge's lock
// (Diff, audits, replays wait for it), and a plan declaring an identity a
// batch in the pipe changes waits for the pipe (overlaps).
type pipeStep struct {
	group []*pipedBatch
	db    pipeStore
}

func (s *pipeStep) store(t *txn, atSwitch func() error) (committed, error) {
	var plans []store.PutPlan
	sent := false
	for _, pb := range s.group {
		if pb.bundle == nil || !pb.bundle.dropped {
			// pb.results already hold the plans' Results (the bundle maps
			// a refusal through them).
			plans = append(plans, pb.plans...)
			sent = sent || pb.bundle != nil
		}
	}
	if !sent { // nothing changes: nothing to write
		return committed{}, nil
	}
	if err := s.db.Update(func(w *store.Writer) error { return w.PutPlanned(plans...) }); err != nil {
		return committed{}, err
	}
	return committed{}, s.verdicts(t, atSwitch, plans)
}

// verdicts waits for the switch's verdicts once plans are committed
// (atSwitch), and takes the commit back when they fail it, or when a panic
// ends the transaction (which then ends as not stored).
func (s *pipeStep) verdicts(t *txn, atSwitch func() error, plans []store.PutPlan) error {
	defer func() {
		if p := recover(); p != nil {
			_ = s.undo(t, plans, fmt.Errorf("restore: panic: %v", p))
			panic(p)
		}
	}()
	if err := atSwitch(); err != nil {
		return s.undo(t, plans, err)
	}
	return nil
}

// undo takes back the committed plans after cause (a refusal, a fault), and
// returns cause; if it cannot, the bridge replays (see pipeStep).
func (s *pipeStep) undo(t *txn, plans []store.PutPlan, cause error) error {
	t.ws.cfg.Faults.BeforeUndo()
	if err := s.db.Update(func(w *store.Writer) error { return w.UndoPlanned(plans...) }); err != nil {
		err = fmt.Errorf("restore: taking back a pipelined write after %w failed: %w", cause, err)
		t.diverged = true
		t.ws.divergedLocked(t.b, "the store holds a pipelined write it could not take back", err)
		return err
	}
	return cause
}

// after: a batch refused as a whole goes back to group commit, which sends
// it again; this transaction is written again without it.
func (s *pipeStep) after(*txn) (sendAfter, error) { return sendAfter{}, errRefusedInGroup }

func (s *pipeStep) refused(*plan.RejectedError) error { return errRefusedInGroup }

// split divides pb's requests after the switch refused re: those whose
// changes it names go alone, the others together; without names, all alone.
func (pb *pipedBatch) split(re *plan.RejectedError) (together, alone []*writeReq) {
	owner := map[string]int{}
	for i, pp := range pb.plans {
		for _, c := range pp.Changed {
			owner[plan.Key(c.Entry.Kind, c.Entry.ID)] = i
		}
	}
	var fe *failedError
	if !errors.As(refused(re, owner, len(pb.reqs)), &fe) {
		return nil, pb.reqs
	}
	for i, r := range pb.reqs {
		if fe.reqs[i] {
			alone = append(alone, r)
		} else {
			together = append(together, r)
		}
	}
	return together, alone
}
