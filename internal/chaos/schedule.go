package chaos

import (
	"fmt"
	"math/rand/v2"
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
)

// AllFaults lists every fault kind, in a fixed order (the draw depends on it).
var AllFaults = []FaultKind{
	VswitchdKill, VswitchdTerm, VswitchdFreeze,
	FlowstatedKill, FlowstatedFreeze, FlowstatedTerm, FlowstatedReboot,
	GuardKill, GuardFreeze, LeaseUnlink, ProtocolsFlip, StalledReader,
	OVSDBRestart, FlowLimit, FlowstatedOutage, BridgeRebuild,
	DiskFull, StoreFlip, StoreFlipLive, ManagedRecreate, UnmanagedRecreate,
}

// Step is one fault of a schedule: after Pause, inject Kind, for Hold where
// the kind lasts (a freeze, an outage).
type Step struct {
	Pause time.Duration
	Kind  FaultKind
	Hold  time.Duration
}

func (s Step) String() string {
	return fmt.Sprintf("after %v: %s (hold %v)", s.Pause, s.Kind, s.Hold)
}

// Schedule is the faults of one run, in order.
type Schedule []Step

// Generate draws a schedule of n steps from seed. The same seed and n give
// the same schedule; the prefix of a longer schedule is a shorter one.
func Generate(seed uint64, n int, kinds []FaultKind) Schedule {
	if len(kinds) == 0 {
		kinds = AllFaults
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := make(Schedule, n)
	for i := range s {
		// One step in five follows the last closely: faults that land
		// together (a guard killed just before flowstated) are the rare
		// ones.
		pause := time.Duration(200+r.IntN(1800)) * time.Millisecond
		if r.IntN(5) == 0 {
			pause = time.Duration(20+r.IntN(180)) * time.Millisecond
		}
		s[i] = Step{
			Pause: pause,
			Kind:  kinds[r.IntN(len(kinds))],
			Hold:  time.Duration(300+r.IntN(2200)) * time.Millisecond,
		}
	}
	return s
}

func (s Schedule) String() string {
	var b strings.Builder
	for i, st := range s {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, st)
	}
	return b.String()
}

// Encode writes s in the one-line form ParseSchedule reads: kind:pause:hold,
// comma-separated, durations in milliseconds.
func (s Schedule) Encode() string {
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = fmt.Sprintf("%s:%d:%d", st.Kind, st.Pause.Milliseconds(), st.Hold.Milliseconds())
	}
	return strings.Join(parts, ",")
}

// ParseSchedule reads the form Encode writes.
func ParseSchedule(text string) (Schedule, error) {
	var s Schedule
	for i, part := range strings.Split(strings.TrimSpace(text), ",") {
		f := strings.Split(part, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("chaos: schedule step %d %q: want kind:pause_ms:hold_ms", i+1, part)
		}
		kind := FaultKind(f[0])
		known := false
		for _, k := range AllFaults {
			known = known || k == kind
		}
		if !known {
			return nil, fmt.Errorf("chaos: schedule step %d: unknown fault %q", i+1, f[0])
		}
		pause, err1 := strconv.ParseUint(f[1], 10, 32)
		hold, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("chaos: schedule step %d %q: durations are milliseconds", i+1, part)
		}
		s = append(s, Step{Kind: kind, Pause: time.Duration(pause) * time.Millisecond, Hold: time.Duration(hold) * time.Millisecond})
	}
	return s, nil
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
