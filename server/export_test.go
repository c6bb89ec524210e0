package server

import (
	"time"

	"github.com/flowstate-io/flowstate/server/restore"
)

// SetMaxStatusQuarantined bounds the quarantined entries a Status reply
// lists to n until the returned function restores the bound.
func SetMaxStatusQuarantined(n int) (restore func()) {
	old := maxStatusQuarantined.Swap(int32(n))
	return func() { maxStatusQuarantined.Store(old) }
}

// Mirrors is the state of the unmanaged bridges the engine mirrors (see
// restore.Engine.Mirrors); the API does not carry it yet.
func (d *Daemon) Mirrors() []restore.BridgeStatus { return d.engine.Mirrors() }

// SetDiffStall sets how long Diff waits for a client that does not read,
// until the returned function restores it.
func SetDiffStall(d time.Duration) (restore func()) {
	old := diffStall
	diffStall = d
	return func() { diffStall = old }
}
