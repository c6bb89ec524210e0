package poison

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/store"
)

// testBridge is what a tracker needs of its bridge in these tests: the
// quarantine the held entries are put in, and the kicks of its replays.
type testBridge struct {
	quarantine map[string]bool
	kicks      int
}

func (b *testBridge) RequestReplay() { b.kicks++ }

func (b *testBridge) has(k string) bool { return b.quarantine[k] }

// noVswitchd is a vswitchd that is not running.
type noVswitchd struct{}

func (noVswitchd) Identity() string { return "" }

func testMetrics() Metrics {
	counter := func(name string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, labels)
	}
	gauge := func(name string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, labels)
	}
	return Metrics{Deaths: counter("deaths", "bridge"), Kills: counter("kills", "bridge"), Survived: counter("survived", "bridge"),
		Poisoned: gauge("poisoned", "bridge", "module", "entry"), Suspects: gauge("suspects", "bridge")}
}

// poisonEngine is a tracker over a fresh store holding n flows of module m
// on br-int, with no switch: the crash-loop protection is driven by hand.
func poisonEngine(t *testing.T, n int) (*Tracker, *testBridge, *store.Store, []entry.Entry) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg := Config{Crashes: st.Crashes(), Desired: st.Entries(), Vswitchd: noVswitchd{}, Evidence: NewEvidence(""),
		SurviveAfter: time.Second, CrashWindow: time.Minute, Metrics: testMetrics(), Logger: slog.New(slog.DiscardHandler)}
	b := &testBridge{quarantine: map[string]bool{}}
	es := putFlows(t, st, 0, n)
	return NewTracker(cfg, "br-int", b), b, st, es
}

// key is the key of an entry (kind | identity).
func key(k entry.Kind, id []byte) string { return string(append([]byte{byte(k)}, id...)) }

// flows encodes ovs-ofctl lines as flow entries.
func flows(t *testing.T, lines ...string) []entry.Entry {
	t.Helper()
	out := make([]entry.Entry, len(lines))
	for i, l := range lines {
		fm, err := ofctl.ParseFlow(l)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := fm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		payload, id, err := entry.Identify(entry.KindFlow, raw)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = entry.Entry{Kind: entry.KindFlow, ID: id, Payload: payload}
	}
	return out
}

func putFlows(t *testing.T, st *store.Store, from, n int) []entry.Entry {
	t.Helper()
	var es []entry.Entry
	for i := from; i < from+n; i++ {
		f := flows(t, fmt.Sprintf("table=1,priority=100,ip,nw_dst=10.0.%d.%d,actions=drop", i/256, i%256))[0]
		f.Module = "m"
		es = append(es, f)
	}
	if err := st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "m", es)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return es
}

// replayOnce plays one vswitchd start: the held entries are left out, and
// vswitchd dies if anything sent is bad. It reports whether it died.
func replayOnce(t *testing.T, e *Tracker, b *testBridge, bad map[string]bool) (died bool, held map[string]Held) {
	t.Helper()
	held, err := e.Held()
	if err != nil {
		t.Fatal(err)
	}
	clear(b.quarantine)
	for k := range held {
		b.quarantine[k] = true
	}
	for k := range bad {
		if _, out := held[k]; !out {
			died = true
		}
	}
	if died {
		if err := e.recordDeath(e.rec.Probe != nil, causeCrash, b.has, e.log); err != nil {
			t.Fatal(err)
		}
		return true, held
	}
	e.startWatch("1@x", -1, false)
	if err := e.Survived(b.has, e.log); err != nil {
		t.Fatal(err)
	}
	return false, held
}

