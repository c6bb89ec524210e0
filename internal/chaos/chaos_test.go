package chaos

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ciSeeds are the seeds CI runs on every change: each draws a schedule of
// ciSteps faults over every kind.
var ciSeeds = []uint64{1, 2}

const ciSteps = 10

// ciFaults are the kinds the CI seeds draw from: the kinds of issue 31's
// chaos round (proxied-outage, readonly-guard, foreign-writes) are left out,
// so the seeds keep the schedules (and the runtime) they had; those kinds
// run in the "issue31-kinds" regression and in every fresh seed.
var ciFaults = slices.DeleteFunc(slices.Clone(AllFaults), func(k FaultKind) bool {
	return k == ProxiedOutage || k == ReadonlyGuard || k == ForeignWrites
})

// ciSchedules are fixed schedules CI runs beside the seeds: each fault kind
// the seeds do not draw runs in one of them.
var ciSchedules = map[string]string{
	// The store's faults, and a bridge deleted and created again: the disk
	// filled while vswitchd restarts, a record flipped while flowstated is
	// down and one under it, br-int missing across a vswitchd crash.
	"store-and-bridges": "disk-full:300:2500,vswitchd-kill:800:300,store-flip:4000:800,store-flip-live:800:1200," +
		"managed-recreate:600:1500,vswitchd-term:300:300,unmanaged-recreate:3000:1000",
}

// TestChaosSeeds runs the fixed seeds and schedules against the real
// binaries and fails on any violation, printing the seed and the schedule
// up to it.
func TestChaosSeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := build(ctx, t)
	for _, seed := range ciSeeds {
		t.Run("seed"+strconv.FormatUint(seed, 10), func(t *testing.T) {
			// The relay off: with it seed 2 runs 49 s instead of 36 s,
			// the test 12 % longer (docs/testing.md).
			rep, err := Run(ctx, Config{Seed: seed, Steps: ciSteps, Faults: ciFaults, Flowstated: bin, NoRelay: true})
			if err != nil {
				t.Fatal(err)
			}
			report(t, rep)
		})
	}
	runSchedules(ctx, t, bin, 3, ciSchedules)
}

// regressions are the schedules that found a fault of the issues "Never
// dark", "Never wrong" and "Never dark, round 2" reintroduced one at a time
// (docs/testing.md, "What it finds"), kept as regular tests. Each names the
// fault it found.
var regressions = map[string]string{
	// Round 2, item 6 (and "Never dark" item 3): the only managed bridge
	// cannot be restored (no OpenFlow 1.5) and vswitchd restarts: the node
	// must be released at --max-hold.
	"stuck-only-bridge": "protocols-flip:300:2000,vswitchd-kill:500:300",
	// Round 2, item 1: a frozen guard is not a proof; flowstated disarms,
	// so a vswitchd restart after flowstated dies is not held. With the
	// relay on it also found that flowstated's return removed from the
	// store what the unheld vswitchd lacked (acked fails at 2074aef).
	"frozen-guard": "guard-freeze:300:300,flowstated-outage:5500:300,vswitchd-kill:500:300",
	// Round 2, item 3: the guard killed just before flowstated.
	"guard-killed-first": "guard-kill:500:300,flowstated-outage:30:300,vswitchd-kill:1000:300",
	// The same with a guard an earlier flowstated spawned (flowstated
	// restarted first): found by fresh seeds at stop 29 (seed 3506617108),
	// when only a spawned guard's exit was noticed at once and an adopted
	// one's waited for the next renewal.
	"adopted-guard-killed-first": "flowstated-kill:300:300,guard-kill:1500:300,flowstated-outage:30:300,vswitchd-kill:1000:300",
	// "Never dark", item 1: flowstated dead, vswitchd restarted plainly:
	// the guard releases the node.
	"dead-flowstated": "flowstated-outage:300:300,vswitchd-kill:500:300",
	// "Never dark", item 2: an unmanaged bridge comes back from the
	// mirror after a held restart.
	"unmanaged-restored": "vswitchd-kill:500:300",
	// Round 2, item 14: the lease unlinked must not make the flag flap.
	"lease-unlinked": "lease-unlink:300:300",
	// Issue 31, fault 3: a busy proxied controller's changes to the flows
	// it held before its clear stayed in memory while it stayed busy
	// (a296665~1): 15 s without a fault for its resyncs, then barrier-delay
	// finds a drop acknowledged 7 s ago still output:2 on br-int.
	"busy-resync": "lease-unlink:15000:300",
	// Issue 31, fault 3: flowstated killed inside a resync kept in the
	// store the flows the controller's acknowledged clear removed, and
	// replayed them (acked fails before the clear's deletions were stored
	// with its change: 4 of 4 with seed 4, about 30 s; seed 2's writers
	// miss it, hence scheduleSeeds).
	"resync-kill": "flowstated-kill:8000:300@resync+1000",
	// Issue 31, faults 1, 5 and 2 (and 4 in every run, by the OpenFlow 1.3
	// controller): flowstated out across a vswitchd restart (path fails
	// before 85b0c06: nobody listens on the proxy socket), with uid 65534
	// writing through the guard's relay meanwhile (foreign fails at
	// bc43574, before eee906a: the relay admitted it); then the guard lock held
	// by a guard on a read-only replica (readonly-guard fails before
	// 7b0712e), uid 65534 writing over every listener beside it (foreign
	// fails before bc43574: the unix socket and the TCP listener admitted
	// it). With the relay on it also found that flowstated's return
	// learned the OpenFlow 1.3 controller's relayed flows as module
	// proxied's (kept fails at 2074aef; server/guard/relaykept.go).
	"issue31-kinds": "proxied-outage:300:300+foreign-writes:6000:300,readonly-guard:14000:300,foreign-writes:500:300",
}

