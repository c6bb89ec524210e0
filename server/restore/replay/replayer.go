package replay

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Replayer runs the replays, audits and diffs of the engine's bridges; the
// caller (the bridge goroutine, a Diff, a Reconcile) hands it the bridge's
// state and connection, and the Replayer takes the bridge's lock.
type Replayer struct {
	cfg Config
	log *slog.Logger
}

// Config wires a Replayer. Every field but AfterDriftFound is required.
type Config struct {
	Store *store.Store
	// Forms are the switch's forms of opaque entries (package forms),
	// shared with the writes.
	Forms *canon.Forms
	// OwnedCookie is the cookie space whose flows the replay manages.
	OwnedCookie entry.CookieSpace
	// MaxReplayTime bounds the rounds of one replay (restore.Config).
	MaxReplayTime time.Duration
	Flag          Flag
	Rooms         Rooms
	Metrics       Metrics
	Publish       func(events.Event)
	// AfterDriftFound is called when an audit found drift, for tests.
	AfterDriftFound func()
	Logger          *slog.Logger
}

// Flag is what a replay asks of the flow-restore-wait protocol (package
// flag).
type Flag interface {
	// VswitchdHeld says whether vswitchd is held by the flag, and whether
	// that is known yet.
	VswitchdHeld() (held, known bool)
	// OVSDB is the OVSDB client, nil while not connected.
	OVSDB() *ovsconfig.Client
}

// Rooms is what a replay needs of the engine's other rooms.
type Rooms interface {
	// CheckOwner says why this engine may not change the bridge, nil when
	// it may.
	CheckOwner(bridge string) error
	// LearnRelayed makes what a controller installed through the guard's
	// relay its module's, before the desired state is read: a write of
	// the bridge's queue, whose owner takes the bridge's lock, so the
	// replay calls it before it takes the lock.
	LearnRelayed(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error
	// RestoreTLVLocked puts back the TLV mappings the switch lacks.
	RestoreTLVLocked(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error
	// Vswitchd names the running ovs-vswitchd with its version, for the
	// refusals it makes.
	Vswitchd() string
	// BridgeIdentity names bridge's switch in the running ovs-vswitchd
	// (ovsconfig.BridgeIdentity: its pid and start, and the bridge's
	// incarnation), "" when none runs or the bridge is missing.
	BridgeIdentity(bridge string) string
	// Kept returns the filter of one dump of bridge, nil when nothing is
	// left alone.
	Kept(bridge string) KeptFilter
}

// KeptFilter leaves out of one dump the switch's entries that unrecorded
// controllers behind the proxy installed.
type KeptFilter interface {
	// Leaves reports whether the entry of kind and identity id is left
	// alone.
	Leaves(kind entry.Kind, id []byte) bool
	// Done ends the dump.
	Done()
}

// Metrics are the replay's counters, by bridge.
type Metrics struct {
	Quarantined, DriftFound *prometheus.CounterVec
	ObserveReplay           func(bridge string, r plan.Replay)
}

// New returns a Replayer of cfg.
func New(cfg Config) *Replayer { return &Replayer{cfg: cfg, log: cfg.Logger} }

func (c *Config) afterDriftFound() {
	if c.AfterDriftFound != nil {
		c.AfterDriftFound()
	}
}
