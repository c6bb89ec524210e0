package restore

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// discard ends b without its COMMIT: nothing of it is on the switch, unless
// meters sent before it could not be taken back (then it holds, undecided).
func (t *txn) discard(b *bundle) {
	if b.ended {
		return
	}
	b.ended, b.dropped = true, true
	var re *RejectedError
	if err := b.stream.finish(false); errors.As(err, &re) && re.SwitchChanged {
		b.sent, b.dropped = true, false
	}
	b.cancel()
}

// closeBundles discards the bundles that did not end (the store failed, a
// panic): see discard.
func (t *txn) closeBundles() {
	for _, b := range t.bundles {
		if !b.sent {
			t.discard(b)
		}
	}
}

// send sends cs after the store, in an order the switch takes (newSendOrder),
// and returns the switch's verdict.
func (t *txn) send(cs []Change) error {
	ctx, cancel := context.WithTimeout(t.ctx, t.e.cfg.WriteTimeout)
	defer cancel()
	_, err := applySendOrder(ctx, t.conn, newSendOrder(cs))
	return t.e.cfg.Faults.verdict(err, false)
}

// sendMessage sends m, a message that cannot be bundled, and returns the
// switch's verdict. It runs under the transaction's context without its
// cancellation, bounded by Config.WriteTimeout: a caller that gives up must
// not cut a message half way, which would close the connection.
func (t *txn) sendMessage(m ofconn.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), t.e.cfg.WriteTimeout)
	defer cancel()
	err := t.conn.Send(ctx, m)
	var oe *ofconn.OFError
	if errors.As(err, &oe) {
		// Refused as a whole: nothing of it is on the switch.
		err = &RejectedError{Err: err}
	}
	return t.e.cfg.Faults.verdict(err, false)
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
func (e *Engine) writePanic(b *bridge, p any, what string) error {
	e.log.Error("panic in a "+what+"; its requests fail, the bridge goes on",
		"bridge", b.name, "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("restore: bridge %s: %s failed: %v: %w", b.name, what, p, errdefs.ErrInternal)
}
