package restore

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// The write transaction's decisions
//
// Every write of a bridge (group commit's batch, streamed or sent after
// storing; a pipe's batches; a staged write; a controller's TLV table
// change) is one transaction of the same shape, run under b.mu by the
// bridge's write owner (the TLV change by the proxy's session, tlv.go):
//
//	open     lockTxn (or newTxn under a pipe's lock): liveLocked decides
//	         whether the changes go to the switch now
//	send     the source streams its changes into a bundle (openStream), or
//	         sends them after storing them (send)
//	verdict  decide: outcomeOf turns the switch's answer into an Outcome,
//	         resendWhole says what a whole refusal does
//	settle   commit once the store committed, end (deferred) when it did
//	         not or a panic ended the transaction: settleLocked lifts
//	         quarantine and schedules the replay
//
// The frame is the txn type below, written once; a source only fills in its
// store step: group commit's Update (groupcommit.go), a pipe's PutPlanned of
// several bundles (writepipe.go), a staged write's swap of buckets
// (writestaged.go), a TLV change's store-then-send or send-then-store
// (tlv.go). The four decisions are each made here and nowhere else,
// so that the sources cannot disagree on them.

// Outcome is what the switch's verdict on a write's bundle leaves.
type Outcome int

const (
	// Applied means the switch took every change; the store commits them.
	Applied Outcome = iota
	// Refused means the switch refused entries it names; nothing of the bundle
	// stays on the switch (RejectedError.SwitchChanged says when meters
	// sent before it could not be taken back) and the store rolls back.
	Refused
	// RefusedWhole means the switch refused the bundle as a whole, for no entry
	// (OFPBFC_TIMEOUT when it expired a bundle idle while the store was
	// slow). Nothing was committed, so the same changes go again: see
	// resendWhole.
	RefusedWhole
	// Unknown means the switch may or may not hold the changes (the connection
	// died, the reply to COMMIT was lost). The write is stored, reported
	// not applied, and the bridge replays, which makes the switch equal to
	// the store.
	Unknown
)

// outcomeOf turns the switch's verdict err on a bundle into an Outcome, with
// the refusal when there is one.
func outcomeOf(err error) (Outcome, *RejectedError) {
	if err == nil {
		return Applied, nil
	}
	var re *RejectedError
	if !errors.As(err, &re) {
		return Unknown, nil
	}
	if len(re.Changes) == 0 {
		return RefusedWhole, re
	}
	return Refused, re
}

// held is what a source still holds of a bundle the switch refused as a
// whole, which decides what the refusal does (resendWhole).
type held int

const (
	// resendable: the changes are in memory and were sent once.
	resendable held = iota
	// resent: the changes are in memory and were already sent again.
	resent
	// onDisk: the changes are only in the store (a staged write).
	onDisk
)

// resendWhole is what a whole-bundle refusal does. A refused bundle changed
// nothing, so changes held in memory are sent again once, unstreamed, after
// the store (a batch resends in the same transaction, a pipe's batch goes
// back to group commit); refused again, the write fails with the refusal, as
// a refusal of an entry fails it. A staged write's changes are not held in
// memory to send again: it is stored and settles as Unknown, so the replay
// sends them from the store. Either way the switch ends equal to the store.
func resendWhole(h held) Outcome {
	switch h {
	case resendable:
		return RefusedWhole
	case resent:
		return Refused
	default:
		return Unknown
	}
}

// liveLocked reports whether a write's changes go to the switch now, and on
// which connection: the bridge is connected and converged, the gate is open
// and Run is not stopping (a write of a stopping engine is only stored: the
// next start replays). Otherwise a write is stored and the bridge replays.
// b.mu must be held.
func (e *Engine) liveLocked(ctx context.Context, b *bridge) (*ofconn.Conn, bool) {
	conn := b.conn
	return conn, conn != nil && b.converged && e.gate.IsOpen() && ctx.Err() == nil
}

// settlement is what a write transaction leaves for settleLocked.
type settlement struct {
	// what names the source in logs ("write", "staged write", ...).
	what string
	// stored: the store committed the write; applied: the switch took it.
	stored, applied bool
	// touched: the switch may hold changes of the write.
	touched bool
	// unknown is the verdict when the outcome on the switch is unknown.
	unknown error
	// declared are the entries the write declares and removes, keys their
	// keys (a staged write collects them as it stages): their quarantine is
	// lifted once the write is stored.
	declared [][]entry.Entry
	keys     []string
	// cause is the error that ended an unstored write, for the log.
	cause error
}

// settleLocked ends a write transaction: the one place that lifts the
// quarantine of what a write declared, and that schedules the replay after a
// write. b.mu must be held.
//
//   - Stored: the quarantine of the entries the write declares is lifted
//     (the write itself told whether the switch takes them now). A write
//     stored but not applied (the bridge was not live) asks for a replay; a
//     write whose outcome is unknown marks the bridge unconverged and asks
//     for one.
//   - Not stored, but the switch may hold some of it (the store failed
//     after the switch took it, a panic after the bundle): the bridge is
//     unconverged and replays.
func (e *Engine) settleLocked(b *bridge, s settlement) {
	if !s.stored {
		if s.touched {
			e.divergedLocked(b, "the switch may hold a "+s.what+" the store does not", s.cause)
		}
		return
	}
	b.liftQuarantineLocked(s.keys, s.declared...)
	switch {
	case s.unknown != nil:
		e.divergedLocked(b, s.what+" stored, its outcome on the switch is unknown", s.unknown)
	case !s.applied:
		b.requestReplay()
	}
}

// divergedLocked records that the switch may differ from the store after a
// write: the bridge is unconverged until a replay makes them equal again,
// and one is requested. b.mu must be held.
func (e *Engine) divergedLocked(b *bridge, what string, err error) {
	e.log.Error(what+"; replaying the bridge", "bridge", b.name, "err", err)
	b.markDivergedLocked()
	b.requestReplay()
}