// TestPoisonBisection drives the bisection (poison.go) against a store:
// after a survived replay, entries are added behind flowstated's back, some
// of which crash vswitchd. Whatever their number and place, the third
// start restores everything but the suspects, the bad ones end quarantined,
// every other is back, and the crashes stay within what bisection needs.
func TestPoisonBisection(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before, new int
		bad         []int // indexes among the new entries
	}{
		{"one new, bad", 50, 1, []int{0}},
		{"first of 16", 50, 16, []int{0}},
		{"last of 16", 50, 16, []int{15}},
		{"two of 33", 200, 33, []int{4, 20}},
		{"all of 3", 10, 3, []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, b, st, old := poisonEngine(t, tc.before)
			// A replay vswitchd survived.
			e.startWatch("1@x", -1, false)
			if err := e.Survived(b.has, e.log); err != nil {
				t.Fatal(err)
			}
			added := putFlows(t, st, 10_000, tc.new)
			bad := map[string]bool{}
			for _, i := range tc.bad {
				bad[key(entry.KindFlow, added[i].ID)] = true
			}
			// Two starts crash.
			for i := range 2 {
				if died, _ := replayOnce(t, e, b, bad); !died {
					t.Fatalf("start %d did not crash", i+1)
				}
			}
			// The third restores every old entry.
			died, held := replayOnce(t, e, b, bad)
			if died {
				t.Fatal("the third start crashed")
			}
			// Those not held out include every old entry, except those
			// sharing a digest bucket with a new one.
			changed := map[int]bool{}
			for _, a := range added {
				changed[digestBucket([]byte(key(entry.KindFlow, a.ID)))] = true
			}
			collide := 0
			for _, o := range old {
				k := key(entry.KindFlow, o.ID)
				if _, out := held[k]; out && !changed[digestBucket([]byte(k))] {
					t.Fatalf("an entry unchanged since the survived replay, in an unchanged bucket, is held out")
				} else if out {
					collide++
				}
			}
			t.Logf("%d of %d old entries held out with the new ones (they share a digest bucket)", collide, len(old))
			crashes := 0
			for start := 0; len(e.rec.Suspects) > 0; start++ {
				if start > 100 {
					t.Fatalf("bisection not over after 100 starts: %+v", e.rec)
				}
				if died, _ := replayOnce(t, e, b, bad); died {
					crashes++
				}
			}
			_, held = replayOnce(t, e, b, bad)
			if len(held) != len(bad) || len(e.rec.Poisoned) != len(bad) {
				t.Fatalf("held %d, poisoned %d, want the %d bad ones", len(held), len(e.rec.Poisoned), len(bad))
			}
			for k := range bad {
				if held[k].Reason != ReasonPoisoned || !e.Crashed(k) {
					t.Fatalf("a bad entry is not held as poisoned: %+v", held[k])
				}
			}
			limit := 0
			for n := tc.new; n > 1; n = (n + 1) / 2 {
				limit++
			}
			limit = len(bad) * (limit + 1)
			t.Logf("%d new, %d bad: %d crashes while bisecting (bound %d)", tc.new, len(bad), crashes, limit)
			if crashes > limit {
				t.Fatalf("%d crashes while bisecting, want at most %d", crashes, limit)
			}

			// Durable: a new engine over the same store holds them too.
			e2 := NewTracker(e.cfg, "br-int", &testBridge{quarantine: map[string]bool{}})
			if held, err := e2.Held(); err != nil || len(held) != len(bad) {
				t.Fatalf("after a restart held %d (%v), want %d", len(held), err, len(bad))
			}
			// A module that changes a poisoned entry lifts its quarantine.
			for _, i := range tc.bad {
				f := added[i]
				f.Payload = flows(t, fmt.Sprintf("table=1,priority=100,ip,nw_dst=10.0.%d.%d,actions=normal", (10_000+i)/256, (10_000+i)%256))[0].Payload
				if err := st.Update(func(w *store.Writer) error {
					_, err := w.Put("br-int", "m", []entry.Entry{f})
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			if held, err := e2.Held(); err != nil || len(held) != 0 {
				t.Fatalf("after the module changed them held %d (%v), want none", len(held), err)
			}
		})
	}
}

// TestPoisonNoDigest: without a survived replay to compare with, the
// second death holds out every entry.
func TestPoisonNoDigest(t *testing.T) {
	e, b, _, es := poisonEngine(t, 8)
	bad := map[string]bool{key(entry.KindFlow, es[5].ID): true}
	for range 2 {
		if died, _ := replayOnce(t, e, b, bad); !died {
			t.Fatal("a start did not crash")
		}
	}
	if died, held := replayOnce(t, e, b, bad); died || len(held) != len(es) {
		t.Fatalf("third start: died %v, held %d, want every one of %d held", died, len(held), len(es))
	}
	for len(e.rec.Suspects) > 0 {
		replayOnce(t, e, b, bad)
	}
	if len(e.rec.Poisoned) != 1 || !e.Crashed(key(entry.KindFlow, es[5].ID)) {
		t.Fatalf("poisoned %+v, want entry 5", e.rec.Poisoned)
	}
}
