// The shapes covered draws hold on purpose: orderings a draw of kinds at
// large reaches too rarely for a search of minutes (each missed a fault
// put back, docs/testing.md).

package chaos

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Crash loops, in covered draws only: crashLoopPct of the clusters are a
// crash loop, the trigger of flowstated's crash-loop bisection: vswitchd
// dying twice while it is restored. Drawn from kinds at large the pair
// comes up about once in 500 clusters, and issue 31's fault 6 (a vswitchd
// killed from outside taken as a crash) was missed by 10 minutes of fresh
// seeds. A loop is a store-bulk (the replays then send for a few hundred
// milliseconds, bulk.go), a vswitchd restart once the bulk is on the
// switch, and two SIGKILLs of vswitchd, each loopKillMin to loopKillMax
// into the replay of the vswitchd started before it (@restore): a
// flowstated counts a death only when it drops a replay that was sending,
// and a kill timed by @replay lands in the reconcile after that replay.
// (A stop removes vswitchd's pidfile: no version counts it as a death.)
const (
	crashLoopPct = 6
	loopKillMin  = 60 * time.Millisecond
	loopKillMax  = 180 * time.Millisecond
)

// crashLoop draws one crash loop, its first step after pause.
func crashLoop(r *rand.Rand, ends []FaultKind, pause time.Duration) []Step {
	loop := []Step{
		{Kind: StoreBulk, Pause: pause, Hold: time.Duration(4000+r.IntN(4000)) * time.Millisecond},
		// After the bulk's Sync and its replay to the running vswitchd.
		{Kind: ends[r.IntN(len(ends))], Join: true, Pause: time.Duration(2000+r.IntN(1500)) * time.Millisecond,
			Hold: time.Duration(300+r.IntN(2200)) * time.Millisecond},
	}
	for range 2 {
		loop = append(loop, Step{Kind: VswitchdKill, Join: true, Pause: time.Duration(r.IntN(50)) * time.Millisecond,
			Hold:    time.Duration(300+r.IntN(2200)) * time.Millisecond,
			Trigger: Trigger{On: OnRestore, Offset: loopKillMin + time.Duration(r.Int64N(int64((loopKillMax-loopKillMin)/time.Millisecond)))*time.Millisecond}})
	}
	return loop
}

// Detection gaps, in covered draws only: detectPct of the clusters are a
// guard fault, then a flowstated outage, then within a second a vswitchd
// restart, while both are still on. The outage lands where the guard's
// fault matters: after a freeze, past guardDetect (flowstated has judged
// the frozen guard: round 2's frozen guard); after a kill, within
// killGapMax, before flowstated has reacted to the exit (round 2's guard
// killed 30 ms before flowstated, which its keeper noticed only at its
// next renewal). Clusters drawn from kinds at large hold the first in
// about 11 of 300 schedules and the second about as rarely, and 10
// minutes of fresh seeds missed each fault put back. The two take turns.
const detectPct = 12

// killGapMax bounds the gap from a guard's kill to flowstated's: inside a
// renewal of the lease (a tenth of the guard's grace).
const killGapMax = 300 * time.Millisecond

// detectSlack is how long past the hold promise (holdBound from the
// shape's last vswitchd start) the shape stays on and nothing else starts:
// the probe's period and SYNs, vswitchd's kill and start, on a loaded
// two-core machine. The kept schedule leaves about 2 s.
const detectSlack = 5 * time.Second

var (
	detectGuards  = []FaultKind{GuardFreeze, GuardKill}
	detectOutages = []FaultKind{FlowstatedOutage, ProxiedOutage}
)

// detectionGap draws one such cluster from guards, outages and ends, its
// first step after pause, and the least pause before the next cluster.
// The shape is tested only if it is whole when the promise falls due, so
// (each seen to hide it against round 2's fault put back, docs/testing.md):
//  1. the guard fault starts @quiet: a freeze still on skips it, and an
//     earlier fault's end (flowstated back, an excuse) releases the node;
//  2. a freeze lasts until detectSlack past the promise, counted from the
//     last vswitchd start (a proxied-outage restarts vswitchd itself, past
//     the guard's grace), and so does a proxied-outage's flowstated absence;
//  3. the next cluster waits as long: any step's excuse or vswitchd
//     restart starts the promise's clock again.
func detectionGap(r *rand.Rand, guards, outages, ends []FaultKind, cov *Coverage, pause time.Duration) ([]Step, time.Duration) {
	hold := func() time.Duration { return time.Duration(300+r.IntN(2200)) * time.Millisecond }
	guard := leastRun(r, guards, func(k FaultKind) int { return cov.Shapes["detect:"+string(k)] })
	gap := guardDetect + time.Duration(r.IntN(2500))*time.Millisecond
	if guard == GuardKill {
		gap = time.Duration(20+r.Int64N(int64((killGapMax-20*time.Millisecond)/time.Millisecond))) * time.Millisecond
	}
	s := []Step{
		{Kind: guard, Pause: pause, Hold: hold(), Trigger: Trigger{On: OnQuiet}},
		{Kind: outages[r.IntN(len(outages))], Join: true, Pause: gap, Hold: hold()},
		{Kind: ends[r.IntN(len(ends))], Join: true, Pause: time.Duration(100+r.IntN(800)) * time.Millisecond, Hold: hold()},
	}
	restart := s[2].Pause // the last vswitchd start, from the outage's
	if s[1].Kind == ProxiedOutage {
		restart = proxiedRestart
		s[1].Hold = max(s[1].Hold, holdBound+detectSlack-proxiedBack)
	}
	if guard == GuardFreeze {
		s[0].Hold = max(s[0].Hold, s[1].Pause+restart+holdBound+detectSlack-lastingBound)
	}
	return s, restart - s[2].Pause + holdBound + detectSlack
}

