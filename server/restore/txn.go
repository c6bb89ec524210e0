package restore

import (
	"context"
	"errors"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// The write transaction's decisions
//
// Every write of a bridge (group commit's batch, streamed or sent after
// storing; a pipe's batches; a staged write) is one transaction of the same
// shape, run by the bridge's write owner under b.mu:
//
//	open     liveLocked: do the changes go to the switch now?
//	send     the source streams its changes into a bundle, or sends them
//	         after storing them
//	verdict  outcomeOf: the switch's answer becomes an Outcome
//	settle   settleLocked: quarantine lifted, replay scheduled, the caller
//	         told applied or not
//
// The four decisions below are each made here and nowhere else, so that the
// sources cannot disagree on them.

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

// resendWhole is what a whole-bundle refusal does: a refused bundle changed
// nothing, so its changes are sent again once, unstreamed, after the store
// (group commit's path: a batch resends in the same transaction, a pipe's
// batch goes back to group commit). A staged write's changes are not held
// in memory to send again: it is stored and settles as Unknown, so the
// replay sends them from the store. Either way the acknowledged write is
// stored, and the switch ends equal to the store.
func resendWhole(inMemory bool) (resend bool, settleAs Outcome) {
	if inMemory {
		return true, Applied
	}
	return false, Unknown
}

// liveLocked reports whether a write's changes go to the switch now, and on
// which connection: the bridge is connected and converged, the gate is open
// and Run is not stopping (a write of a stopping engine is only stored: the
// next start replays). Otherwise a write is stored and the bridge replays.
// b.mu must be held.
func (e *Engine) liveLocked(ctx context.Context, b *bridge) (*ofconn.Conn, bool) {
	conn := b.conn
	return conn, conn != nil && b.converged && e.gate.isOpen() && ctx.Err() == nil
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
