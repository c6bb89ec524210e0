package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// smallStages makes s's spool runs and staging transactions a few entries
// long, so that small requests cross many of both.
func smallStages(s *Store) *Store {
	s.spoolRunEntries, s.stageChunk = 7, 5
	return s
}

// dumpStore lists every entry of s as text, with the refs index.
func dumpStore(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	if err := s.Entries().List(Filter{}, func(bridge string, e entry.Entry) error {
		out = append(out, fmt.Sprintf("%s %s %s %x %q", bridge, e.Kind, e.Module, e.ID, e.Payload))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBridges).ForEachBucket(func(name []byte) error {
			rb := tx.Bucket(bucketBridges).Bucket(name).Bucket(bucketRefs)
			if rb == nil {
				return nil
			}
			return rb.ForEach(func(k, v []byte) error {
				out = append(out, fmt.Sprintf("%s ref %x %s", name, k, v))
				return nil
			})
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func spoolOf(t *testing.T, s *Store, es []entry.Entry) *Spool {
	t.Helper()
	sp, err := s.Staging().NewSpool()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	// In pieces, as a stream arrives.
	for len(es) > 0 {
		n := min(len(es), 3)
		if err := sp.Add(es[:n]); err != nil {
			t.Fatal(err)
		}
		es = es[n:]
	}
	return sp
}

func stageAndCommit(t *testing.T, s *Store, w StagedWrite) (*Staged, error) {
	t.Helper()
	st, err := s.Staging().Stage(w)
	if err != nil {
		return nil, err
	}
	return st, st.Commit()
}

func noStage(t *testing.T, s *Store) {
	t.Helper()
	if err := s.db.View(func(tx *bolt.Tx) error {
		if root := tx.Bucket(bucketStage); root != nil && root.Stats().BucketN > 1 {
			return fmt.Errorf("staged buckets left: %d", root.Stats().BucketN-1)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestStagedSameAsInMemory: a staged Put or Sync leaves exactly the store
// (entries and refs index) the usual Put or Sync leaves, and reports the
// same changes, over random requests on a bridge that other modules share.
func TestStagedSameAsInMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		sync := round%2 == 1
		t.Run(fmt.Sprintf("%s-%d", opName(sync), round), func(t *testing.T) {
			usual, staged := smallStages(openTest(t)), smallStages(openTest(t))
			sc := newSharedCase(rng, nil)
			req := sc.req
			sc.load(t, usual, staged)
			want, err := usualWrite(usual, sync, req)
			if err != nil {
				t.Fatal(err)
			}
			var changed []Change
			var removed []entry.Entry
			st, err := stageAndCommit(t, staged, StagedWrite{Bridge: "br0", Module: "a", Sync: sync, Spool: spoolOf(t, staged, req),
				Changed: func(c Change) { changed = append(changed, c) },
				Removed: func(e entry.Entry) { removed = append(removed, e) }})
			if err != nil {
				t.Fatal(err)
			}
			sameLines(t, dumpStore(t, staged), dumpStore(t, usual))
			noStage(t, staged)
			sameChanges(t, changed, want.Changed)
			if len(removed) != len(want.Removed) || st.Removed != len(removed) {
				t.Errorf("removed %d (counted %d), the usual Sync %d", len(removed), st.Removed, len(want.Removed))
			}
			if st.Added+st.Changed != len(changed) {
				t.Errorf("counted %d added + %d changed, reported %d", st.Added, st.Changed, len(changed))
			}
		})
	}
}

// usualWrite is req written by module a on br0 in memory, as a Put or Sync.
func usualWrite(s *Store, sync bool, req []entry.Entry) (Result, error) {
	var r Result
	err := s.Update(func(w *Writer) error {
		var err error
		if sync {
			r, err = w.Sync("br0", "a", req)
		} else {
			r, err = w.Put("br0", "a", req)
		}
		return err
	})
	return r, err
}

// sharedCase is a random bridge that modules "a" and "b" share, with the
// groups and meter of module "lb" that their flows use, and a request of
// module "a" over it: some of its flows new, some stored the same, some
// changed, in no order.
type sharedCase struct {
	groups, before, other, req []entry.Entry
}

// newSharedCase draws a sharedCase; edit, if set, may change the request
// before it is shuffled.
func newSharedCase(rng *rand.Rand, edit func(c *sharedCase)) sharedCase {
	mk := func(module string, i, version int) entry.Entry {
		e := flow(module, byte(i%4), byte(i), fmt.Sprintf("m%03d", i))
		e.Payload = fmt.Appendf(nil, "v%d-%d", version, i)
		switch i % 5 {
		case 0:
			e = withRef(e, entry.KindGroup, uint32(1+version%2))
		case 1:
			e = withRef(e, entry.KindMeter, 3)
		}
		return e
	}
	c := sharedCase{groups: []entry.Entry{groupOrMeter(entry.KindGroup, 1), groupOrMeter(entry.KindGroup, 2), groupOrMeter(entry.KindMeter, 3)}}
	for i := range 60 {
		switch rng.IntN(3) {
		case 0:
			c.before = append(c.before, mk("a", i, 0))
		case 1:
			c.other = append(c.other, mk("b", i+1000, 0))
		}
	}
	for i := range 60 {
		if rng.IntN(3) > 0 {
			c.req = append(c.req, mk("a", i, rng.IntN(2)))
		}
	}
	if edit != nil {
		edit(&c)
	}
	rng.Shuffle(len(c.req), func(i, j int) { c.req[i], c.req[j] = c.req[j], c.req[i] })
	return c
}

// load stores c's bridge (not the request) in each of stores.
func (c sharedCase) load(t *testing.T, stores ...*Store) {
	t.Helper()
	for _, s := range stores {
		for _, p := range []struct {
			m  string
			es []entry.Entry
		}{{"lb", c.groups}, {"a", c.before}, {"b", c.other}} {
			if len(p.es) > 0 {
				if err := s.Entries().Put("br0", p.m, p.es, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// sameLines fails with the first line where got and want differ.
func sameLines(t *testing.T, got, want []string) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("line %d of %d: staged %q, usual %q", i, len(want), g, w)
		}
	}
}

func sameChanges(t *testing.T, got, want []Change) {
	t.Helper()
	key := func(c Change) string {
		return fmt.Sprintf("%d %x %q %d %v", c.Entry.Kind, c.Entry.ID, c.Entry.Payload, c.Index, c.Existed)
	}
	g, w := make([]string, len(got)), make([]string, len(want))
	for i, c := range got {
		g[i] = key(c)
	}
	for i, c := range want {
		w[i] = key(c)
	}
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Errorf("staged changes:\n%q\nusual:\n%q", g, w)
	}
}

// TestStagedRefusals: a staged write that fails (an identity another module
// owns, a duplicate, a group nobody declared) names the entry by its place in
// the request, leaves the store as it was and nothing staged.
func TestStagedRefusals(t *testing.T) {
	many := func(module string, n int) []entry.Entry {
		var es []entry.Entry
		for i := range n {
			es = append(es, flow(module, 1, byte(i), fmt.Sprintf("f%03d", i)))
		}
		return es
	}
	for _, tc := range []struct {
		name  string
		req   func() []entry.Entry
		index int
		is    error
	}{
		{"owned by another module", func() []entry.Entry {
			es := many("a", 30)
			es[17] = flow("a", 0, 9, "other")
			return es
		}, 17, errdefs.ErrFailedPrecondition},
		{"duplicate", func() []entry.Entry {
			es := many("a", 30)
			es[23] = es[4]
			return es
		}, 23, errdefs.ErrInvalidArgument},
		{"undeclared group", func() []entry.Entry {
			es := many("a", 30)
			es[11] = withRef(es[11], entry.KindGroup, 77)
			return es
		}, 11, errdefs.ErrFailedPrecondition},
	} {
		for _, sync := range []bool{false, true} {
			t.Run(tc.name+"/"+opName(sync), func(t *testing.T) {
				s := smallStages(openTest(t))
				if err := s.Entries().Put("br0", "b", []entry.Entry{flow("b", 0, 9, "other")}, nil); err != nil {
					t.Fatal(err)
				}
				if err := s.Entries().Put("br0", "a", many("a", 40)[25:], nil); err != nil {
					t.Fatal(err)
				}
				before := dumpStore(t, s)
				_, err := s.Staging().Stage(StagedWrite{Bridge: "br0", Module: "a", Sync: sync, Spool: spoolOf(t, s, tc.req())})
				var ee *errdefs.EntryError
				if !errors.As(err, &ee) || ee.Index != tc.index || !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want entry %d: %v", err, tc.index, tc.is)
				}
				if got := dumpStore(t, s); !slices.Equal(got, before) {
					t.Errorf("store changed:\n%q\nwas\n%q", got, before)
				}
				noStage(t, s)
			})
		}
	}
}

// TestStagedNonFlowsSameAsInMemory: with groups and meters in the request
// and on the bridge (module "a" owns some, flows of "a" and "b" use them), a
// staged Put or Sync leaves the store the usual write leaves, or fails as it
// fails (an undeclared or removed group a flow uses, a group still in use, a
// duplicate, a group another module owns), and nothing staged.
func TestStagedNonFlowsSameAsInMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	version := func(e entry.Entry, v int) entry.Entry {
		e.Payload = fmt.Appendf(e.Payload, " v%d", v)
		return e
	}
	outcomes := map[string]int{}
	for round := range 120 {
		sync := round%2 == 1
		t.Run(fmt.Sprintf("%s-%d", opName(sync), round), func(t *testing.T) {
			usual, staged := smallStages(openTest(t)), smallStages(openTest(t))
			// Module a owns groups 10-13 and meter 20 (some stored, some
			// declared by the request); lb owns group 1 and meter 3.
			var own, req []entry.Entry
			for _, id := range []uint32{10, 11, 12} {
				if rng.IntN(4) > 0 {
					own = append(own, groupOrMeter(entry.KindGroup, id))
				}
			}
			own = append(own, groupOrMeter(entry.KindMeter, 20))
			for _, id := range []uint32{10, 11, 12, 13} {
				if rng.IntN(3) > 0 {
					req = append(req, version(groupOrMeter(entry.KindGroup, id), rng.IntN(2)))
				}
			}
			if rng.IntN(2) == 0 {
				req = append(req, groupOrMeter(entry.KindMeter, 20))
			}
			declared := map[uint32]bool{}
			for _, e := range req {
				declared[binary.BigEndian.Uint32(e.ID)] = true
			}
			// The flows of a use only groups the request declares, but
			// now and then one that it does not. A duplicate is found first
			// by the usual write, as the staged one finds the flows'
			// refusals: a round with one has no other refusal.
			fault := rng.IntN(20)
			pick := func() (entry.Kind, uint32) {
				ids := []uint32{1}
				for id := range declared {
					if id != 20 {
						ids = append(ids, id)
					}
				}
				slices.Sort(ids)
				if fault != 0 && rng.IntN(25) == 0 {
					return entry.KindGroup, 10 + uint32(rng.IntN(4))
				}
				return entry.KindGroup, ids[rng.IntN(len(ids))]
			}
			var before, other []entry.Entry
			for i := range 40 {
				e := flow("a", byte(i%3), byte(i), fmt.Sprintf("a%03d", i))
				if rng.IntN(2) == 0 {
					k, id := pick()
					e = withRef(e, k, id)
				}
				switch rng.IntN(3) {
				case 0:
					before = append(before, e)
				case 1:
					req = append(req, e)
				default:
					before, req = append(before, e), append(req, e)
				}
			}
			for i := range 10 {
				e := flow("b", 3, byte(i), fmt.Sprintf("b%03d", i))
				if fault != 0 && rng.IntN(8) == 0 && len(own) > 1 {
					// Another module's flow that uses a's group.
					e = withRef(e, entry.KindGroup, binary.BigEndian.Uint32(own[rng.IntN(len(own)-1)].ID))
				}
				other = append(other, e)
			}
			switch fault {
			case 0:
				req = append(req, req[rng.IntN(len(req))]) // a duplicate
			case 1:
				req = append(req, groupOrMeter(entry.KindGroup, 1)) // lb's
			}
			rng.Shuffle(len(req), func(i, j int) { req[i], req[j] = req[j], req[i] })
			// Flows first, so that every flow's refs hold when it is loaded.
			for _, st := range []*Store{usual, staged} {
				for _, p := range []struct {
					m  string
					es []entry.Entry
				}{{"lb", []entry.Entry{groupOrMeter(entry.KindGroup, 1), groupOrMeter(entry.KindMeter, 3)}}, {"a", own}} {
					if err := st.Entries().Put("br0", p.m, p.es, nil); err != nil {
						t.Fatal(err)
					}
				}
				for _, p := range []struct {
					m  string
					es []entry.Entry
				}{{"a", before}, {"b", other}} {
					for _, e := range p.es {
						// One that uses a group a does not hold is not
						// loaded, in either store.
						_ = st.Entries().Put("br0", p.m, []entry.Entry{e}, nil)
					}
				}
			}
			want, werr := usualWrite(usual, sync, req)
			var changed []Change
			var removed []entry.Entry
			was := dumpStore(t, staged)
			st, gerr := stageAndCommit(t, staged, StagedWrite{Bridge: "br0", Module: "a", Sync: sync, Spool: spoolOf(t, staged, req),
				Changed: func(c Change) { changed = append(changed, c) },
				Removed: func(e entry.Entry) { removed = append(removed, e) }})
			noStage(t, staged)
			if werr != nil || gerr != nil {
				outcomes[errClass(werr)]++
				if errClass(gerr) != errClass(werr) {
					t.Fatalf("staged: %v\nusual:  %v", gerr, werr)
				}
				sameLines(t, dumpStore(t, staged), was)
				return
			}
			outcomes["stored"]++
			sameLines(t, dumpStore(t, staged), dumpStore(t, usual))
			changed = append(changed, st.plan.Changed...)
			removed = append(removed, st.plan.Removed...)
			sameChanges(t, changed, want.Changed)
			if len(removed) != len(want.Removed) || st.Removed != len(removed) {
				t.Errorf("removed %d (counted %d), the usual Sync %d", len(removed), st.Removed, len(want.Removed))
			}
			if st.Added+st.Changed != len(changed) {
				t.Errorf("counted %d added + %d changed, reported %d", st.Added, st.Changed, len(changed))
			}
		})
	}
	// The rounds must cover each outcome, or the test proves less than it
	// says.
	for _, o := range []string{"stored", "in use", "undeclared", "duplicate", "owned"} {
		if outcomes[o] == 0 {
			t.Errorf("no round ended %q: %v", o, outcomes)
		}
	}
}

// errClass names what kind of refusal err is, as the rounds above tell
// them apart.
func errClass(err error) string {
	var iu *InUseError
	switch {
	case err == nil:
		return "stored"
	case errors.As(err, &iu):
		return "in use"
	case strings.Contains(err.Error(), "no module declared"):
		return "undeclared"
	case strings.Contains(err.Error(), "same "):
		return "duplicate"
	case strings.Contains(err.Error(), "owned by"):
		return "owned"
	}
	return err.Error()
}

// TestStagedNeverCommitted: a flowstated that dies between Stage and Commit
// (or whose Commit never runs) leaves the store as it was; the next Open
// drops what was staged. Discard does the same at once.
func TestStagedNeverCommitted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	smallStages(s)
	if err := s.Entries().Put("br0", "a", []entry.Entry{flow("a", 0, 1, "kept")}, nil); err != nil {
		t.Fatal(err)
	}
	before := dumpStore(t, s)
	var req []entry.Entry
	for i := range 50 {
		req = append(req, flow("a", 2, byte(i), fmt.Sprint(i)))
	}
	st, err := s.Staging().Stage(StagedWrite{Bridge: "br0", Module: "a", Sync: true, Spool: spoolOf(t, s, req)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != 50 || st.Removed != 1 {
		t.Errorf("staged %d added, %d removed; want 50, 1", st.Added, st.Removed)
	}
	if got := dumpStore(t, s); !slices.Equal(got, before) {
		t.Errorf("staged, not committed, yet the store reads %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	noStage(t, s2)
	if got := dumpStore(t, s2); !slices.Equal(got, before) {
		t.Errorf("after the restart the store reads %q, want %q", got, before)
	}
	st, err = s2.Staging().Stage(StagedWrite{Bridge: "br0", Module: "a", Spool: spoolOf(t, s2, req)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Discard(); err != nil {
		t.Fatal(err)
	}
	noStage(t, s2)
	if err := st.Commit(); err == nil {
		t.Error("Commit after Discard succeeded")
	}
	if got := dumpStore(t, s2); !slices.Equal(got, before) {
		t.Errorf("after Discard the store reads %q", got)
	}
}
