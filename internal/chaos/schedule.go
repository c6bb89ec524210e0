package chaos

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FaultKind names one fault of a schedule.
type FaultKind string

// The faults a schedule draws from.
const (
	VswitchdKill      FaultKind = "vswitchd-kill"      // SIGKILL, then started plainly
	VswitchdTerm      FaultKind = "vswitchd-term"      // stopped, then started plainly
	VswitchdFreeze    FaultKind = "vswitchd-freeze"    // SIGSTOP for Hold, then SIGCONT
	FlowstatedKill    FaultKind = "flowstated-kill"    // SIGKILL, back after Hold
	FlowstatedFreeze  FaultKind = "flowstated-freeze"  // SIGSTOP for Hold, then SIGCONT
	FlowstatedTerm    FaultKind = "flowstated-term"    // SIGTERM, back after Hold
	FlowstatedReboot  FaultKind = "flowstated-reboot"  // SIGKILL, a new boot id, back after Hold
	GuardKill         FaultKind = "guard-kill"         // SIGKILL of the spawned guard
	GuardFreeze       FaultKind = "guard-freeze"       // SIGSTOP of the guard, longer than the hold promise
	LeaseUnlink       FaultKind = "lease-unlink"       // the lease file removed
	ProtocolsFlip     FaultKind = "protocols-flip"     // br-int limited to OpenFlow13 for Hold
	StalledReader     FaultKind = "stalled-reader"     // a Backup that stops reading for Hold
	OVSDBRestart      FaultKind = "ovsdb-restart"      // ovsdb-server stopped and started
	FlowLimit         FaultKind = "flow-limit"         // br-int table 10 limited to 5 flows for Hold
	FlowstatedOutage  FaultKind = "flowstated-outage"  // SIGKILL, back only after longer than the hold promise
	BridgeRebuild     FaultKind = "bridge-rebuild"     // br-ex's datapath_type changed: vswitchd rebuilds it empty
	DiskFull          FaultKind = "disk-full"          // the store's file system filled for Hold, then freed
	StoreFlip         FaultKind = "store-flip"         // flowstated killed, a byte of a record flipped, started again
	StoreFlipLive     FaultKind = "store-flip-live"    // a byte of an acked record flipped under a running flowstated
	ManagedRecreate   FaultKind = "managed-recreate"   // br-int deleted from OVSDB, re-created after Hold
	UnmanagedRecreate FaultKind = "unmanaged-recreate" // br-ex deleted from OVSDB, re-created after Hold
	ProxiedOutage     FaultKind = "proxied-outage"     // SIGKILL, vswitchd restarted past the grace, back after Hold more
	ReadonlyGuard     FaultKind = "readonly-guard"     // the guard lock held by a guard on a read-only replica for Hold
	ForeignWrites     FaultKind = "foreign-writes"     // uid 65534 writes over every listener (and the relay)
	StoreBulk         FaultKind = "store-bulk"         // 20k harmless drops declared for Hold (crash loops only)
)

// AllFaults lists every fault kind, in a fixed order (the draw depends on it).
var AllFaults = []FaultKind{
	VswitchdKill, VswitchdTerm, VswitchdFreeze,
	FlowstatedKill, FlowstatedFreeze, FlowstatedTerm, FlowstatedReboot,
	GuardKill, GuardFreeze, LeaseUnlink, ProtocolsFlip, StalledReader,
	OVSDBRestart, FlowLimit, FlowstatedOutage, BridgeRebuild,
	DiskFull, StoreFlip, StoreFlipLive, ManagedRecreate, UnmanagedRecreate,
	ProxiedOutage, ReadonlyGuard, ForeignWrites,
}

// loopFaults are kinds drawn only inside the crash loops of covered draws
// (cluster.go), not from kinds at large: kept out of AllFaults, so the
// draws from AllFaults (CI's seeds among them) and the coverage figures
// stay as they were. A schedule names them as any other kind.
var loopFaults = []FaultKind{StoreBulk}

// Step is one fault of a schedule: after Pause (and, with a Trigger, once
// its event came), inject Kind, for Hold where the kind lasts (a freeze,
// an outage). Join marks a step of the same cluster as the one before: a
// few kinds in quick succession, whose order is what a cluster tests.
type Step struct {
	Pause   time.Duration
	Kind    FaultKind
	Hold    time.Duration
	Join    bool
	Trigger Trigger
}

// TriggerOn names the event a step waits for after its pause.
type TriggerOn string

// The events a step can be timed to land inside.
const (
	// OnReplay: flowstated's next replay_started event (br-int).
	OnReplay TriggerOn = "replay"
	// OnResync: the proxied controller's next clear (the start of a
	// resync, which lasts up to 4 s).
	OnResync TriggerOn = "resync"
	// OnRestore: the replay of br-int under way when the pause ends, else
	// the next one; the offset counts from its start. A vswitchd restart's
	// replay starts before the step after it has paused, so OnReplay lands
	// in the reconcile after it (crash loops, cluster.go).
	OnRestore TriggerOn = "restore"
	// OnQuiet: no lasting fault on, flowstated, vswitchd and a guard
	// running (at most quietWait); the offset counts from then. A shape
	// that needs the node at rest when it begins (the frozen guard's,
	// cluster.go) is otherwise cut short by what the clusters before it
	// left on.
	OnQuiet TriggerOn = "quiet"
)

