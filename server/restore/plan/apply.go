package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// RejectedError is the switch's refusal of some changes of a sendOrder.
// Nothing of them stays on the switch (meters sent before the bundle are undone),
// unless SwitchChanged says otherwise.
type RejectedError struct {
	// Changes the switch refused, with Reasons[i] for Changes[i].
	Changes []Change
	Reasons []string
	Err     error
	// SwitchChanged is true when the switch may hold part of the changes: the
	// bundle committed before a meter delete after it was refused, or the
	// meters sent before the bundle could not all be undone (UndoErr).
	SwitchChanged bool
	UndoErr       error
	// By names the switch that refused, with its version ("ovs-vswitchd
	// 3.1.0"): what one version refuses another may take. The engine sets
	// it; "" when nobody did.
	By string
}

func (e *RejectedError) Error() string {
	if e.UndoErr != nil {
		return fmt.Sprintf("%v (and undoing the meters sent before it failed: %v)", e.Err, e.UndoErr)
	}
	return e.Err.Error()
}
func (e *RejectedError) Unwrap() error { return e.Err }

// ErrAborted is what a BundleSource's Produce returns (wrapped or not) when
// the write behind the bundle was abandoned before it was whole: the meters
// sent before the bundle are undone, and no *RejectedError is made of it.
var ErrAborted = errors.New("restore: write abandoned by the store")

// ApplyStats counts what one applied SendOrder sent.
type ApplyStats struct{ Messages, Bytes int }

// BundleSource is the bundle of a SendOrder: N messages made by Produce, in
// order (see ofconn.Conn.BundleStream), and At, which returns the changes
// behind the messages at the given indexes when the switch refuses some.
type BundleSource struct {
	N       int
	Produce func(emit func(ofconn.Message) error) error
	At      func(idx []int) ([]Change, error)
	// UpTo says N is a bound: Produce may make fewer messages.
	UpTo bool
}

// Source is the bundle of p, held in memory.
func (p *SendOrder) Source() BundleSource { return ChangesSource(p.Bundle) }

// ChangesSource is a bundle of the messages of cs, in order. A change may
// take several messages (a group too large for one: ADD, then
// INSERT_BUCKETs); ends[i] is where the messages of cs[i] end, nil while
// every change is one message (flows always are).
func ChangesSource(cs []Change) BundleSource {
	var ends []int
	n := 0
	for i, c := range cs {
		k := 1
		if c.Kind == entry.KindGroup && c.Op != OpDelete {
			k = len(c.Messages())
		}
		if k != 1 && ends == nil {
			ends = make([]int, i, len(cs))
			for j := range ends {
				ends[j] = j + 1
			}
		}
		n += k
		if ends != nil {
			ends = append(ends, n)
		}
	}
	changeOf := func(x int) int {
		if ends == nil {
			return x
		}
		i, _ := slices.BinarySearch(ends, x+1)
		return i
	}
	return BundleSource{
		N: n,
		Produce: func(emit func(ofconn.Message) error) error {
			for _, c := range cs {
				for _, m := range c.Messages() {
					if err := emit(m); err != nil {
						return err
					}
				}
			}
			return nil
		},
		At: func(idx []int) ([]Change, error) {
			out := make([]Change, len(idx))
			for i, x := range idx {
				out[i] = cs[changeOf(x)]
			}
			return out, nil
		},
	}
}

// ApplySendOrder sends p all or nothing (see ApplyChanges).
func ApplySendOrder(ctx context.Context, conn *ofconn.Conn, p *SendOrder) (ApplyStats, error) {
	return ApplyChanges(ctx, conn, p.Pre, p.Source(), p.Post)
}

// ApplyChanges sends changes in a sendOrder all or nothing, as far as the switch allows:
//
//  1. pre: meters added or modified, one by one (OVS cannot bundle METER_MOD).
//  2. One bundle: groups, flows.
//  3. post: meters deleted (after the flows that used them are gone).
//
// When the switch refuses a meter of step 1 or the bundle, the meters already
// sent in step 1 are undone (added ones deleted, modified ones given their
// previous content, Change.Actual) before the *RejectedError returns. Any
// other error (the connection failed) leaves the outcome unknown; the caller
// replays.
func ApplyChanges(ctx context.Context, conn *ofconn.Conn, pre []Change, bundle BundleSource, post []Change) (ApplyStats, error) {
	var st ApplyStats
	send := func(c Change, m ofconn.Message) error {
		st.Messages++
		st.Bytes += len(m)
		if err := conn.Send(ctx, m); err != nil {
			var oe *ofconn.OFError
			if errors.As(err, &oe) {
				return &RejectedError{Changes: []Change{c}, Reasons: []string{oe.Name}, Err: fmt.Errorf("%s %s: %w", c.Kind, c.Op, err)}
			}
			return err
		}
		return nil
	}
	// undo takes back the first n meters of pre after a refusal.
	undo := func(n int, re *RejectedError) *RejectedError {
		for i := n - 1; i >= 0; i-- {
			c := pre[i]
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
	for i, c := range pre {
		if err := send(c, c.Messages()[0]); err != nil {
			var re *RejectedError
			if errors.As(err, &re) {
				return st, undo(i, re)
			}
			return st, err
		}
	}
	if bundle.N > 0 {
		stream := conn.BundleStream
		if bundle.UpTo {
			stream = conn.BundleStreamUpTo
		}
		err := stream(ctx, bundle.N, func(emit func(ofconn.Message) error) error {
			return bundle.Produce(func(m ofconn.Message) error {
				st.Messages++
				st.Bytes += len(m)
				return emit(m)
			})
		})
		if err != nil {
			var be *ofconn.BundleError
			if errors.Is(err, ErrAborted) && len(pre) > 0 {
				// The store refused a staged write: its meters go too.
				if re := undo(len(pre), &RejectedError{Err: err}); re.UndoErr != nil {
					return st, re
				}
				return st, err
			}
			if !errors.As(err, &be) {
				return st, err
			}
			re := &RejectedError{Err: err}
			var idx []int
			for _, f := range be.Failed {
				if f.Index >= 0 && f.Index < bundle.N {
					idx = append(idx, f.Index)
					re.Reasons = append(re.Reasons, f.Name)
				}
			}
			if len(idx) > 0 {
				cs, aerr := bundle.At(idx)
				if aerr != nil {
					return st, fmt.Errorf("%w (and reading the refused entries failed: %w)", err, aerr)
				}
				re.Changes = cs
			}
			return st, undo(len(pre), re)
		}
	}
	for _, c := range post {
		if err := send(c, c.Messages()[0]); err != nil {
			var re *RejectedError
			if errors.As(err, &re) {
				re.SwitchChanged = true
			}
			return st, err
		}
	}
	return st, nil
}
