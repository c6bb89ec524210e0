package restore

import (
	"context"
	"errors"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// bundle is one exchange of a write transaction with the switch: a streamed
// bundle, or what was sent after the store. Its verdict is decided once
// (decide).
type bundle struct {
	stream *writeStream // nil for a send after the store
	cancel context.CancelFunc
	h      held // what a whole refusal does (resendWhole)
	// sent: the COMMIT (or the send) went, so the switch may hold it;
	// ended: the stream has stopped.
	sent, ended bool
	decided     bool
	o           Outcome
	re          *RejectedError
	// dropped: refused, left out of the rest of the transaction; undone:
	// sent, then taken back.
	dropped, undone bool
}

// openBundle opens the streamed bundle of spec on conn (startStream),
// bounded by Config.WriteTimeout.
func (e *Engine) openBundle(ctx context.Context, conn *ofconn.Conn, spec streamSpec) *bundle {
	sctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
	return &bundle{stream: startStream(sctx, conn, spec.pre, spec.bound, spec.post, spec.at), cancel: cancel, h: spec.h}
}

// refused reports whether the switch refused b.
func (b *bundle) refused() bool { return b.o == Refused || b.o == RefusedWhole }

// holds reports whether the switch may hold b's changes.
func (b *bundle) holds() bool { return b.sent && !b.undone && !(b.decided && b.refused()) }

// await ends b with its COMMIT (a pipe's was sent already), waits for the
// switch's verdict and decides it, once.
func (t *txn) await(b *bundle) {
	if b.decided || b.ended {
		return
	}
	var verdict error
	if b.sent {
		verdict = <-b.stream.done
	} else {
		b.sent = true
		verdict = b.stream.finish(true)
	}
	b.ended = true
	b.cancel()
	t.decide(b, t.e.cfg.Faults.verdict(verdict, true))
}

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

// decide is where the switch's verdict on one of the transaction's bundles
// becomes its Outcome (b.o, with the refusal b.re):
//
//   - Applied: the store commits (atSwitch returns the BeforeStoreCommit
//     fault's error, which rolls it back).
//   - RefusedWhole: the changes go again after the store (resendWhole; only
//     when b.h is resendable).
//   - Refused: the step's refusal rolls the store back. Nothing of the
//     bundle stays on the switch, unless RejectedError.SwitchChanged says
//     meters sent around it could not be taken back: the bridge replays.
//   - Unknown: the store commits; the write is not applied and settles by
//     replaying the bridge.
func (t *txn) decide(b *bundle, verdict error) {
	o, re := outcomeOf(verdict)
	if o == RefusedWhole {
		o = resendWhole(b.h)
	}
	b.decided, b.o, b.re = true, o, re
	switch o {
	case RefusedWhole:
		t.e.log.Warn(t.what+" refused as a whole; sending it again after the store", "bridge", t.b.name, "err", verdict)
	case Refused:
		if re.SwitchChanged {
			t.diverged = true
			t.e.divergedLocked(t.b, "the switch may hold a "+t.what+" the store does not", verdict)
		}
	case Unknown:
		t.unknown, t.live = verdict, false
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
