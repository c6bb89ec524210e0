package server

import (
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/server/guard"
)

// Guard modes (Config.Guard.Mode).
const (
	// GuardOff: no guard; the flag is armed regardless (tests, or an
	// operator who accepts a node held by a dead flowstated).
	GuardOff = "off"
	// GuardSpawn: flowstated starts a guard process when none runs.
	GuardSpawn = "spawn"
	// GuardExternal: a guard runs as its own unit or container; without
	// one, flowstated does not arm the flag.
	GuardExternal = "external"
)

// GuardConfig configures the guard side of flowstated (package guard).
type GuardConfig struct {
	// Mode is GuardOff (the zero value ""), GuardSpawn or GuardExternal.
	Mode string
	// Lease is the lease file. Required unless Mode is off.
	Lease string
	// Grace is how long the lease may go unrenewed before the guard
	// releases the node; a guard that waits longer is not trusted. Default
	// guard.DefaultGrace.
	Grace time.Duration
	// StartTimeout bounds how long start-up waits for a proven guard before
	// it serves without one (the flag disarmed). Default
	// DefaultGuardStartTimeout.
	StartTimeout time.Duration
	// Command starts a guard for GuardSpawn: the program and its leading
	// arguments, to which the guard flags are appended. Default: this
	// executable with "guard".
	Command []string
	// Log is the guard's log file for GuardSpawn. Default: Lease + ".guard.log".
	Log string
}

// DefaultGuardStartTimeout is GuardConfig.StartTimeout's default: a spawned
// guard proves itself in well under a second, an external one starts with
// flowstated's unit.
const DefaultGuardStartTimeout = 10 * time.Second

func (g *GuardConfig) validate() error {
	if g.Grace <= 0 {
		g.Grace = guard.DefaultGrace
	}
	if g.StartTimeout <= 0 {
		g.StartTimeout = DefaultGuardStartTimeout
	}
	switch g.Mode {
	case "", GuardOff:
		g.Mode = GuardOff
		return nil
	case GuardSpawn, GuardExternal:
	default:
		return fmt.Errorf("server: guard mode %q: want off, spawn or external", g.Mode)
	}
	if g.Lease == "" {
		return fmt.Errorf("server: guard mode %s needs a lease file", g.Mode)
	}
	if g.Log == "" {
		g.Log = g.Lease + ".guard.log"
	}
	return nil
}
