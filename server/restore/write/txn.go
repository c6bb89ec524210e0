package write

import (
	"context"
	"errors"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/forms"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// The write transaction
//
// Every write of a bridge is one transaction, run by one function (run) on
// the bridge's write owner (runWrites), whatever its source: group commit's
// batch (groupcommit.go), a pipe's batches (writepipe.go), a staged write
// (writestaged.go), a controller's TLV table change (tlv.go), an adoption
// of what a relayed controller installed (adopt.go). A source
// supplies only its store step (storeStep); run makes the four decisions,
// each here and nowhere else, so that the sources cannot disagree on them:
//
//	open     lockLive takes the bridge's lock (for runTxn, or for a pipe's batches) and
//	         liveLocked decides whether the changes go to the switch now;
//	         run opens the step's bundle when they do (streamSpec)
//	send     the step's store runs and calls atSwitch at its commit point:
//	         the bundle ends with its COMMIT, or what the store decided is
//	         sent after it (storeStep.after)
//	verdict  decide turns each answer of the switch into an Outcome
//	         (outcomeOf; resendWhole says what a whole refusal does); a
//	         refusal rolls the store back with the step's error, and a
//	         pipe's transaction runs again without its refused batches
//	settle   commit once the store committed, end (deferred) when it did
//	         not or a panic ended the transaction: settleLocked lifts
//	         quarantine and schedules the replay

// liveLocked reports whether a write's changes go to the switch now, and on
// which connection: the bridge is connected and converged, the gate is open
// and Run is not stopping (a write of a stopping engine is only stored: the
// next start replays). Otherwise a write is stored and the bridge replays.
// the bridge's lock must be held.
func (ws *Writes) liveLocked(ctx context.Context, b *bridgeQueue) (*ofconn.Conn, bool) {
	conn, converged := b.ConnLocked()
	return conn, converged && ws.cfg.Gate.IsOpen() && ctx.Err() == nil
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
	// replaying: the write's caller is the replay that applies it (an
	// adoption, adopt.go), so a write not applied asks for no other.
	replaying bool
	// cause is the error that ended an unstored write, for the log.
	cause error
}

// settleLocked ends a write transaction: the one place that lifts the
// quarantine of what a write declared, and that schedules the replay after a
// write. the bridge's lock must be held.
//
//   - Stored: the quarantine of the entries the write declares is lifted
//     (the write itself told whether the switch takes them now). A write
//     stored but not applied (the bridge was not live) asks for a replay,
//     unless a replay waits for it (an adoption); a write whose outcome is
//     unknown marks the bridge unconverged and asks for one.
//   - Not stored, but the switch may hold some of it (the store failed
//     after the switch took it, a panic after the bundle): the bridge is
//     unconverged and replays.
func (ws *Writes) settleLocked(b *bridgeQueue, s settlement) {
	if !s.stored {
		if s.touched {
			ws.divergedLocked(b, "the switch may hold a "+s.what+" the store does not", s.cause)
		}
		return
	}
	b.LiftQuarantineLocked(s.keys, s.declared...)
	switch {
	case s.unknown != nil:
		ws.divergedLocked(b, s.what+" stored, its outcome on the switch is unknown", s.unknown)
	case !s.applied && !s.replaying:
		b.RequestReplay()
	}
}

// divergedLocked records that the switch may differ from the store after a
// write: the bridge is unconverged until a replay makes them equal again,
// and one is requested. the bridge's lock must be held.
func (ws *Writes) divergedLocked(b *bridgeQueue, what string, err error) {
	ws.log.Error(what+"; replaying the bridge", "bridge", b.Name(), "err", err)
	b.MarkDivergedLocked()
	b.RequestReplay()
}

// txn is one write transaction of a bridge, under its lock: see The write
// transaction.
type txn struct {
	ws   *Writes
	b    *bridgeQueue
	ctx  context.Context
	what string // names the source in logs
	conn *ofconn.Conn
	// live: the changes go to the switch now; false once the outcome on
	// the switch is unknown.
	live bool
	// stream is the bundle run opened for the step (nil: none), which the
	// store step feeds as it decides its changes.
	stream *writeStream
	// bundles are the transaction's streamed bundles (run's, or a pipe's
	// sent before), sent what was sent after the store.
	bundles []*bundle
	sent    *bundle
	// stored: the store committed the transaction.
	stored bool
	// unknown is the verdict when the outcome on the switch is unknown.
	unknown error
	// diverged: the transaction left the switch maybe unlike the store,
	// and the bridge replays; panicked is the error of a recovered panic.
	diverged bool
	panicked error
}

// storeStep is what a source supplies to a write transaction (run): its
// store's side. It reads t.live and feeds t.stream; it never sends, decides
// a verdict or settles.
type storeStep interface {
	// store runs the store's side of the transaction; at its commit point
	// it calls atSwitch, whose error rolls the store back (a pipe's step
	// calls it once its commit is durable, and an error undoes the commit:
	// pipeStep). Committed, it returns what the transaction's commit
	// settles.
	store(t *txn, atSwitch func() error) (committed, error)
	// after is what goes to the switch after the store: when nothing
	// streamed, or the switch refused the bundle as a whole. Its error
	// rolls the store back.
	after(t *txn) (sendAfter, error)
	// refused is the step's error for the switch's refusal of entries.
	refused(re *plan.RejectedError) error
}

// A step that streams is an opener: open prepares it under the bridge's
// lock and says what its bundle streams while the store decides.
type opener interface {
	open(t *txn) (streamSpec, error)
}

// committed is what a store step that committed leaves to the commit: the
// keys and entries whose quarantine is lifted (the write itself told
// whether the switch takes them now), the changes forms.Learn looks at, and
// whether the replay that waits for the write applies it (settlement).
type committed struct {
	keys      []string
	declared  [][]entry.Entry
	learn     []plan.Change
	replaying bool
}

// streamSpec is the bundle a transaction streams while its store decides
// (startStream's arguments, opened when stream is set and the bridge is
// live), and what its changes are when the switch refuses it as a whole (h).
type streamSpec struct {
	stream    bool
	pre, post []plan.Change
	bound     int
	at        func(idx []int) ([]plan.Change, error)
	h         held
}

// sendAfter is what a transaction sends after its store step: changes in a
// send order, or one message that cannot be bundled.
type sendAfter struct {
	cs  []plan.Change
	msg ofconn.Message
}

// errRefusedInGroup is a step's error when the switch refused one of the
// bundles of its transaction (a pipe's batches): run writes the
// transaction again without the refused ones.
var errRefusedInGroup = errors.New("restore: the switch refused a batch of the transaction")

// lockLive takes b (its lock and its busy mark) for writes and says whether
// their changes go to the switch now, on conn (liveLocked).
func (ws *Writes) lockLive(ctx context.Context, b *bridgeQueue) (conn *ofconn.Conn, live bool, unlock func()) {
	unlock = b.Take()
	conn, live = ws.liveLocked(ctx, b)
	return conn, live, unlock
}

// runTxn takes b and runs step as one write transaction on it (run).
func (ws *Writes) runTxn(ctx context.Context, b *bridgeQueue, what string, step storeStep) (*txn, error) {
	conn, live, unlock := ws.lockLive(ctx, b)
	defer unlock()
	t := ws.newTxn(ctx, b, what, conn, live, nil)
	return t, t.run(step)
}

// newTxn starts a transaction on b, whose lock the caller holds (a pipe's
// storer: the pipe decided liveness when it opened, and sent the bundles
// of its batches before).
func (ws *Writes) newTxn(ctx context.Context, b *bridgeQueue, what string, conn *ofconn.Conn, live bool, sent []*bundle) *txn {
	return &txn{ws: ws, b: b, ctx: ctx, what: what, conn: conn, live: live, bundles: sent}
}

// run is every write transaction: open step's bundle, run its store step
// (atSwitch decides the verdicts), then commit, or end when the store did
// not commit; a panic is recovered and returned as ErrInternal.
func (t *txn) run(step storeStep) (err error) {
	t.ws.cfg.Metrics.WriteBatches.WithLabelValues(t.b.Name()).Inc()
	defer func() { err = t.end(recover(), err) }()
	// Whatever ends the transaction, its bundles end before it: never
	// committed unless atSwitch sent them.
	defer t.closeBundles()
	if o, ok := step.(opener); ok {
		spec, err := o.open(t)
		if err != nil {
			return err
		}
		if spec.stream && t.live {
			b := t.ws.openBundle(t.ctx, t.conn, spec)
			t.stream, t.bundles = b.stream, append(t.bundles, b)
		}
	}
	var c committed
	for {
		c, err = step.store(t, func() error { return t.atSwitch(step) })
		t.decideAll()
		if err == nil {
			break
		}
		if !t.dropRefused() || !errors.Is(err, errRefusedInGroup) {
			return err
		}
	}
	t.commit(c)
	t.learn(c.learn)
	return nil
}

// atSwitch is the transaction's commit point, called by its store step:
// every bundle ends with its COMMIT and its verdict is decided (decide);
// what did not stream, or was refused as a whole, is sent after the store
// (step.after). It returns the error that rolls the store back: a refusal
// (step.refused), or the BeforeStoreCommit fault's once a bundle was
// applied. Called again (without the refused bundles), it decides nothing
// twice.
func (t *txn) atSwitch(step storeStep) error {
	streamed, resend, applied := false, false, false
	for _, b := range t.bundles {
		if b.dropped {
			continue
		}
		if !b.sent && !b.ended && b.stream.fallback {
			// A change could not stream: the changes go after the store.
			t.discard(b)
			continue
		}
		if t.await(b); !b.decided {
			continue // discarded
		}
		streamed = true
		switch b.o {
		case Applied:
			applied = true
		case Refused:
			return step.refused(b.re)
		case RefusedWhole:
			resend = true
		}
	}
	if streamed && !resend {
		if applied {
			return t.ws.cfg.Faults.BeforeStoreCommit()
		}
		return nil
	}
	a, err := step.after(t)
	if err != nil || !t.live || (len(a.cs) == 0 && a.msg == nil) {
		return err
	}
	t.sent = &bundle{h: resent, sent: true}
	if a.msg != nil {
		t.decide(t.sent, t.sendMessage(a.msg))
	} else {
		t.decide(t.sent, t.send(a.cs))
	}
	switch t.sent.o {
	case Refused:
		return step.refused(t.sent.re)
	case Applied:
		if a.msg == nil {
			return t.ws.cfg.Faults.BeforeStoreCommit()
		}
	}
	return nil
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
	if re != nil {
		re.By = t.ws.cfg.Rooms.Vswitchd()
	}
	if o == RefusedWhole {
		o = resendWhole(b.h)
	}
	b.decided, b.o, b.re = true, o, re
	switch o {
	case RefusedWhole:
		t.ws.log.Warn(t.what+" refused as a whole; sending it again after the store", "bridge", t.b.Name(), "err", verdict)
	case Refused:
		if re.SwitchChanged {
			t.diverged = true
			t.ws.divergedLocked(t.b, "the switch may hold a "+t.what+" the store does not", verdict)
		}
	case Unknown:
		t.unknown, t.live = verdict, false
	}
}

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
	t.decide(b, t.ws.cfg.Faults.Verdict(verdict, true))
}

