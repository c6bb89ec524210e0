package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// frozenGuardShape reports whether s holds, within one cluster, the shape
// of the frozen-guard schedule: a lasting fault, past guardDetect another
// lasting fault, then within a second a vswitchd restart.
func frozenGuardShape(s Schedule) bool {
	for i := 2; i < len(s); i++ {
		a, b, c := s[i-2], s[i-1], s[i]
		if b.Join && c.Join && overlaps[a.Kind] && overlaps[b.Kind] && a.Kind != b.Kind &&
			b.Pause >= guardDetect && b.Pause < lastingBound-5*time.Second && c.Pause < time.Second && slices.Contains(restarters, c.Kind) {
			return true
		}
	}
	return false
}

// TestGenerateClusters: drawn schedules hold clusters of two and three
// kinds, triggers of both events, vswitchd restarts ending clusters, and
// the frozen-guard shape often enough to come up in a long run; the old
// draw of single steps (pauses of at most 2 s) could not draw the shape at
// all.
func TestGenerateClusters(t *testing.T) {
	const seeds, steps = 300, 20
	var joined, sizes3, replay, resync, endRestart, ends, shape int
	for seed := range uint64(seeds) {
		s := Generate(seed, steps, nil)
		if frozenGuardShape(s) {
			shape++
		}
		size := 0
		for i, st := range s {
			if st.Join {
				joined++
				size++
			} else {
				size = 1
			}
			if size == 3 {
				sizes3++
			}
			switch st.Trigger.On {
			case OnReplay:
				replay++
			case OnResync:
				resync++
			}
			if st.Join && (i+1 == len(s) || !s[i+1].Join) {
				ends++
				if slices.Contains(restarters, st.Kind) {
					endRestart++
				}
			}
		}
	}
	total := seeds * steps
	t.Logf("%d steps: %d joined, %d clusters of 3, %d @replay, %d @resync, %d of %d clusters end with a vswitchd restart, frozen-guard shape in %d of %d schedules",
		total, joined, sizes3, replay, resync, endRestart, ends, shape, seeds)
	switch {
	case joined < total/4:
		t.Errorf("only %d of %d steps join a cluster", joined, total)
	case sizes3 == 0 || replay == 0 || resync == 0:
		t.Errorf("no cluster of three (%d), @replay (%d) or @resync (%d)", sizes3, replay, resync)
	case endRestart < ends/3:
		t.Errorf("only %d of %d clusters end with a vswitchd restart", endRestart, ends)
	case shape == 0:
		t.Error("no schedule holds the frozen-guard shape")
	}
}

// TestGenerateCovered: the weighted draw is deterministic in (seed, n,
// kinds, coverage), keeps the prefix property, leaves the coverage alone,
// and covers the ordered pairs faster than the plain draw over the same
// seeds.
func TestGenerateCovered(t *testing.T) {
	cov := NewCoverage()
	cov.Add(Generate(1, 40, nil), nil)
	before := cov.Summary(nil)
	s := GenerateCovered(9, 30, nil, cov)
	if again := GenerateCovered(9, 30, nil, cov); again.Encode() != s.Encode() {
		t.Fatal("the same seed and coverage drew two schedules")
	}
	// All but the finale (shapes.go), which ends each covered draw.
	if prefix := GenerateCovered(9, 11, nil, cov); prefix[:10].Encode() != s[:10].Encode() || !isFinale(prefix, 10) || !isFinale(s, 29) {
		t.Fatalf("a shorter covered schedule is not the prefix of the longer one but for its finale:\n%s\n%s", prefix.Encode(), s.Encode())
	}
	if cov.Summary(nil) != before {
		t.Fatal("GenerateCovered changed the coverage")
	}
	if s.Encode() == Generate(9, 30, nil).Encode() {
		t.Fatal("the coverage changed nothing in the draw")
	}

	// Runs of 20 steps, as the -duration loop draws them.
	plain, covered := NewCoverage(), NewCoverage()
	for seed := range uint64(60) {
		plain.Add(Generate(seed, 20, nil), nil)
		covered.Add(GenerateCovered(seed, 20, nil, covered), nil)
	}
	p, c := pairsCovered(plain), pairsCovered(covered)
	t.Logf("after 60 runs of 20 steps: plain %s; covered %s", plain.Summary(nil), covered.Summary(nil))
	if c <= p {
		t.Errorf("the covered draw ran %d ordered pairs, the plain one %d", c, p)
	}
	if k := len(covered.Kinds); k != len(AllFaults) {
		t.Errorf("the covered draw ran %d kinds of %d", k, len(AllFaults))
	}
}

