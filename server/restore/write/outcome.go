package write

import (
	"errors"

	"github.com/flowstate-io/flowstate/server/restore/plan"
)

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
func outcomeOf(err error) (Outcome, *plan.RejectedError) {
	if err == nil {
		return Applied, nil
	}
	var re *plan.RejectedError
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
