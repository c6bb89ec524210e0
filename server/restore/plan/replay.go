package plan

import "time"

// Replay describes one reconciliation of a bridge.
type Replay struct {
	Finished time.Time
	Duration time.Duration
	// Entries is the number of desired entries.
	Entries int
	// Adds, Modifies and Deletes count the changes sent.
	Adds, Modifies, Deletes int
	// Messages and Bytes count what was sent (the last attempt's bundle).
	Messages, Bytes int
	// Quarantined counts entries left out because the switch refused them,
	// or because it would (see package restore's predictRefusals).
	Quarantined int
	// Rounds counts the plans built: one, plus one per round that found
	// refusals the pre-checks had not predicted.
	Rounds int
	Err    error
}

// Changes is the number of changes the replay made.
func (r Replay) Changes() int { return r.Adds + r.Modifies + r.Deletes }

// Count sets the change counts of r from cs.
func (r *Replay) Count(cs []Change) {
	r.Adds, r.Modifies, r.Deletes = 0, 0, 0
	for _, c := range cs {
		switch c.Op {
		case OpAdd:
			r.Adds++
		case OpModify:
			r.Modifies++
		case OpDelete:
			r.Deletes++
		}
	}
}
