package poison

import (
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// TestBisectionNamesOnlyWhatDied (issue 31): vswitchd killed from outside
// twice during replays, and again during some probes, when nothing in the
// store crashes it. The bisection restores every entry and names none: an
// entry is named only when a probe that sent it alone died (which only a
// kill landing on exactly that probe, with no evidence to read, could fake).
func TestBisectionNamesOnlyWhatDied(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		survived bool // a replay vswitchd survived before the deaths
		kills    int  // probes killed from outside too, the first ones
		cause    deathCause
	}{
		{"two kills, no digest", 150, false, 0, causeUnknown},
		{"two kills after a survived replay", 150, true, 0, causeUnknown},
		{"kills during probes too", 150, true, 5, causeUnknown},
		{"one entry", 1, false, 0, causeUnknown},
		// Deaths read as crashes are trusted (an entry then costs two
		// crashes, TestCrashLoopBroken): a misread is not covered here.
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, b, _, es := poisonEngine(t, tc.n)
			if tc.survived {
				e.startWatch("1@x", -1, false)
				if err := e.Survived(b.has, e.log); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				if err := e.recordDeath(false, tc.cause, b.has, e.log); err != nil {
					t.Fatal(err)
				}
			}
			if len(e.rec.Suspects) == 0 {
				t.Fatal("two deaths drew no suspects")
			}
			kills := tc.kills
			for start := 0; len(e.rec.Suspects) > 0; start++ {
				if start > 200 {
					t.Fatalf("bisection not over after 200 starts: %+v", e.rec)
				}
				if kills > 0 && e.rec.Probe != nil {
					kills--
					if err := e.recordDeath(true, tc.cause, b.has, e.log); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if died, _ := replayOnce(t, e, b, nil); died {
					t.Fatal("a harmless replay died")
				}
				if p := e.rec.Poisoned; len(p) > 0 {
					t.Fatalf("start %d: %q named as crashing vswitchd, though no probe of it died", start, p[0].Name)
				}
			}
			if kills > 0 {
				t.Fatalf("%d kills left: the bisection ended before they were spent", kills)
			}
			if _, held := replayOnce(t, e, b, nil); len(held) != 0 || len(e.rec.Poisoned) != 0 {
				t.Fatalf("after the bisection %d of %d entries held out, %d named", len(held), len(es), len(e.rec.Poisoned))
			}
			for _, f := range es {
				if e.Crashed(key(entry.KindFlow, f.ID)) {
					t.Fatal("a harmless entry is named")
				}
			}
		})
	}
}