// decideAll waits for the verdict of every bundle sent and not yet
// decided (the store may have failed before atSwitch).
func (t *txn) decideAll() {
	for _, b := range t.bundles {
		if b.sent && !b.dropped {
			t.await(b)
		}
	}
}

// commit settles the transaction once the store committed c: what it
// declares and removes has its quarantine lifted.
func (t *txn) commit(c committed) {
	t.stored = true
	t.diverged = t.diverged || t.unknown != nil
	t.ws.settleLocked(t.b, settlement{what: t.what, stored: true, applied: t.live, unknown: t.unknown,
		keys: c.keys, declared: c.declared, replaying: c.replaying})
}

// send sends cs after the store, in an order the switch takes (newSendOrder),
// and returns the switch's verdict.
func (t *txn) send(cs []plan.Change) error {
	ctx, cancel := context.WithTimeout(t.ctx, t.ws.cfg.WriteTimeout)
	defer cancel()
	_, err := plan.ApplySendOrder(ctx, t.conn, plan.NewSendOrder(cs))
	return t.ws.cfg.Faults.Verdict(err, false)
}

// sendMessage sends m, a message that cannot be bundled, and returns the
// switch's verdict. It runs under the transaction's context without its
// cancellation, bounded by Config.WriteTimeout: a caller that gives up must
// not cut a message half way, which would close the connection.
func (t *txn) sendMessage(m ofconn.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), t.ws.cfg.WriteTimeout)
	defer cancel()
	err := t.conn.Send(ctx, m)
	var oe *ofconn.OFError
	if errors.As(err, &oe) {
		// Refused as a whole: nothing of it is on the switch.
		err = &plan.RejectedError{Err: err}
	}
	return t.ws.cfg.Faults.Verdict(err, false)
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

// learn learns what the switch made of the opaque entries of cs, once the
// transaction was applied (forms.Learn).
func (t *txn) learn(cs []plan.Change) {
	if !t.live || len(cs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.ws.cfg.WriteTimeout)
	defer cancel()
	forms.Learn(ctx, t.conn, t.ws.cfg.Forms, t.ws.cfg.Store.Forms(), cs, false, t.ws.log.With("bridge", t.b.Name()))
}

// end ends the transaction, deferred with what recover returned and the
// error that ended it, which it returns: a panic is logged with its stack
// and returned as ErrInternal, and a transaction not stored whose changes
// the switch may hold makes the bridge replay.
func (t *txn) end(p any, err error) error {
	if p != nil {
		t.panicked = t.ws.writePanic(t.b, p, t.what)
		err = t.panicked
	}
	if !t.stored {
		touched := t.touched()
		t.diverged = t.diverged || touched
		t.ws.settleLocked(t.b, settlement{what: t.what, touched: touched, cause: err})
	}
	return err
}
