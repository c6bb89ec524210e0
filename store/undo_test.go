package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// rawDump lists every bucket and key of s with its bytes, nested buckets by
// path: what an undo must leave exactly as it was.
func rawDump(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	var walk func(path string, b *bolt.Bucket) error
	walk = func(path string, b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				out = append(out, fmt.Sprintf("%s/%x/", path, k))
				return walk(fmt.Sprintf("%s/%x", path, k), b.Bucket(k))
			}
			out = append(out, fmt.Sprintf("%s/%x = %x", path, k, v))
			return nil
		})
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			out = append(out, fmt.Sprintf("%s/", name))
			return walk(string(name), b)
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUndoPlannedRestoresTheStore: PutPlanned then UndoPlanned, each in its
// own transaction, leaves every byte of the store as it was, entries and
// refs index, over random requests (new, changed and unchanged flows, flows
// moving between groups and meters) on a bridge that other modules share, a
// record that was damaged, several plans undone at once, and a bridge the
// write created.
func TestUndoPlannedRestoresTheStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 12 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			s := openTest(t)
			sc := newSharedCase(rng, nil)
			sc.load(t, s)
			if round%3 == 1 && len(sc.before) > 0 {
				// A damaged record the request replaces.
				e := sc.before[0]
				sc.req = append(sc.req[:0:0], append(sc.req, e)...)
				if err := s.db.Update(func(tx *bolt.Tx) error {
					kb := tx.Bucket(bucketBridges).Bucket([]byte("br0")).Bucket(kindBuckets[entry.KindFlow])
					return kb.Put(e.ID, []byte{recordVersion, 1, 'a', 'x', 0, 0, 0, 0})
				}); err != nil {
					t.Fatal(err)
				}
				sc.req = dedupe(sc.req)
			}
			before := rawDump(t, s)
			k := 1 + round%4 // plans undone together
			var plans []PutPlan
			for i := range k {
				part := sc.req[i*len(sc.req)/k : (i+1)*len(sc.req)/k]
				p, err := s.Entries().PlanPut("br0", "a", part)
				if err != nil {
					t.Fatal(err)
				}
				plans = append(plans, p)
			}
			if err := s.Update(func(w *Writer) error { return w.PutPlanned(plans...) }); err != nil {
				t.Fatal(err)
			}
			if after := rawDump(t, s); fmt.Sprint(after) == fmt.Sprint(before) {
				t.Fatal("PutPlanned changed nothing: the case tests no undo")
			}
			if err := s.Update(func(w *Writer) error { return w.UndoPlanned(plans...) }); err != nil {
				t.Fatal(err)
			}
			sameLines(t, rawDump(t, s), before)
		})
	}
	t.Run("new bridge", func(t *testing.T) {
		s := openTest(t)
		before := rawDump(t, s)
		p, err := s.Entries().PlanPut("br9", "a", []entry.Entry{flow("a", 1, 1, "x"), flow("a", 1, 2, "y")})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(func(w *Writer) error { return w.PutPlanned(p) }); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(func(w *Writer) error { return w.UndoPlanned(p) }); err != nil {
			t.Fatal(err)
		}
		sameLines(t, rawDump(t, s), before)
	})
}

// dedupe keeps the last entry of each identity of es, in order.
func dedupe(es []entry.Entry) []entry.Entry {
	last := map[string]int{}
	for i, e := range es {
		last[string(e.ID)] = i
	}
	var out []entry.Entry
	for i, e := range es {
		if last[string(e.ID)] == i {
			out = append(out, e)
		}
	}
	return out
}