// txn is one write transaction of a bridge, under b.mu: see The write
// transaction's decisions.
type txn struct {
	e    *Engine
	b    *bridge
	ctx  context.Context
	what string // names the source in logs
	conn *ofconn.Conn
	// live: the changes go to the switch now; false once the outcome on
	// the switch is unknown.
	live bool
	// touched: the switch may hold changes of the transaction; stored: the
	// store committed it.
	touched, stored bool
	// unknown is the verdict when the outcome on the switch is unknown.
	unknown error
}

// lockTxn takes b (b.mu and its busy mark) and starts a transaction on it;
// the caller defers unlock, then end.
func (e *Engine) lockTxn(ctx context.Context, b *bridge, what string) (t *txn, unlock func()) {
	done := b.busy()
	b.mu.Lock()
	conn, live := e.liveLocked(ctx, b)
	return e.newTxn(ctx, b, what, conn, live), func() { b.mu.Unlock(); done() }
}

// newTxn starts a transaction on b, whose b.mu the caller holds (a pipe's
// storer: the pipe decided liveness when it opened).
func (e *Engine) newTxn(ctx context.Context, b *bridge, what string, conn *ofconn.Conn, live bool) *txn {
	return &txn{e: e, b: b, ctx: ctx, what: what, conn: conn, live: live}
}

// openStream opens a streamed bundle of the transaction (startStream),
// bounded by Config.WriteTimeout; the caller ends it, then calls cancel.
func (t *txn) openStream(pre []Change, n int, post []Change, at func(idx []int) ([]Change, error)) (*writeStream, context.CancelFunc) {
	return t.e.openStream(t.ctx, t.conn, pre, n, post, at)
}

// openStream is startStream under a context bounded by Config.WriteTimeout.
func (e *Engine) openStream(ctx context.Context, conn *ofconn.Conn, pre []Change, n int, post []Change, at func(idx []int) ([]Change, error)) (*writeStream, context.CancelFunc) {
	sctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
	return startStream(sctx, conn, pre, n, post, at), cancel
}

// send sends cs after the store, in an order the switch takes (newSendOrder),
// and returns the switch's verdict.
func (t *txn) send(cs []Change) error {
	t.touched = true
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
	t.touched = true
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

// finish ends the transaction's stream s with its COMMIT and returns the
// switch's verdict.
func (t *txn) finish(s *writeStream) error {
	t.touched = true
	return t.e.cfg.Faults.verdict(s.finish(true), true)
}

// decide is where the switch's verdict on the transaction's bundle becomes
// its next step; h is what the source still holds of the bundle:
//
//   - Applied: the store commits. The error is the BeforeStoreCommit
//     fault's, which rolls the store back.
//   - RefusedWhole: the source sends its changes again after the store
//     (resendWhole; only when h is resendable).
//   - Refused: the returned refusal rolls the store back. Nothing of the
//     bundle stays on the switch, unless RejectedError.SwitchChanged says
//     meters sent around it could not be taken back.
//   - Unknown: the store commits; the write is not applied and settles by
//     replaying the bridge.
func (t *txn) decide(verdict error, h held) (Outcome, *RejectedError, error) {
	o, re := outcomeOf(verdict)
	if o == RefusedWhole {
		o = resendWhole(h)
	}
	switch o {
	case Applied:
		return o, nil, t.e.cfg.Faults.beforeStoreCommit()
	case RefusedWhole:
		t.e.log.Warn(t.what+" refused as a whole; sending it again after the store", "bridge", t.b.name, "err", verdict)
		t.touched = false
	case Refused:
		t.touched = re.SwitchChanged
	case Unknown:
		t.unknown, t.live = verdict, false
	}
	return o, re, nil
}

// commit settles the transaction once the store committed it; keys and
// declared are what it declares and removes (their quarantine is lifted).
func (t *txn) commit(keys []string, declared ...[]entry.Entry) {
	t.stored = true
	t.e.settleLocked(t.b, settlement{what: t.what, stored: true, applied: t.live, unknown: t.unknown, keys: keys, declared: declared})
}

// counted counts t in flowstate_write_batches_total: a transaction of write
// requests (a TLV table change is none).
func (t *txn) counted() *txn {
	t.e.cfg.Metrics.writeBatches.WithLabelValues(t.b.name).Inc()
	return t
}

// learn learns what the switch made of the opaque entries of cs, once the
// transaction was applied (learnForms).
func (t *txn) learn(cs []Change) {
	if !t.live || len(cs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.e.cfg.WriteTimeout)
	defer cancel()
	t.e.learnForms(ctx, t.conn, cs, false, t.e.log.With("bridge", t.b.name))
}

// end ends the transaction, deferred with what recover returned and the
// error that ended it: a panic is logged with its stack and returned as
// ErrInternal (nil without one), and a transaction not stored whose changes
// the switch may hold makes the bridge replay.
func (t *txn) end(p any, err error) (panicErr error) {
	if p != nil {
		panicErr = t.e.writePanic(t.b, p, t.what)
		err = panicErr
	}
	if !t.stored {
		t.e.settleLocked(t.b, settlement{what: t.what, touched: t.touched, cause: err})
	}
	return panicErr
}

// writePanic logs a panic p of a write of b (what names it) with its stack
// and returns the ErrInternal its requests fail with.
func (e *Engine) writePanic(b *bridge, p any, what string) error {
	e.log.Error("panic in a "+what+"; its requests fail, the bridge goes on",
		"bridge", b.name, "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("restore: bridge %s: %s failed: %v: %w", b.name, what, p, errdefs.ErrInternal)
}
