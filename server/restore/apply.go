package restore

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// RejectedError is the switch's refusal of some changes of a plan. Nothing of
// the bundle was installed; meters sent before it may have been.
type RejectedError struct {
	// Changes the switch refused, with Reasons[i] for Changes[i].
	Changes []Change
	Reasons []string
	Err     error
}

func (e *RejectedError) Error() string { return e.Err.Error() }
func (e *RejectedError) Unwrap() error { return e.Err }

// stats of one applied plan.
type applyStats struct{ messages, bytes int }

// applyPlan sends p: meters, one bundle, meter deletes.
func applyPlan(ctx context.Context, conn *ofconn.Conn, p *plan) (applyStats, error) {
	var st applyStats
	send := func(c Change) error {
		m := c.message()
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
	for _, c := range p.pre {
		if err := send(c); err != nil {
			return st, err
		}
	}
	if len(p.bundle) > 0 {
		msgs := make([]ofconn.Message, len(p.bundle))
		for i, c := range p.bundle {
			msgs[i] = c.message()
			st.bytes += len(msgs[i])
		}
		st.messages += len(msgs)
		if err := conn.Bundle(ctx, msgs); err != nil {
			var be *ofconn.BundleError
			if !errors.As(err, &be) {
				return st, err
			}
			re := &RejectedError{Err: err}
			for _, f := range be.Failed {
				if f.Index >= 0 && f.Index < len(p.bundle) {
					re.Changes = append(re.Changes, p.bundle[f.Index])
					re.Reasons = append(re.Reasons, f.Name)
				}
			}
			return st, re
		}
	}
	for _, c := range p.post {
		if err := send(c); err != nil {
			return st, err
		}
	}
	return st, nil
}
