package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Why clusters. The frozen-guard fault of round 2 was missed by minutes of
// fresh seeds of single steps and found in 23 s by
// guard-freeze:300:300,flowstated-outage:5500:300,vswitchd-kill:500:300:
// two lasting faults and a vswitchd restart inside both, with gaps that
// matter. 5.5 s is past guardDetect (4.6 s: flowstated must have seen the
// frozen guard, or the harness excuses the hold as a window nobody can
// close), and short enough for both faults (22 s each) to still be on when
// vswitchd restarts 0.5 s later, the moment the promise is tested. A draw
// of single steps over 21 kinds lands that order with those gaps about
// once in thousands of steps. So a schedule is drawn as clusters of one to
// three kinds in quick succession, whose gaps are short (a kind lands on
// the one before), medium, or just past guardDetect (flowstated has
// reacted to the first); the last step of a longer cluster is a vswitchd
// restart half of the time; and a share of the steps is timed to land
// inside a replay or a resync (Trigger).

// Cluster shapes: sizes 1, 2 and 3 in 5:3:2 (covered draws: coveredSizes); a trigger on triggerPct of
// the steps, on replayAfterRestartPct of the steps that follow a vswitchd
// restart in their cluster (whose replay they then land in).
const (
	triggerPct            = 12
	replayAfterRestartPct = 40
)

// Quiet pauses, in covered draws only (the -duration loop; CI's plain
// draws are unchanged): quietPct of the clusters begin after quietMin plus
// up to 4 s in which no fault step begins or ends, while the writers and
// the proxied controller's resyncs go on. barrier-delay (5 s + 2 s, and
// excused near any step's edge) is tested only in such a window; back to
// back clusters left none, and fresh seeds missed issue 31's held change.
const (
	quietPct = 15
	quietMin = 9 * time.Second
)

// restarters are the kinds that end a cluster half of the time: a vswitchd
// start is when every hold and deny promise is tested.
var restarters = []FaultKind{VswitchdKill, VswitchdTerm}