// TestChaosRegressions runs the schedules that found a reintroduced fault
// against the flowstated of this tree.
func TestChaosRegressions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := build(ctx, t)
	runSchedules(ctx, t, bin, 2, regressions)
}

// scheduleSeeds are the writers' seeds of the kept schedules that find
// their fault only with the writers of that seed.
var scheduleSeeds = map[string]uint64{"resync-kill": 4}

// runSchedules runs each of the named schedules (in name order) as a
// subtest, with seed for the writers (or the schedule's own,
// scheduleSeeds).
func runSchedules(ctx context.Context, t *testing.T, bin string, seed uint64, schedules map[string]string) {
	for _, name := range sortedKeys(schedules) {
		t.Run(name, func(t *testing.T) {
			s, err := ParseSchedule(schedules[name])
			if err != nil {
				t.Fatal(err)
			}
			seed := seed
			if own, ok := scheduleSeeds[name]; ok {
				seed = own
			}
			rep, err := Run(ctx, Config{Seed: seed, Schedule: s, Flowstated: bin})
			if err != nil {
				t.Fatal(err)
			}
			report(t, rep)
		})
	}
}

func build(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "chaos-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin, err := BuildFlowstated(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func report(t *testing.T, rep *Report) {
	t.Helper()
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	if rep.Ops.Total() == 0 || rep.Checks.Total() == 0 {
		t.Errorf("the run executed %d operations and %d checks: the harness did not exercise anything", rep.Ops.Total(), rep.Checks.Total())
	}
	if rep.Failed() {
		t.Logf("flowstated and guard logs:\n%s", rep.Logs)
		t.Fatalf("%d violations (seed %d)", len(rep.Violations), rep.Seed)
	}
}

func TestScheduleRoundTrip(t *testing.T) {
	s := Generate(42, 30, nil)
	if again := Generate(42, 30, nil); again.Encode() != s.Encode() {
		t.Fatal("the same seed drew two schedules")
	}
	// Generated sequentially and truncated: a shorter schedule is the
	// prefix of a longer one, also when the cut splits a cluster.
	for _, n := range []int{1, 7, 10, 29} {
		if prefix := Generate(42, n, nil); prefix.Encode() != s[:n].Encode() {
			t.Fatalf("the %d-step schedule of a seed is not the prefix of its 30-step one:\n%s\n%s", n, prefix.Encode(), s[:n].Encode())
		}
	}
	back, err := ParseSchedule(s.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if back.Encode() != s.Encode() || !slices.Equal(back, s) {
		t.Fatalf("round trip changed the schedule:\n%s\n%s", s.Encode(), back.Encode())
	}
	for _, bad := range []string{"", "vswitchd-kill:1", "nosuch:1:2", "guard-kill:x:2", "vswitchd-kill:1:2@replay",
		"vswitchd-kill:1:2@nosuch+3", "vswitchd-kill:1:2@replay+x", "guard-kill:1:2+", "guard-kill:1:2,,lease-unlink:1:2"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q) accepted", bad)
		}
	}
}

// TestScheduleForms: the form without clusters and triggers still reads;
// the new one reads clusters (+) and triggers (@replay+ms, @resync+ms).
func TestScheduleForms(t *testing.T) {
	old, err := ParseSchedule(regressions["frozen-guard"])
	if err != nil {
		t.Fatal(err)
	}
	want := Schedule{
		{Kind: GuardFreeze, Pause: 300 * time.Millisecond, Hold: 300 * time.Millisecond},
		{Kind: FlowstatedOutage, Pause: 5500 * time.Millisecond, Hold: 300 * time.Millisecond},
		{Kind: VswitchdKill, Pause: 500 * time.Millisecond, Hold: 300 * time.Millisecond},
	}
	if !slices.Equal(old, want) {
		t.Fatalf("the old form read as %v", old)
	}
	s, err := ParseSchedule("guard-freeze:300:300+flowstated-outage:5500:300+vswitchd-kill:500:300@replay+40,lease-unlink:10:20@resync+1500")
	if err != nil {
		t.Fatal(err)
	}
	want[1].Join, want[2].Join = true, true
	want[2].Trigger = Trigger{On: OnReplay, Offset: 40 * time.Millisecond}
	want = append(want, Step{Kind: LeaseUnlink, Pause: 10 * time.Millisecond, Hold: 20 * time.Millisecond,
		Trigger: Trigger{On: OnResync, Offset: 1500 * time.Millisecond}})
	if !slices.Equal(s, want) {
		t.Fatalf("read as\n%v\nwant\n%v", s, want)
	}
	if got := s.Encode(); got != "guard-freeze:300:300+flowstated-outage:5500:300+vswitchd-kill:500:300@replay+40,lease-unlink:10:20@resync+1500" {
		t.Fatalf("encoded as %s", got)
	}
}

func TestShrinkFindsTheCulprit(t *testing.T) {
	s := Generate(7, 24, nil)
	culprit := s[13]
	calls := 0
	short := Shrink(s, func(c Schedule) bool {
		calls++
		for _, st := range c {
			if st == culprit {
				return true
			}
		}
		return false
	})
	if len(short) != 1 || short[0] != culprit {
		t.Fatalf("shrunk to %v, want only %v", short, culprit)
	}
	t.Logf("shrunk 24 steps to 1 in %d runs", calls)
}