func pairsCovered(c *Coverage) int {
	n := 0
	for _, v := range c.Pairs {
		if v > 0 {
			n++
		}
	}
	return n
}

// TestCoverageAdd counts kinds, ordered pairs and triples within clusters
// only, leaving out the steps that did not run.
func TestCoverageAdd(t *testing.T) {
	s, err := ParseSchedule("guard-freeze:1:1+flowstated-outage:1:1+vswitchd-kill:1:1,lease-unlink:1:1,guard-kill:1:1+ovsdb-restart:1:1+vswitchd-term:1:1")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCoverage()
	c.Add(s, func(i int) bool { return i != 5 }) // ovsdb-restart skipped
	if len(c.Shapes) != 0 {
		t.Fatalf("a schedule without a shape drawn on purpose counted shapes %v", c.Shapes)
	}
	want := &Coverage{
		Kinds: map[string]int{"guard-freeze": 1, "flowstated-outage": 1, "vswitchd-kill": 1, "lease-unlink": 1, "guard-kill": 1, "vswitchd-term": 1},
		Pairs: map[string]int{"guard-freeze>flowstated-outage": 1, "guard-freeze>vswitchd-kill": 1, "flowstated-outage>vswitchd-kill": 1,
			"guard-kill>vswitchd-term": 1},
		Triples: map[string]int{"guard-freeze>flowstated-outage>vswitchd-kill": 1},
	}
	if c.Summary(nil) != want.Summary(nil) || !mapsEqual(c.Kinds, want.Kinds) || !mapsEqual(c.Pairs, want.Pairs) || !mapsEqual(c.Triples, want.Triples) {
		t.Fatalf("counted %+v, want %+v", c, want)
	}
	if got := c.Summary(nil); got != "kinds 6/24, ordered pairs 4/576, ordered triples 1/13824" {
		t.Fatalf("summary %q", got)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCoverageFile: Save and LoadCoverage round-trip; a missing file is
// an empty coverage, a damaged one an error naming it.
func TestCoverageFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cov.json")
	c, err := LoadCoverage(path)
	if err != nil || len(c.Kinds)+len(c.Pairs)+len(c.Triples) != 0 {
		t.Fatalf("a missing file: %+v, %v", c, err)
	}
	c.Add(Generate(3, 20, nil), nil)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadCoverage(path)
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(back.Kinds, c.Kinds) || !mapsEqual(back.Pairs, c.Pairs) || !mapsEqual(back.Triples, c.Triples) {
		t.Fatalf("round trip changed the coverage: %+v, want %+v", back, c)
	}
	if err := os.WriteFile(path, []byte("{nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCoverage(path); err == nil {
		t.Fatal("a damaged coverage file was read")
	}
}

// TestGenerateQuiet: covered draws begin some clusters after a quiet pause
// (barrier-delay is tested only there); plain draws, CI's seeds among them,
// draw none and keep their schedules.
func TestGenerateQuiet(t *testing.T) {
	pinned := map[uint64]string{
		1: "unmanaged-recreate:472:1803+vswitchd-term:639:2291,store-flip-live:122:1801+flowstated-reboot:530:2105,bridge-rebuild:680:1439,stalled-reader:768:595+vswitchd-kill:732:1021,stalled-reader:429:1206,store-flip:1397:1498,guard-freeze:293:350",
		2: "ovsdb-restart:707:964+vswitchd-kill:154:801,flowstated-reboot:1171:2496,unmanaged-recreate:394:1809+flowstated-kill:4805:2447+flowstated-reboot:444:1121,ovsdb-restart:33:2272@replay+116+flowstated-freeze:92:1073+vswitchd-term:758:311,store-flip-live:907:1141",
	}
	for seed, want := range pinned {
		if got := Generate(seed, ciSteps, ciFaults).Encode(); got != want {
			t.Errorf("CI seed %d draws %s, want %s", seed, got, want)
		}
	}
	quiet := func(s Schedule) int {
		n := 0
		for _, st := range s {
			if !st.Join && st.Pause >= quietMin {
				n++
			}
		}
		return n
	}
	plain, covered := 0, 0
	cov := NewCoverage()
	for seed := range uint64(20) {
		plain += quiet(Generate(seed, 20, nil))
		s := GenerateCovered(seed, 20, nil, cov)
		covered += quiet(s)
		cov.Add(s, nil)
	}
	if plain != 0 {
		t.Errorf("plain draws hold %d quiet pauses, want none", plain)
	}
	if covered == 0 {
		t.Error("20 covered draws of 20 steps hold no quiet pause")
	}
	t.Logf("quiet pauses in 20 covered draws of 20 steps: %d", covered)
}

// TestGenerateCrashLoops: covered draws hold crash loops (a vswitchd
// restart, then another timed into the replay after it); plain draws, CI's,
// hold none. Each loop begins with a store-bulk, so that its replays send
// for long enough, and ends with two SIGKILLs timed into the replay of the
// vswitchd started before (@restore): what flowstated counts as a death.
func TestGenerateCrashLoops(t *testing.T) {
	loops := func(s Schedule) int {
		n := 0
		for i := 1; i < len(s); i++ {
			if s[i].Join && s[i].Trigger.On == OnRestore && slices.Contains(restarters, s[i].Kind) && slices.Contains(restarters, s[i-1].Kind) {
				n++
			}
		}
		return n
	}
	plain, covered := 0, 0
	cov := NewCoverage()
	for seed := range uint64(20) {
		plain += loops(Generate(seed, 20, nil))
		s := GenerateCovered(seed, 20, nil, cov)
		covered += loops(s)
		cov.Add(s, nil)
		for i, st := range s {
			if st.Kind != StoreBulk {
				continue
			}
			if i+3 >= len(s) {
				continue // cut by the schedule's end
			}
			restart, k1, k2 := s[i+1], s[i+2], s[i+3]
			if !restart.Join || !slices.Contains(restarters, restart.Kind) || restart.Trigger.On != "" {
				t.Errorf("seed %d: the bulk at step %d is followed by %v, want a vswitchd restart in its cluster", seed, i+1, restart)
			}
			for _, k := range []Step{k1, k2} {
				if !k.Join || k.Kind != VswitchdKill || k.Trigger.On != OnRestore || k.Trigger.Offset < loopKillMin || k.Trigger.Offset >= loopKillMax {
					t.Errorf("seed %d: crash loop at step %d holds %v, want a SIGKILL %v to %v into the replay", seed, i+1, k, loopKillMin, loopKillMax)
				}
			}
			if st.Hold < restart.Pause+time.Second {
				t.Errorf("seed %d: the bulk at step %d holds %v, not past its restart %v later", seed, i+1, st.Hold, restart.Pause)
			}
		}
	}
	t.Logf("crash loops in 20 draws of 20 steps: plain %d, covered %d", plain, covered)
	if covered < 5 {
		t.Errorf("20 covered draws of 20 steps hold %d crash loops, want at least 5", covered)
	}
	if plain != 0 {
		t.Errorf("plain draws hold %d crash loops, want none", plain)
	}
	if _, ok := cov.Kinds[string(StoreBulk)]; ok {
		t.Error("the coverage counts store-bulk, a kind drawn only in crash loops")
	}
	s, err := ParseSchedule("store-bulk:1000:8000+vswitchd-kill:3000:300+vswitchd-kill:0:300@restore+100")
	if err != nil || len(s) != 3 || s[2].Trigger != (Trigger{On: OnRestore, Offset: 100 * time.Millisecond}) {
		t.Fatalf("a crash loop read as %v, %v", s, err)
	}
}

// TestGenerateDetectionGap: covered draws hold the frozen-guard shape (a
// lasting guard fault, past guardDetect an outage, within a second a
// vswitchd restart) many times more often than plain draws, which keep
// theirs.
func TestGenerateDetectionGap(t *testing.T) {
	const seeds, steps = 300, 20
	plain, covered := 0, 0
	cov := NewCoverage()
	for seed := range uint64(seeds) {
		if frozenGuardShape(Generate(seed, steps, nil)) {
			plain++
		}
		s := GenerateCovered(seed, steps, nil, cov)
		if frozenGuardShape(s) {
			covered++
		}
		cov.Add(s, nil)
	}
	t.Logf("frozen-guard shape in %d of %d schedules: plain %d, covered %d", seeds, seeds, plain, covered)
	if covered < seeds/4 || covered < 10*plain {
		t.Errorf("covered draws hold the shape in %d of %d schedules (plain %d), want at least a quarter and ten times plain's", covered, seeds, plain)
	}
	if restricted := GenerateCovered(1, 200, []FaultKind{LeaseUnlink, VswitchdKill}, NewCoverage()); frozenGuardShape(restricted) {
		t.Error("a draw restricted to other kinds holds the shape")
	}
}

// TestGenerateDetectionGapLands: each frozen-guard shape of a covered draw
// is whole when its promise falls due (detectionGap, steps 1–3): it starts
// @quiet, its guard freeze and a proxied outage's absence last detectSlack
// past holdBound from its last vswitchd start, and the next cluster waits
// as long. Plain draws, CI's, hold no @quiet step.
func TestGenerateDetectionGapLands(t *testing.T) {
	cov := NewCoverage()
	shapes, kills := 0, 0
	for seed := range uint64(100) {
		for _, st := range Generate(seed, 20, nil) {
			if st.Trigger.On == OnQuiet {
				t.Fatalf("seed %d: a plain draw holds %v", seed, st)
			}
		}
		s := GenerateCovered(seed, 20, nil, cov)
		cov.Add(s, nil)
		for i, st := range s {
			if st.Trigger.On != OnQuiet {
				continue
			}
			if i+2 >= len(s) || isFinale(s, i+1) || isFinale(s, i+2) {
				continue // cut by the schedule's end or its finale
			}
			if shapeAt(s, i) != "detect" {
				continue // insideRestart, finale: TestGenerateInside, TestGenerateFinale
			}
			if st.Kind == GuardKill {
				kills++
				if g := s[i+1]; !g.Join || !slices.Contains(detectOutages, g.Kind) || g.Pause > killGapMax || !slices.Contains(restarters, s[i+2].Kind) {
					t.Fatalf("seed %d: a guard kill at step %d is followed by %v, %v, not an outage within %v and a restart", seed, i+1, g, s[i+2], killGapMax)
				}
				continue
			}
			shapes++
			outage, end := s[i+1], s[i+2]
			if st.Kind != GuardFreeze || !frozenGuardShape(s[i:i+3]) {
				t.Fatalf("seed %d: @quiet at step %d begins %v, %v, %v, not the frozen-guard shape", seed, i+1, st, outage, end)
			}
			restart := end.Pause // from the outage's start
			if outage.Kind == ProxiedOutage {
				restart = proxiedRestart
				if back := proxiedBack + outage.Hold; back < holdBound+detectSlack {
					t.Errorf("seed %d, step %d: flowstated back %v after the proxied outage's restart, want at least %v", seed, i+2, back, holdBound+detectSlack)
				}
			}
			due := outage.Pause + restart + holdBound // from the freeze
			if thaw := lastingBound + st.Hold; thaw < due+detectSlack {
				t.Errorf("seed %d, step %d: the guard thaws %v after its freeze, the promise is due at %v", seed, i+1, thaw, due)
			}
			if i+3 < len(s) {
				if next := s[i+3]; next.Join || next.Pause < restart-end.Pause+holdBound+detectSlack {
					t.Errorf("seed %d, step %d: %v follows the shape before its promise is due", seed, i+4, next)
				}
			}
		}
	}
	t.Logf("in 100 covered draws of 20 steps: %d frozen-guard shapes, %d guard kills before an outage", shapes, kills)
	if shapes < 20 || kills < 20 {
		t.Errorf("100 covered draws hold %d frozen-guard shapes and %d guard kills before an outage, want at least 20 of each", shapes, kills)
	}
	s, err := ParseSchedule("guard-freeze:300:5000@quiet+0+flowstated-outage:5500:300+vswitchd-kill:500:300")
	if err != nil || len(s) != 3 || s[0].Trigger != (Trigger{On: OnQuiet}) || s[0].Trigger.String() != "@quiet+0" {
		t.Fatalf("a shape read as %v, %v", s, err)
	}
}

// TestGenerateInside: covered draws hold vswitchd restarts inside every
// lasting kind, each landing while that kind is on (a kind lasts at least
// its Hold) and followed by nothing before its hold promise is tested;
// plain draws, CI's, hold none (they hold no @quiet step).
func TestGenerateInside(t *testing.T) {
	cov := NewCoverage()
	seen := map[FaultKind]int{}
	for seed := range uint64(100) {
		s := GenerateCovered(seed, 20, nil, cov)
		cov.Add(s, nil)
		for i, st := range s {
			if shapeAt(s, i) != "inside" || i+1 >= len(s) || isFinale(s, i+1) {
				continue // another shape, or cut by the finale
			}
			end := s[i+1]
			if !end.Join || !slices.Contains(restarters, end.Kind) || end.Pause < 100*time.Millisecond || end.Pause > st.Hold-400*time.Millisecond {
				t.Fatalf("seed %d: %v at step %d is followed by %v, not a restart inside its hold", seed, st, i+1, end)
			}
			if i+2 < len(s) {
				if next := s[i+2]; next.Join || next.Pause < holdBound+detectSlack {
					t.Errorf("seed %d, step %d: %v follows the restart before its promise is tested", seed, i+3, next)
				}
			}
			seen[st.Kind]++
		}
	}
	t.Logf("restarts inside a lasting kind in 100 covered draws of 20 steps: %v", seen)
	for _, k := range insideFaults {
		if seen[k] == 0 {
			t.Errorf("no restart drawn inside %s", k)
		}
	}
}

// TestGenerateFinale: every covered draw ends on a kind judged at rest,
// @quiet, the kinds taken in turn across runs; plain draws end on any
// kind and hold no @quiet step; a draw restricted to other kinds has none.
func TestGenerateFinale(t *testing.T) {
	cov := NewCoverage()
	for seed := range uint64(30) {
		s := GenerateCovered(seed, 20, nil, cov)
		if len(s) != 20 || !isFinale(s, 19) {
			t.Fatalf("seed %d: the covered draw ends on %v (%d steps), not a finale", seed, s[len(s)-1], len(s))
		}
		cov.Add(s, nil)
	}
	t.Logf("shapes of 30 covered draws: %v", cov.Shapes)
	for _, k := range restFaults {
		if n := cov.Shapes["finale:"+string(k)]; n != 30/len(restFaults) {
			t.Errorf("%s ended %d of 30 runs, want a third: the kinds take turns", k, n)
		}
	}
	if s := GenerateCovered(1, 20, []FaultKind{VswitchdKill, GuardKill}, NewCoverage()); isFinale(s, 19) || len(s) != 20 {
		t.Errorf("a draw of other kinds ends on a finale: %v", s[19])
	}
	if s := GenerateCovered(1, 1, nil, NewCoverage()); len(s) != 1 {
		t.Errorf("a one-step covered draw holds %d steps", len(s))
	}
}
