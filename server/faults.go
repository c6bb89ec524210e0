package server

import (
	"time"

	"github.com/flowstate-io/flowstate/server/restore"
)

// Faults injects faults into a daemon, for tests: Config.Faults, nil in
// production. The service reads it through the methods below, which give the
// production value on a nil *Faults.
type Faults struct {
	// Engine is the engine's (restore.Config.Faults).
	Engine *restore.Faults
	// StatusQuarantined, when set, bounds the quarantined entries a Status
	// reply lists instead of maxStatusQuarantined; it is asked at every
	// Status, so a test may change its answer while the daemon runs.
	StatusQuarantined func() int
	// DiffStall, when positive, replaces diffStall.
	DiffStall time.Duration
}

func (f *Faults) engine() *restore.Faults {
	if f == nil {
		return nil
	}
	return f.Engine
}

func (f *Faults) statusQuarantined() int {
	if f == nil || f.StatusQuarantined == nil {
		return maxStatusQuarantined
	}
	return f.StatusQuarantined()
}

func (f *Faults) diffStall() time.Duration {
	if f == nil || f.DiffStall <= 0 {
		return diffStall
	}
	return f.DiffStall
}