// generate draws n steps from seed, cluster by cluster, so a shorter
// schedule is the prefix of a longer one. With cov, each kind is weighted
// by 1/(1+count) of the cluster so far followed by it in cov and in what
// this draw already holds: kinds, ordered pairs and triples not run yet
// come first; a share of the clusters are shapes drawn on purpose
// (shapes.go), and the last step is a finale (so a shorter covered
// schedule is a prefix of a longer one but for its last step).
func generate(seed uint64, n int, kinds []FaultKind, cov *Coverage) Schedule {
	if len(kinds) == 0 {
		kinds = AllFaults
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	if cov != nil {
		cov = cov.clone()
	}
	in := func(ks []FaultKind) []FaultKind {
		return slices.DeleteFunc(slices.Clone(ks), func(k FaultKind) bool { return !slices.Contains(kinds, k) })
	}
	ends, guards, outages, lasting, rest := in(restarters), in(detectGuards), in(detectOutages), in(insideFaults), in(restFaults)
	body := n
	if cov != nil && len(rest) > 0 && n > 1 {
		body-- // the finale
	}
	var s Schedule
	var settle time.Duration // the least pause before the next cluster (detectionGap, insideRestart)
	for len(s) < body {
		if cov != nil && len(ends) > 0 && len(guards) > 0 && len(outages) > 0 && r.IntN(100) < detectPct {
			shape, after := detectionGap(r, guards, outages, ends, cov, max(time.Duration(200+r.IntN(1800))*time.Millisecond, settle))
			settle = after
			s = append(s, shape...)
			cov.addCluster([]FaultKind{shape[0].Kind, shape[1].Kind, shape[2].Kind})
			cov.Shapes["detect:"+string(shape[0].Kind)]++
			continue
		}
		if cov != nil && len(ends) > 0 && slices.Contains(kinds, VswitchdKill) && r.IntN(100) < crashLoopPct {
			loop := crashLoop(r, ends, max(time.Duration(200+r.IntN(1800))*time.Millisecond, settle))
			settle = 0
			var cluster []FaultKind
			for _, st := range loop {
				cluster = append(cluster, st.Kind)
			}
			s = append(s, loop...)
			cov.addCluster(cluster)
			continue
		}
		if cov != nil && len(ends) > 0 && len(lasting) > 0 && r.IntN(100) < insidePct {
			shape, after := insideRestart(r, lasting, ends, cov, max(time.Duration(200+r.IntN(1800))*time.Millisecond, settle))
			settle = after
			s = append(s, shape...)
			cov.addCluster([]FaultKind{shape[0].Kind, shape[1].Kind})
			cov.Shapes["inside:"+string(shape[0].Kind)]++
			continue
		}
		sizes := []int{1, 1, 1, 1, 1, 2, 2, 2, 3, 3}
		if cov != nil {
			sizes = coveredSizes
		}
		size := sizes[r.IntN(10)]
		var cluster []FaultKind
		for j := range size {
			cands := kinds
			if j == size-1 && j > 0 && len(ends) > 0 && r.IntN(2) == 0 {
				cands = ends
			}
			k := pick(r, cands, func(k FaultKind) float64 {
				if cov == nil {
					return 1
				}
				return 1 / float64(1+cov.count(append(slices.Clone(cluster), k)))
			})
			st := Step{Kind: k, Join: j > 0, Hold: time.Duration(300+r.IntN(2200)) * time.Millisecond}
			if j == 0 {
				// One cluster in five follows the last closely.
				st.Pause = time.Duration(200+r.IntN(1800)) * time.Millisecond
				if r.IntN(5) == 0 {
					st.Pause = time.Duration(20+r.IntN(180)) * time.Millisecond
				}
				if cov != nil && r.IntN(100) < quietPct {
					st.Pause = quietMin + time.Duration(r.IntN(4000))*time.Millisecond
				}
				st.Pause, settle = max(st.Pause, settle), 0
			} else {
				st.Pause = gap(r)
			}
			pct := triggerPct
			if j > 0 && slices.Contains(restarters, cluster[j-1]) {
				pct = replayAfterRestartPct
			}
			if r.IntN(100) < pct {
				st.Trigger = Trigger{On: OnReplay, Offset: time.Duration(r.IntN(300)) * time.Millisecond}
				if r.IntN(3) == 0 {
					st.Trigger = Trigger{On: OnResync, Offset: time.Duration(r.IntN(4000)) * time.Millisecond}
				}
			}
			s = append(s, st)
			cluster = append(cluster, k)
		}
		if cov != nil {
			cov.addCluster(cluster)
		}
	}
	s = s[:body]
	if body < n {
		st := finale(r, rest, cov)
		st.Pause = max(st.Pause, settle)
		s = append(s, st)
	}
	return s
}

// gap draws the pause between two steps of a cluster: short (the second
// lands on the first), medium, or just past guardDetect (flowstated has
// reacted to the first, the first is still on).
func gap(r *rand.Rand) time.Duration {
	switch p := r.IntN(20); {
	case p < 8:
		return time.Duration(20+r.IntN(180)) * time.Millisecond
	case p < 14:
		return time.Duration(200+r.IntN(800)) * time.Millisecond
	default:
		return guardDetect + time.Duration(r.IntN(2500))*time.Millisecond
	}
}

// pick draws one of cands with probability proportional to weight.
func pick(r *rand.Rand, cands []FaultKind, weight func(FaultKind) float64) FaultKind {
	ws := make([]float64, len(cands))
	total := 0.0
	for i, k := range cands {
		ws[i] = weight(k)
		total += ws[i]
	}
	x := r.Float64() * total
	for i, w := range ws {
		if x < w {
			return cands[i]
		}
		x -= w
	}
	return cands[len(cands)-1]
}

// GenerateCovered draws like Generate, weighting each kind toward what cov
// has not seen run yet (see generate). It is deterministic in (seed, n,
// kinds, cov) and does not change cov.
func GenerateCovered(seed uint64, n int, kinds []FaultKind, cov *Coverage) Schedule {
	if cov == nil {
		cov = NewCoverage()
	}
	return generate(seed, n, kinds, cov)
}

// Coverage counts what ran: each kind, and within each cluster every
// ordered pair and triple of its kinds (keys joined by ">"). The
// -duration loop of flowstate-chaos keeps one across its runs, and may
// keep it in a file between loops.
type Coverage struct {
	Kinds   map[string]int `json:"kinds"`
	Pairs   map[string]int `json:"pairs"`
	Triples map[string]int `json:"triples"`
	// Shapes counts the shapes drawn on purpose that ran, by shape and
	// kind ("finale:lease-unlink", "inside:protocols-flip": shapeAt).
	Shapes map[string]int `json:"shapes,omitempty"`
}

// NewCoverage returns an empty Coverage.
func NewCoverage() *Coverage {
	return &Coverage{Kinds: map[string]int{}, Pairs: map[string]int{}, Triples: map[string]int{}, Shapes: map[string]int{}}
}

func (c *Coverage) clone() *Coverage {
	return &Coverage{Kinds: cloneCounts(c.Kinds), Pairs: cloneCounts(c.Pairs), Triples: cloneCounts(c.Triples), Shapes: cloneCounts(c.Shapes)}
}

func cloneCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func tupleKey(ks ...FaultKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ">")
}

