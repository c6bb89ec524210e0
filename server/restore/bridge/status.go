package bridge

import (
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// Quarantined is an entry the switch refused during a replay.
type Quarantined struct {
	Bridge string
	Entry  entry.Entry
	Reason string
	Since  time.Time
	// predicted: not refused by the switch but expected to be; derived
	// again at every replay.
	predicted bool
	// damaged: the store found it damaged, not the switch.
	damaged bool
}

// Snapshot is the state of one bridge as last published.
type Snapshot struct {
	Name      string
	Connected bool
	Converged bool
	// Since is when Converged last changed.
	Since time.Time
	// Reason says why the bridge is not converged: the dial error, the
	// replay error, or that the gate holds replays.
	Reason string
	// Excused says why flow-restore-wait was cleared without waiting for
	// this bridge (missing from OVSDB, or it held the node for MaxHold).
	Excused string
	Last    plan.Replay
	// QuarantinedTotal counts the quarantined entries and QuarantineCauses
	// counts them per module, kind and reason; ListQuarantined reads at
	// most MaxListedQuarantined of them from the store (those that crashed
	// vswitchd first, then in key order).
	QuarantinedTotal int
	QuarantineCauses []QuarantineCause
	listed           []listed
	// Poison says what the crash-loop protection holds out (package poison).
	Poison poison.Status
	// DriftFound counts the audits that found the switch different from
	// the store since flowstated started; LastDrift is the last one.
	DriftFound int
	LastDrift  time.Time
}

// publishLocked snapshots the state for readers; the lock must be held.
func (s *State) publishLocked() {
	converged := s.conn != nil && s.converged
	if prev := s.status.Load(); prev == nil || prev.Converged != converged {
		s.since = time.Now()
	}
	st := &Snapshot{Name: s.name, Connected: s.conn != nil, Converged: converged, Since: s.since, Last: s.last,
		DriftFound: s.drift.found, LastDrift: s.drift.last}
	if !converged {
		st.Reason = s.reason
	}
	if s.listedVersion != s.quarantine.version || s.listed == nil {
		s.listed = s.quarantine.sample(MaxListedQuarantined, s.poison.Crashed)
		s.listedVersion = s.quarantine.version
	}
	st.listed, st.QuarantinedTotal, st.QuarantineCauses = s.listed, s.quarantine.Len(), s.quarantine.Causes()
	st.Poison = s.poison.Status()
	if s.quarantineGauge != nil {
		s.quarantineGauge.Set(float64(s.quarantine.Len()))
	}
	s.status.Store(st)
}

// Snapshot returns the state as last published; it never waits for the
// lock.
func (s *State) Snapshot() Snapshot {
	st := Snapshot{Name: s.name, Reason: "not connected yet"}
	if p := s.status.Load(); p != nil {
		st = *p
	}
	if x := s.excused.Load(); x != nil && !st.Converged {
		st.Excused = *x
	}
	return st
}

// IsConverged reports whether the bridge is converged, as last published.
func (s *State) IsConverged() bool { return s.Snapshot().Converged }

// Excuse records why the flag was cleared without the bridge ("" when it
// was not) and reports whether that changed.
func (s *State) Excuse(why string) (changed bool) {
	prev := s.excused.Load()
	if why == "" {
		if prev == nil {
			return false
		}
		s.excused.Store(nil)
		return true
	}
	if prev != nil && *prev == why {
		return false
	}
	s.excused.Store(&why)
	return true
}