// Trigger times a step to land inside a replay or a resync: after the
// pause, wait for the next On event (at most triggerWait), then Offset,
// then inject. The zero Trigger injects right after the pause.
type Trigger struct {
	On     TriggerOn
	Offset time.Duration
}

func (t Trigger) String() string {
	if t.On == "" {
		return ""
	}
	return fmt.Sprintf("@%s+%d", t.On, t.Offset.Milliseconds())
}

func (s Step) String() string {
	var b strings.Builder
	if s.Join {
		b.WriteString("then ")
	}
	fmt.Fprintf(&b, "after %v", s.Pause)
	switch s.Trigger.On {
	case "":
	case OnQuiet:
		fmt.Fprintf(&b, ", at rest and %v", s.Trigger.Offset)
	default:
		fmt.Fprintf(&b, ", the next %s and %v", s.Trigger.On, s.Trigger.Offset)
	}
	fmt.Fprintf(&b, ": %s (hold %v)", s.Kind, s.Hold)
	return b.String()
}

// Schedule is the faults of one run, in order.
type Schedule []Step

// Generate draws a schedule of n steps from seed: clusters of one to three
// kinds (cluster.go). The same seed and n give the same schedule; the
// prefix of a longer schedule is a shorter one.
func Generate(seed uint64, n int, kinds []FaultKind) Schedule {
	return generate(seed, n, kinds, nil)
}

func (s Schedule) String() string {
	var b strings.Builder
	for i, st := range s {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, st)
	}
	return b.String()
}

// Encode writes s in the one-line form ParseSchedule reads:
// kind:pause:hold[@replay+ms|@resync+ms|@restore+ms|@quiet+ms], durations in milliseconds; steps
// of one cluster joined by "+", clusters by ",".
func (s Schedule) Encode() string {
	var b strings.Builder
	for i, st := range s {
		if i > 0 {
			if st.Join {
				b.WriteByte('+')
			} else {
				b.WriteByte(',')
			}
		}
		fmt.Fprintf(&b, "%s:%d:%d%s", st.Kind, st.Pause.Milliseconds(), st.Hold.Milliseconds(), st.Trigger)
	}
	return b.String()
}

// ParseSchedule reads the form Encode writes, and the older one without
// clusters and triggers (kind:pause:hold,...).
func ParseSchedule(text string) (Schedule, error) {
	var s Schedule
	for ci, cluster := range strings.Split(strings.TrimSpace(text), ",") {
		for j, part := range splitCluster(cluster) {
			st, err := parseStep(part)
			if err != nil {
				return nil, fmt.Errorf("chaos: schedule step %d (cluster %d) %q: %w", len(s)+1, ci+1, part, err)
			}
			st.Join = j > 0
			s = append(s, st)
		}
	}
	return s, nil
}

// splitCluster splits a cluster at each "+" that starts a step (a kind
// begins with a letter; a trigger's offset is digits).
func splitCluster(c string) []string {
	var parts []string
	last := 0
	for i := 0; i+1 < len(c); i++ {
		if c[i] == '+' && c[i+1] >= 'a' && c[i+1] <= 'z' {
			parts, last = append(parts, c[last:i]), i+1
		}
	}
	return append(parts, c[last:])
}

func parseStep(part string) (Step, error) {
	var trig Trigger
	if at := strings.IndexByte(part, '@'); at >= 0 {
		on, off, ok := strings.Cut(part[at+1:], "+")
		ms, err := strconv.ParseUint(off, 10, 32)
		if !ok || err != nil || !slices.Contains([]TriggerOn{OnReplay, OnResync, OnRestore, OnQuiet}, TriggerOn(on)) {
			return Step{}, fmt.Errorf("want a trigger @replay+ms, @resync+ms, @restore+ms or @quiet+ms, not %q", part[at:])
		}
		trig = Trigger{On: TriggerOn(on), Offset: time.Duration(ms) * time.Millisecond}
		part = part[:at]
	}
	f := strings.Split(part, ":")
	if len(f) != 3 {
		return Step{}, errors.New("want kind:pause_ms:hold_ms")
	}
	kind := FaultKind(f[0])
	if !slices.Contains(AllFaults, kind) && !slices.Contains(loopFaults, kind) {
		return Step{}, fmt.Errorf("unknown fault %q", f[0])
	}
	pause, err1 := strconv.ParseUint(f[1], 10, 32)
	hold, err2 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil {
		return Step{}, errors.New("durations are milliseconds")
	}
	return Step{Kind: kind, Pause: time.Duration(pause) * time.Millisecond, Hold: time.Duration(hold) * time.Millisecond, Trigger: trig}, nil
}

// Shrink looks for a shorter schedule that still fails: it drops chunks of
// steps, halving the chunk size down to one step, and keeps every removal
// after which fails still reports a failure (delta debugging, without the
// complement step). fails runs a schedule; it is called O(n log n) times.
func Shrink(s Schedule, fails func(Schedule) bool) Schedule {
	for chunk := max(len(s)/2, 1); chunk >= 1; chunk /= 2 {
		for i := 0; i < len(s); {
			end := min(i+chunk, len(s))
			cand := append(append(Schedule{}, s[:i]...), s[end:]...)
			if len(cand) > 0 && fails(cand) {
				s = cand
				continue
			}
			i = end
		}
		if chunk == 1 {
			break
		}
	}
	return s
}
