package restore

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// RejectedError is the switch's refusal of some changes of a plan. Nothing of
// the plan stays on the switch (meters sent before the bundle are undone),
// unless SwitchChanged says otherwise.
type RejectedError struct {
	// Changes the switch refused, with Reasons[i] for Changes[i].
	Changes []Change
	Reasons []string
	Err     error
	// SwitchChanged is true when the switch may hold part of the plan: the
	// bundle committed before a meter delete after it was refused, or the
	// meters sent before the bundle could not all be undone (UndoErr).
	SwitchChanged bool
	UndoErr       error
}

func (e *RejectedError) Error() string {
	if e.UndoErr != nil {
		return fmt.Sprintf("%v (and undoing the meters sent before it failed: %v)", e.Err, e.UndoErr)
	}
	return e.Err.Error()
}
func (e *RejectedError) Unwrap() error { return e.Err }

// stats of one applied plan.
type applyStats struct{ messages, bytes int }

// applyPlan sends p all or nothing, as far as the switch allows:
//
//  1. Meters added or modified, one by one (OVS cannot bundle METER_MOD).
//  2. One bundle: groups, flows.
//  3. Meters deleted (after the flows that used them are gone).
//
// When the switch refuses a meter of step 1 or the bundle, the meters already
// sent in step 1 are undone (added ones deleted, modified ones given their
// previous content, Change.Actual) before the *RejectedError returns. Any
// other error (the connection failed) leaves the outcome unknown; the caller
// replays.
func applyPlan(ctx context.Context, conn *ofconn.Conn, p *plan) (applyStats, error) {
	var st applyStats
	send := func(c Change, m ofconn.Message) error {
		st.messages++
		st.bytes += len(m)
		if err := conn.Send(ctx, m); err != nil {
			var oe *ofconn.OFError
			if errors.As(err, &oe) {
				return &RejectedError{Changes: []Change{c}, Reasons: []string{oe.Name}, Err: fmt.Errorf("%s %s: %w", c.Kind, c.Op, err)}
			}
			return err
		}
		return nil
	}
	// undo takes back the first n meters of p.pre after a refusal.
	undo := func(n int, re *RejectedError) error {
		for i := n - 1; i >= 0; i-- {
			c := p.pre[i]
			m := entry.DeleteMeter(c.Desired.ID)
			if c.Op == OpModify && c.Actual != nil {
				m = entry.WithModify(c.Actual)
			}
			if err := send(c, m); err != nil {
				re.SwitchChanged, re.UndoErr = true, fmt.Errorf("%s %s: %w", c.Kind, c.Desired.ID, err)
				break
			}
		}
		return re
	}
	for i, c := range p.pre {
		if err := send(c, c.messages()[0]); err != nil { // a meter is one message
			var re *RejectedError
			if errors.As(err, &re) {
				return st, undo(i, re)
			}
			return st, err
		}
	}
	if len(p.bundle) > 0 {
		msgs := make([]ofconn.Message, 0, len(p.bundle))
		owner := make([]int, 0, len(p.bundle)) // msgs[i] performs p.bundle[owner[i]]
		for i, c := range p.bundle {
			for _, m := range c.messages() {
				msgs, owner = append(msgs, m), append(owner, i)
				st.bytes += len(m)
			}
		}
		st.messages += len(msgs)
		if err := conn.Bundle(ctx, msgs); err != nil {
			var be *ofconn.BundleError
			if !errors.As(err, &be) {
				return st, err
			}
			re := &RejectedError{Err: err}
			for _, f := range be.Failed {
				if f.Index >= 0 && f.Index < len(owner) {
					re.Changes = append(re.Changes, p.bundle[owner[f.Index]])
					re.Reasons = append(re.Reasons, f.Name)
				}
			}
			return st, undo(len(p.pre), re)
		}
	}
	for _, c := range p.post {
		if err := send(c, c.messages()[0]); err != nil { // a meter delete is one message
			var re *RejectedError
			if errors.As(err, &re) {
				re.SwitchChanged = true
			}
			return st, err
		}
	}
	return st, nil
}
