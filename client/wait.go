package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Pending says what keeps flowstated from being converged, one line per
// cause: a closed gate and the modules it awaits, each bridge neither
// converged nor excused and why. It is empty when converged.
func (s *Status) Pending() []string {
	var out []string
	if g := s.Gate; !g.Open {
		msg := "gate closed, waiting for modules " + strings.Join(g.WaitingFor, ", ")
		if !g.Deadline.IsZero() {
			msg += fmt.Sprintf(" (readiness timeout in %v)", time.Until(g.Deadline).Round(time.Second))
		}
		out = append(out, msg)
	}
	for _, b := range s.Bridges {
		if b.Converged || b.Excused != "" {
			continue
		}
		msg := b.Name + " not converged"
		if !b.Connected {
			msg = b.Name + " not connected"
		}
		if b.Reason != "" {
			msg += ": " + b.Reason
		} else if e := b.LastReplay.Error; e != "" {
			msg += ": " + e
		}
		out = append(out, msg)
	}
	return out
}

// Status poll backoff of WaitConverged.
const (
	waitBackoffMin = 50 * time.Millisecond
	waitBackoffMax = time.Second
)

// WaitConverged returns once the gate is open and every managed bridge is
// converged or excused (flow-restore-wait was released without it; see
// BridgeStatus.Excused), polling Status. It rides out flowstated being
// unreachable. When ctx ends first, the error names what is missing (or
// the last error) and wraps ctx's error.
func (c *Client) WaitConverged(ctx context.Context) (*Status, error) {
	var why string
	delay := waitBackoffMin
	for {
		st, err := c.Status(ctx)
		switch {
		case err == nil:
			pending := st.Pending()
			if len(pending) == 0 {
				return st, nil
			}
			why = strings.Join(pending, "; ")
		case errors.Is(err, errdefs.ErrUnavailable):
			why = "flowstated unreachable: " + err.Error()
			var ue *unreachableError
			if errors.As(err, &ue) { // Status waited until ctx ended
				why = "flowstated unreachable: " + ue.last.Error()
			}
		case ctx.Err() != nil:
			// The last call failed on ctx itself: keep the state seen before.
		default:
			return nil, fmt.Errorf("client: wait for convergence: %w", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if why == "" {
				why = "no answer from flowstated"
			}
			return nil, fmt.Errorf("client: not converged: %s: %w", why, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, waitBackoffMax)
	}
}
