package client

import (
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

// Status is flowstated's state: the flag, the boot gate, the guard, and every
// managed bridge and module. Times are zero when unset.
type Status struct {
	// BootID is the host boot id recorded in the store.
	BootID string
	// ColdStart is true when the host rebooted since the store was last used.
	ColdStart bool
	// FlowRestoreWait is other_config:flow-restore-wait as stored in OVSDB.
	FlowRestoreWait bool
	// OVSDBConnected is true while flowstated's OVSDB connection is up.
	OVSDBConnected bool
	// VswitchdAcknowledged is true when ovs-vswitchd has read the latest
	// change to the database, so FlowRestoreWait is the flag as it sees it.
	VswitchdAcknowledged bool
	// Gate says whether replays may run.
	Gate Gate
	// Guard is the process that releases the node if flowstated dies.
	Guard Guard
	// Wedged is non-empty while an operation on the switch or the flag has
	// run too long; health then reports NOT_SERVING.
	Wedged string
	// LastRelease is when flowstated last cleared flow-restore-wait under a
	// held ovs-vswitchd; zero if never since it started.
	LastRelease time.Time
	// OwnedCookie is flowstated's --owned-cookie: the flows it manages on
	// every managed bridge (zero: every flow).
	OwnedCookie entry.CookieSpace
	// Bridges holds one entry per managed bridge.
	Bridges []BridgeStatus
	// Modules holds one entry per (bridge, module) pair.
	Modules []ModuleStatus
	// Quarantined lists entries the switch refused during a replay: the
	// first 1000 at most.
	Quarantined []QuarantinedEntry
	// QuarantinedTotal counts the quarantined entries, listed or not.
	QuarantinedTotal int
	// Sessions lists the connected gRPC clients, this one included.
	Sessions []Session
	// Proxies lists flowstated's OpenFlow proxies (--openflow-proxy).
	Proxies []ProxyStatus
}

// ProxyStatus is one OpenFlow proxy: the socket an unmodified controller
// connects to in place of vswitchd's, recorded as Module on Bridge.
type ProxyStatus struct {
	Bridge, Module, Socket string
	// TCPListen is the loopback address it also accepts controllers on
	// (--openflow-proxy-tcp); empty if none.
	TCPListen string
	// Connections is the number of controller connections open now.
	Connections int
	// RecordedMessages counts the controller's flow, group, meter and TLV
	// changes recorded since flowstated started.
	RecordedMessages uint64
	// LastInstall is when a change was last recorded (zero: never).
	LastInstall time.Time
	// LastError is the last change refused to the controller, or whose
	// outcome was unknown, at LastErrorTime; empty if none.
	LastError     string
	LastErrorTime time.Time
}

// Session is one gRPC client connected to flowstated. flowstated drops a
// frozen client about 15 s after it last answered (keepalive).
type Session struct {
	// UID, GID and PID are the peer's as the kernel reported them when it
	// connected (SO_PEERCRED).
	UID, GID uint32
	PID      int32
	// Remote is the peer address as the listener reports it.
	Remote string
	// Modules the client wrote on this connection, sorted.
	Modules []string
	// Since is when it connected; LastActivity when it last started a call.
	Since, LastActivity time.Time
	// Calls counts the calls it started.
	Calls uint64
}

// Gate is the cold-start gate: closed while required modules are awaited.
type Gate struct {
	// Open is true once replays may run.
	Open bool
	// Reason says why it opened.
	Reason string
	// TimedOut is true when the readiness timeout opened it.
	TimedOut bool
	// WaitingFor lists the required modules not ready for this boot yet.
	WaitingFor []string
	// Deadline is when the readiness timeout opens a closed gate.
	Deadline time.Time
}

// Guard is the process that clears flow-restore-wait when flowstated is dead
// or hung.
type Guard struct {
	// Mode is "off", "spawn" or "external".
	Mode string
	// Running is true while a guard holds the lease lock.
	Running bool
	// Grace is how long flowstated may be silent before the guard acts.
	Grace time.Duration
	// Lease is the lease file.
	Lease string
	// Proven is true while the guard's heartbeat proves it would release
	// the node (fresh, flowstated's OVSDB, a write its OVSDB took, a grace
	// no longer than flowstated's); the flag is armed only then.
	Proven bool
	// UnprovenField names what fails the proof (running, heartbeat, ovsdb,
	// writable, grace) and Reason says why; both empty while proven.
	UnprovenField, Reason string
	// PID, GuardGrace, GuardOVSDB and LastRoundTrip come from the guard's
	// heartbeat (zero without one); OVSDB is flowstated's own Open_vSwitch
	// _uuid.
	PID           int
	GuardGrace    time.Duration
	GuardOVSDB    string
	OVSDB         string
	LastRoundTrip time.Time
}

// BridgeStatus is the state of one managed bridge.
type BridgeStatus struct {
	Name string
	// Connected is true while the OpenFlow connection is up.
	Connected bool
	// Converged is true when the switch holds exactly the desired state.
	Converged bool
	// Since is when Converged last changed.
	Since time.Time
	// Reason says why the bridge is not converged; empty when it is.
	Reason string
	// Excused says why flow-restore-wait was released without this bridge
	// (missing from OVSDB, or not restored within --max-hold).
	Excused string
	// DriftFound counts the audits that found the switch different from the
	// store since flowstated started; LastDrift is the last one.
	DriftFound int
	LastDrift  time.Time
	// LeftAlone counts the entries on the switch that a controller the
	// OpenFlow proxy relays without recording (not OpenFlow 1.5)
	// installed: left alone, never deleted, not restored after a vswitchd
	// restart. LeftAloneAll: more than flowstated tracks, so every
	// undeclared entry of the bridge is left alone until vswitchd
	// restarts.
	LeftAlone    int
	LeftAloneAll bool
	// Flows, Groups and Meters count the desired entries.
	Flows, Groups, Meters int
	// LastReplay is the most recent replay; its FinishedAt is zero if none
	// ran yet.
	LastReplay Replay
}

// Replay describes one reconciliation of a bridge with its desired state.
type Replay struct {
	// FinishedAt is when the bundle was committed or failed.
	FinishedAt time.Time
	// Duration runs from the start of the dump to the commit reply.
	Duration time.Duration
	// Entries is the number of desired entries.
	Entries int
	// Messages and Bytes measure the bundle sent.
	Messages, Bytes int
	// Error is empty on success.
	Error string
}

// ModuleStatus is the state of one module on one bridge.
type ModuleStatus struct {
	Bridge, Name          string
	Flows, Groups, Meters int
	// Required is true for modules given with --require-module.
	Required bool
	// Ready is true once the module marked itself ready for this boot.
	Ready bool
}

// QuarantinedEntry is a desired entry the switch refused during a replay; it
// is kept, and left out of replays until its module writes it again.
type QuarantinedEntry struct {
	Entry StoredEntry
	// Error is the switch's error and the vswitchd that gave it, e.g.
	// "OFPBAC_BAD_OUT_GROUP (refused by ovs-vswitchd 3.1.0)".
	Error string
	Since time.Time
}

// ChangeOp is what a replay would do with one entry.
type ChangeOp int

// The operations of a Change.
const (
	ChangeUnknown ChangeOp = iota
	// ChangeAdd adds a desired entry the switch lacks.
	ChangeAdd
	// ChangeModify replaces an entry whose content differs.
	ChangeModify
	// ChangeDelete removes an entry nobody declared.
	ChangeDelete
)

func (o ChangeOp) String() string {
	switch o {
	case ChangeAdd:
		return "add"
	case ChangeModify:
		return "modify"
	case ChangeDelete:
		return "delete"
	}
	return "unknown"
}

// Change is one difference between the desired state and the switch.
type Change struct {
	Op   ChangeOp
	Kind entry.Kind
	// Desired is the entry as declared in ovs-ofctl syntax (empty for
	// ChangeDelete).
	Desired string
	// Actual is the entry as the switch holds it (empty for ChangeAdd).
	Actual string
	// Module owns the desired entry.
	Module string
}

// EventType says what an event reports. The values mirror the API's
// EventType enum.
type EventType int

// The event types.
const (
	// EventUnknown is a type newer than this client; Event.TypeName names it.
	EventUnknown EventType = iota
	// EventBridgeConnected: the OpenFlow connection to a bridge is up.
	EventBridgeConnected
	// EventBridgeDisconnected: the OpenFlow connection was lost.
	EventBridgeDisconnected
	// EventReplayStarted: a reconciliation of a bridge began.
	EventReplayStarted
	// EventReplayFinished: a reconciliation ended (Attrs say how).
	EventReplayFinished
	// EventFlagCleared: flow-restore-wait was cleared and released a held
	// ovs-vswitchd.
	EventFlagCleared
	// EventFlagRearmed: flow-restore-wait was set again for the next
	// ovs-vswitchd start.
	EventFlagRearmed
	// EventModuleReady: a module marked itself ready for this boot.
	EventModuleReady
	// EventDriftCorrected: the audit found and corrected differences.
	EventDriftCorrected
	// EventEntryQuarantined: the switch refused an entry in a replay.
	EventEntryQuarantined
	// EventReadinessTimeout: a cold start was released by the timeout.
	EventReadinessTimeout
	// EventBridgeNotRestored: flow-restore-wait was released without a
	// bridge that is missing or could not be restored in time.
	EventBridgeNotRestored
	// EventHeartbeat: nothing happened for a while; the stream is alive.
	EventHeartbeat
	// EventBridgeStoodAside: flowstated leaves a bridge alone: another
	// store manages it, or it holds flows this store never declared.
	EventBridgeStoodAside
	// EventDriftFound: the audit found the switch different from the store;
	// EventDriftCorrected follows once a replay corrected it.
	EventDriftFound
	// EventGuardUnproven: the guard no longer proves it would release the
	// node (Attrs field, reason); flow-restore-wait is disarmed.
	EventGuardUnproven
	// EventGuardProven: a guard proves again that it would release the
	// node; flow-restore-wait may be armed.
	EventGuardProven
	// EventGateOpened: the boot gate opened (Message says why, Attrs
	// timed_out whether the readiness timeout opened it): replays run.
	EventGateOpened
	// EventProxyConnected: a controller connected to an OpenFlow proxy
	// (Bridge, Module).
	EventProxyConnected
	// EventProxyDisconnected: a controller's OpenFlow proxy connection
	// ended (Message says why).
	EventProxyDisconnected
)

var eventTypeNames = [...]string{
	EventUnknown:            "unknown",
	EventBridgeConnected:    "bridge_connected",
	EventBridgeDisconnected: "bridge_disconnected",
	EventReplayStarted:      "replay_started",
	EventReplayFinished:     "replay_finished",
	EventFlagCleared:        "flag_cleared",
	EventFlagRearmed:        "flag_rearmed",
	EventModuleReady:        "module_ready",
	EventDriftCorrected:     "drift_corrected",
	EventEntryQuarantined:   "entry_quarantined",
	EventReadinessTimeout:   "readiness_timeout",
	EventBridgeNotRestored:  "bridge_not_restored",
	EventHeartbeat:          "heartbeat",
	EventBridgeStoodAside:   "bridge_stood_aside",
	EventDriftFound:         "drift_found",
	EventGuardUnproven:      "guard_unproven",
	EventGuardProven:        "guard_proven",
	EventGateOpened:         "gate_opened",
	EventProxyConnected:     "proxy_connected",
	EventProxyDisconnected:  "proxy_disconnected",
}

// String returns the type as flowstated names it, e.g. "replay_finished".
func (t EventType) String() string {
	if t < 0 || int(t) >= len(eventTypeNames) {
		return "unknown"
	}
	return eventTypeNames[t]
}

// Event is something that happened in flowstated.
type Event struct {
	// StreamID names the run of flowstated that sent the event; Revision
	// increases by one per event within it. A heartbeat carries the
	// revision last sent.
	StreamID string
	Revision uint64
	Time     time.Time
	Type     EventType
	// TypeName is the type as flowstated names it; it is set also when
	// Type is EventUnknown.
	TypeName string
	// Bridge and Module are the ones concerned, if any.
	Bridge, Module string
	// Message is a human-readable summary.
	Message string
	// Attrs are details (entries, error, duration, ...).
	Attrs map[string]string
}

// Cursor returns the position right after e in the event stream, to resume
// a Watch from.
func (e Event) Cursor() Cursor { return Cursor{StreamID: e.StreamID, Revision: e.Revision} }
