package write

// How a write transaction ends a bundle it does not commit, takes back what
// it sent, and tells whether the switch may hold any of it (txn.go).

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// discard ends b without its COMMIT: nothing of it is on the switch, unless
// meters sent before it could not be taken back (then it holds, undecided).
func (t *txn) discard(b *bundle) {
	if b.ended {
		return
	}
	b.ended, b.dropped = true, true
	var re *plan.RejectedError
	if err := b.stream.finish(false); errors.As(err, &re) && re.SwitchChanged {
		b.sent, b.dropped = true, false
	}
	b.cancel()
}

// undo sends m, which takes back what the transaction sent after the store
// when the store then failed: once the switch took it, the switch holds
// nothing of the transaction.
func (t *txn) undo(m ofconn.Message) error {
	err := t.sendMessage(m)
	if err == nil && t.sent != nil {
		t.sent.undone = true
	}
	return err
}

// writePanic logs a panic p of a write of b (what names it) with its stack
// and returns the ErrInternal its requests fail with.
func (ws *Writes) writePanic(b *bridgeQueue, p any, what string) error {
	ws.log.Error("panic in a "+what+"; its requests fail, the bridge goes on",
		"bridge", b.Name(), "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("restore: bridge %s: %s failed: %v: %w", b.Name(), what, p, errdefs.ErrInternal)
}

// dropRefused leaves the bundles the switch refused out of the rest of the
// transaction, and reports whether there were any.
func (t *txn) dropRefused() bool {
	found := false
	for _, b := range t.bundles {
		if !b.dropped && b.decided && b.refused() {
			b.dropped, found = true, true
		}
	}
	return found
}

// touched reports whether the switch may hold changes of the transaction.
func (t *txn) touched() bool {
	if t.sent != nil && t.sent.holds() {
		return true
	}
	return slices.ContainsFunc(t.bundles, (*bundle).holds)
}
