package events

import (
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Type says what happened.
type Type string

// The event types.
const (
	BridgeConnected    Type = "bridge_connected"
	BridgeDisconnected Type = "bridge_disconnected"
	ReplayStarted      Type = "replay_started"
	ReplayFinished     Type = "replay_finished"
	FlagCleared        Type = "flag_cleared" // flow-restore-wait cleared
	FlagRearmed        Type = "flag_rearmed" // flow-restore-wait set again
	ModuleReady        Type = "module_ready"
	DriftCorrected     Type = "drift_corrected"
	EntryQuarantined   Type = "entry_quarantined"
	ReadinessTimeout   Type = "readiness_timeout"
	// BridgeNotRestored: flow-restore-wait was released without a bridge
	// that is missing or could not be restored in time.
	BridgeNotRestored Type = "bridge_not_restored"
	// BridgeStoodAside: flowstated leaves a bridge alone because another
	// store manages it, or it holds flows this store never declared; the
	// message says how to recover.
	BridgeStoodAside Type = "bridge_stood_aside"
	// DriftFound: the audit found the switch different from the store
	// (flows deleted or changed behind flowstate's back); the bridge is
	// unconverged until the replay that follows corrects it.
	DriftFound Type = "drift_found"
	// GuardUnproven: the guard's heartbeat no longer proves it would
	// release the node (attrs field, reason); the flag is disarmed.
	GuardUnproven Type = "guard_unproven"
	// GuardProven: a guard proves again that it would release the node.
	GuardProven Type = "guard_proven"
	// GateOpened: the boot gate opened; replays may run.
	GateOpened Type = "gate_opened"
	// ProxyConnected and ProxyDisconnected: a controller connected to an
	// OpenFlow proxy, or its connection ended.
	ProxyConnected    Type = "proxy_connected"
	ProxyDisconnected Type = "proxy_disconnected"
	// Heartbeat is generated per subscription and never stored; Publish
	// ignores it.
	Heartbeat Type = "heartbeat"
)

// Types lists every type, in the order of the API's EventType enum.
var Types = []Type{BridgeConnected, BridgeDisconnected, ReplayStarted, ReplayFinished, FlagCleared, FlagRearmed,
	ModuleReady, DriftCorrected, EntryQuarantined, ReadinessTimeout, BridgeNotRestored, Heartbeat,
	BridgeStoodAside, DriftFound, GuardUnproven, GuardProven, GateOpened, ProxyConnected, ProxyDisconnected}

// Event is one entry of the log.
type Event struct {
	Revision uint64    // assigned by Publish
	Time     time.Time // set by Publish when zero
	Type     Type      // required
	Bridge   string    // optional
	Module   string    // optional
	Message  string    // human-readable summary
	// Attrs holds optional details ("entries": "167", "error": "..."). Publish
	// copies it; delivered events share the copy, so it is read-only.
	Attrs map[string]string
}

var (
	// ErrCompacted says the requested revision is older than the retained window;
	// the error is a *CompactedError.
	ErrCompacted = fmt.Errorf("events: revision compacted: %w", errdefs.ErrFailedPrecondition)
	// ErrFutureRevision says the requested revision was never assigned by this
	// process (typically one seen before flowstated restarted).
	ErrFutureRevision = fmt.Errorf("events: revision not yet assigned: %w", errdefs.ErrFailedPrecondition)
	// ErrSlowSubscriber says the subscription fell too far behind and was dropped.
	ErrSlowSubscriber = fmt.Errorf("events: subscriber too slow, dropped: %w", errdefs.ErrUnavailable)
	// ErrClosed says the subscription or the log was closed.
	ErrClosed = fmt.Errorf("events: closed: %w", errdefs.ErrUnavailable)
)

// CompactedError says the events after Requested are partly gone; Oldest is
// the oldest revision still retained.
type CompactedError struct {
	Requested uint64
	Oldest    uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("events: revision %d compacted, oldest retained revision is %d", e.Requested, e.Oldest)
}

// Unwrap makes the error match ErrCompacted.
func (e *CompactedError) Unwrap() error { return ErrCompacted }
