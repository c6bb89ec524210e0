package canon

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// cacheFlows are encoded flows whose action lists repeat across match
// values and tables (the corpora's and the generated CNI pipeline's), and
// flows whose lists all differ but whose single actions repeat (the
// generated bench pipeline's).
func cacheFlows(t *testing.T) [][]byte {
	ps := encoded(t, append(append(antreaFlows(t), cniFlows(3000)...), pipelineFlows(4000)...))
	for _, l := range corpusLines(t, "../ofctl/testdata/flows.txt") {
		if p, _, err := Parse(entry.KindFlow, l); err == nil {
			ps = append(ps, p, reversedMatch(t, p))
		}
	}
	return ps
}

// TestListCacheSameResults: canonicalising flows from many goroutines at
// once through shared caches (of lists and actions, of actions alone) gives
// what canonicalising them one by one without a cache gives, byte for
// byte, kept flags and errors included.
func TestListCacheSameResults(t *testing.T) {
	ps := cacheFlows(t)
	type result struct {
		out  []byte
		kept bool
		err  string
	}
	run := func(p []byte, cache flowCaches) result {
		var r result
		b, _, err := entry.Identify(entry.KindFlow, p)
		if err == nil {
			b, err = canonicalFlowCached(b, &r.kept, cache)
		}
		r.out = b
		if err != nil {
			r.err = err.Error()
		}
		return r
	}
	want := make([]result, len(ps))
	for i, p := range ps {
		want[i] = run(p, flowCaches{})
	}
	for _, tc := range []struct {
		name  string
		cache flowCaches
	}{
		{"lists and actions", flowCaches{lists: newListCache(), actions: newListCache()}},
		{"actions", flowCaches{actions: newListCache()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for k := range 3 * len(ps) {
						i := (k*7 + g*131) % len(ps)
						if got := run(ps[i], tc.cache); !bytes.Equal(got.out, want[i].out) || got.kept != want[i].kept || got.err != want[i].err {
							t.Errorf("flow %d: cached %x (kept %v, %q), uncached %x (kept %v, %q)", i, got.out, got.kept, got.err, want[i].out, want[i].kept, want[i].err)
							return
						}
					}
				})
			}
			wg.Wait()
			for _, c := range []*listCache{tc.cache.lists, tc.cache.actions} {
				if c != nil && c.len() == 0 {
					t.Error("nothing was cached")
				}
			}
		})
	}
}

// TestListCacheBound: however many distinct lists or actions go through
// it, the cache holds at most cacheShards*cacheShardLimit of them.
func TestListCacheBound(t *testing.T) {
	const bound = cacheShards * cacheShardLimit
	cache := newListCache()
	for i := range 3 * bound {
		key := fmt.Appendf(nil, "list %d", i)
		cache.put(key, key, false)
		if n := cache.len(); n > bound {
			t.Fatalf("%d lists cached after %d puts, bound %d", n, i+1, bound)
		}
		if l, ok := cache.get(key); !ok || !bytes.Equal(l.acts, key) {
			t.Fatalf("list %d not cached right after its put", i)
		}
	}
	// offer caches a key the second time it is offered.
	cache = newListCache()
	for i := range 3 * bound {
		key := fmt.Appendf(nil, "entry %d", i)
		h := cache.hash(key)
		cache.offer(h, key, key, true)
		if _, ok := cache.get(key); ok {
			t.Fatalf("entry %d cached on its first offer", i)
		}
		cache.offer(h, key, key, true)
		if l, ok := cache.get(key); !ok || !bytes.Equal(l.acts, key) || !l.kept {
			t.Fatalf("entry %d not cached on its second offer", i)
		}
		if n := cache.len(); n > bound {
			t.Fatalf("%d entries cached after %d offers, bound %d", n, 2*(i+1), bound)
		}
	}
	// Distinct flows whose lists and actions all differ, each seen twice,
	// stay within it too.
	caches := flowCaches{lists: newListCache(), actions: newListCache()}
	for i := range 2 * bound {
		p, _, err := Parse(entry.KindFlow, fmt.Sprintf("table=1,ip,actions=set_field:%#x/0xffff->reg1,set_field:%#x/0xf->reg2,goto_table:2", i+1, i%7))
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := entry.Identify(entry.KindFlow, p)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			var kept bool
			if _, err := canonicalFlowCached(b, &kept, caches); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []*listCache{caches.lists, caches.actions} {
		if n := c.len(); n == 0 || n > bound {
			t.Fatalf("%d entries cached, want 1 to %d", n, bound)
		}
	}
}