// count is how often the tuple (a kind, an ordered pair or a triple) ran.
func (c *Coverage) count(tuple []FaultKind) int {
	switch len(tuple) {
	case 1:
		return c.Kinds[tupleKey(tuple...)]
	case 2:
		return c.Pairs[tupleKey(tuple...)]
	case 3:
		return c.Triples[tupleKey(tuple...)]
	}
	return 0
}

// addCluster counts the kinds of one cluster, its ordered pairs (every
// earlier kind before a later one) and its triples.
func (c *Coverage) addCluster(ks []FaultKind) {
	// Kinds drawn only in crash loops are not weighed: left out.
	ks = slices.DeleteFunc(slices.Clone(ks), func(k FaultKind) bool { return slices.Contains(loopFaults, k) })
	for i, a := range ks {
		c.Kinds[string(a)]++
		for j := i + 1; j < len(ks); j++ {
			c.Pairs[tupleKey(a, ks[j])]++
			for l := j + 1; l < len(ks); l++ {
				c.Triples[tupleKey(a, ks[j], ks[l])]++
			}
		}
	}
}

// Add counts the steps of s that ran (ran(i) for the i-th, 0-based; nil:
// all), cluster by cluster.
func (c *Coverage) Add(s Schedule, ran func(int) bool) {
	var cluster []FaultKind
	for i, st := range s {
		if !st.Join && len(cluster) > 0 {
			c.addCluster(cluster)
			cluster = nil
		}
		if ran == nil || ran(i) {
			cluster = append(cluster, st.Kind)
			if shape := shapeAt(s, i); shape != "" {
				c.Shapes[shape+":"+string(st.Kind)]++
			}
		}
	}
	c.addCluster(cluster)
}

// Summary says how much of kinds (default AllFaults) ran: kinds, ordered
// pairs and triples covered of all.
func (c *Coverage) Summary(kinds []FaultKind) string {
	if len(kinds) == 0 {
		kinds = AllFaults
	}
	var k, p, t int
	for _, a := range kinds {
		if c.Kinds[string(a)] > 0 {
			k++
		}
		for _, b := range kinds {
			if c.Pairs[tupleKey(a, b)] > 0 {
				p++
			}
			for _, d := range kinds {
				if c.Triples[tupleKey(a, b, d)] > 0 {
					t++
				}
			}
		}
	}
	n := len(kinds)
	return fmt.Sprintf("kinds %d/%d, ordered pairs %d/%d, ordered triples %d/%d", k, n, p, n*n, t, n*n*n)
}

// LoadCoverage reads a Coverage saved by Save; a missing file is an empty
// Coverage.
func LoadCoverage(path string) (*Coverage, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return NewCoverage(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: coverage: %w", err)
	}
	c := NewCoverage()
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("chaos: coverage %s: %w", path, err)
	}
	for _, m := range []*map[string]int{&c.Kinds, &c.Pairs, &c.Triples, &c.Shapes} {
		if *m == nil {
			*m = map[string]int{}
		}
	}
	return c, nil
}

// Save writes c to path (a temporary file renamed over it).
func (c *Coverage) Save(path string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keys hold ">"
	enc.SetIndent("", " ")
	if err := enc.Encode(c); err != nil {
		return fmt.Errorf("chaos: coverage: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("chaos: coverage: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("chaos: coverage: %w", err)
	}
	return nil
}