// Restarts inside a lasting fault, in covered draws only: insidePct of the
// clusters are a lasting fault, a vswitchd restart while it is on, and a
// settle until that start's hold promise is tested (detectSlack past
// holdBound). Drawn at large the pair comes up, but the restart often
// falls after a short fault ended, or the next cluster begins within 2 s
// and starts the promise's clock again: round 2's only bridge without
// OpenFlow 1.5 (a vswitchd restart inside a protocols-flip, never
// released) was missed by 10 minutes of fresh seeds. The kinds take
// turns: one of those that ran this shape fewest times.
const insidePct = 25

// insideFaults are the lasting kinds that keep a restore from completing
// (br-int cannot be restored, or only in part, or br-ex is gone): a
// vswitchd started inside one must be released at --max-hold, which no
// restart after it tests. The lasting guard faults and outages are the
// detection gap's; each lasts at least its Hold.
var insideFaults = []FaultKind{ProtocolsFlip, FlowLimit, DiskFull, ManagedRecreate, UnmanagedRecreate}

// insideRestart draws one such cluster from lasting and ends, its first
// step @quiet after pause (a fault still on from before would skip it),
// and the least pause before the next cluster.
func insideRestart(r *rand.Rand, lasting, ends []FaultKind, cov *Coverage, pause time.Duration) ([]Step, time.Duration) {
	end := ends[r.IntN(len(ends))]
	kind := leastRun(r, lasting, func(k FaultKind) int {
		return cov.Shapes["inside:"+string(k)]
	})
	hold := time.Duration(1500+r.IntN(2500)) * time.Millisecond
	s := []Step{
		{Kind: kind, Pause: pause, Hold: hold, Trigger: Trigger{On: OnQuiet}},
		{Kind: end, Join: true, Pause: time.Duration(100+r.Int64N(int64((hold-500*time.Millisecond)/time.Millisecond))) * time.Millisecond,
			Hold: time.Duration(300+r.IntN(2200)) * time.Millisecond},
	}
	return s, holdBound + detectSlack
}

// Finales, in covered draws only: a covered draw ends on a kind whose
// promise is judged at rest (quiesce: protected, converged), @quiet, with
// nothing after it but the heal. Anywhere else the steps after it undo it
// before anyone looks (a flowstated restart re-creates an unlinked lease,
// a vswitchd restart rebuilds br-ex held): round 2's unlinked lease and
// br-ex rebuilt on a released vswitchd were missed by 10 minutes of fresh
// seeds. The kinds take turns: one of those that ended fewest runs.
var restFaults = []FaultKind{LeaseUnlink, BridgeRebuild, UnmanagedRecreate}

// finale draws the last step of a covered draw from rest.
func finale(r *rand.Rand, rest []FaultKind, cov *Coverage) Step {
	kind := leastRun(r, rest, func(k FaultKind) int { return cov.Shapes["finale:"+string(k)] })
	return Step{Kind: kind, Pause: time.Duration(200+r.IntN(1800)) * time.Millisecond,
		Hold: time.Duration(300+r.IntN(2200)) * time.Millisecond, Trigger: Trigger{On: OnQuiet}}
}

// isFinale reports whether s's step i is its finale.
func isFinale(s Schedule, i int) bool {
	st := s[i]
	return i == len(s)-1 && !st.Join && st.Trigger.On == OnQuiet && slices.Contains(restFaults, st.Kind)
}

// shapeAt names the shape drawn on purpose that s's step i begins:
// "finale", "inside" (a lasting kind, then a vswitchd restart), "detect"
// (a guard fault, then an outage), or "" for none. Each begins @quiet,
// which plain draws never hold.
func shapeAt(s Schedule, i int) string {
	switch st := s[i]; {
	case st.Trigger.On != OnQuiet:
		return ""
	case isFinale(s, i):
		return "finale"
	case slices.Contains(insideFaults, st.Kind) && (i+1 == len(s) || s[i+1].Join && slices.Contains(restarters, s[i+1].Kind)):
		return "inside"
	case slices.Contains(detectGuards, st.Kind):
		return "detect"
	}
	return ""
}

// leastRun draws one of the kinds that ran fewest times (runs), so that a
// search of minutes takes each in turn.
func leastRun(r *rand.Rand, kinds []FaultKind, runs func(FaultKind) int) FaultKind {
	least := runs(slices.MinFunc(kinds, func(a, b FaultKind) int { return runs(a) - runs(b) }))
	return pick(r, kinds, func(k FaultKind) float64 {
		if runs(k) == least {
			return 1
		}
		return 0
	})
}

// coveredSizes are the cluster sizes of covered draws, 1:2:3 in 2:4:4
// (plain draws: 5:3:2): pairs come only from clusters of two or more, and
// the shapes above take steps that would otherwise run new pairs.
var coveredSizes = []int{1, 1, 2, 2, 2, 2, 3, 3, 3, 3}
