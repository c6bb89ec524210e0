package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// benchEntries returns n flows of about the size of a real one (~120 bytes).
func benchEntries(n, offset int) []entry.Entry {
	es := make([]entry.Entry, n)
	for i := range es {
		id := binary.BigEndian.AppendUint32([]byte{byte(i % 30), 0, 100}, uint32(i+offset))
		es[i] = entry.Entry{Kind: entry.KindFlow, Module: "pod", ID: id, Payload: make([]byte, 120)}
	}
	return es
}

// BenchmarkPut: one durable transaction of 1000 entries, as a Put of 1000.
func BenchmarkPut(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := s.Entries().Put("br-int", "pod", benchEntries(1000, i*1000), nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i*1000), "ns/entry")
}

// BenchmarkEntriesAndCounts: what a replay and a Status read of a large store cost.
func BenchmarkEntriesAndCounts(b *testing.B) {
	for _, n := range []int{10000, 200000} {
		s, err := Open(filepath.Join(b.TempDir(), fmt.Sprintf("b%d.db", n)), Options{})
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < n; off += 10000 {
			if err := s.Entries().Put("br-int", "pod", benchEntries(10000, off), nil); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("Entries/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if es, err := s.Entries().All("br-int"); err != nil || len(es) != n {
					b.Fatal(len(es), err)
				}
			}
		})
		b.Run(fmt.Sprintf("Counts/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if cs, err := s.Entries().Counts(); err != nil || cs[0].Flows != n {
					b.Fatal(cs, err)
				}
			}
		})
		_ = s.Close()
	}
}

// BenchmarkDeleteGroupUsers: a Delete that tries to remove a group 30,000
// flows use (refused after one index seek, plus the scan naming the users),
// against a Delete of an unused group on the same bridge.
func BenchmarkDeleteGroupUsers(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	used, unused := entry.Ref{Kind: entry.KindGroup, ID: 5}, entry.Ref{Kind: entry.KindGroup, ID: 6}
	groups := []entry.Entry{
		{Kind: entry.KindGroup, ID: used.Key(), Payload: []byte("g5")},
		{Kind: entry.KindGroup, ID: unused.Key(), Payload: []byte("g6")},
	}
	if err := s.Entries().Put("br-int", "lb", groups, nil); err != nil {
		b.Fatal(err)
	}
	for off := 0; off < 30000; off += 10000 {
		es := benchEntries(10000, off)
		for i := range es {
			es[i].Payload = flowModUsing(es[i].ID, used)
		}
		if err := s.Entries().Put("br-int", "pod", es, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("used", func(b *testing.B) {
		for b.Loop() {
			if err := s.Entries().Delete("br-int", "lb", []entry.Entry{{Kind: entry.KindGroup, ID: used.Key()}}, nil); err == nil {
				b.Fatal("deleted a used group")
			}
		}
	})
	b.Run("unused", func(b *testing.B) {
		for b.Loop() {
			if err := s.Update(func(w *Writer) error {
				if _, err := w.Delete("br-int", "lb", []entry.Entry{{Kind: entry.KindGroup, ID: unused.Key()}}); err != nil {
					return err
				}
				return errAbort
			}); !errors.Is(err, errAbort) {
				b.Fatal(err)
			}
		}
	})
}

// shuffledEntries is benchEntries(n, 0) in a fixed order that is not key
// order (a stride through the set), as a controller's set comes.
func shuffledEntries(n int) []entry.Entry {
	es := benchEntries(n, 0)
	out := make([]entry.Entry, n)
	for i := range es {
		out[i] = es[(i*7919)%n]
	}
	return out
}

var errAbort = errors.New("abort")

// largeCases are the requests of BenchmarkPutLarge and BenchmarkStageLarge:
// 100,000 flows in an order that is not key order (as a controller's set
// comes); the same flows each using one of 1,000 groups, which module lb
// declares first (refs); and those flows with their groups in the request,
// amid them.
func largeCases() []struct {
	name   string
	groups []entry.Entry
	req    []entry.Entry
} {
	plain := shuffledEntries(100000)
	var groups []entry.Entry
	for g := range 1000 {
		groups = append(groups, groupOrMeter(entry.KindGroup, uint32(g+1)))
	}
	refs := make([]entry.Entry, len(plain))
	for i, e := range plain {
		refs[i] = withRef(e, entry.KindGroup, uint32(i%1000+1))
	}
	return []struct {
		name   string
		groups []entry.Entry
		req    []entry.Entry
	}{{"flows", nil, plain}, {"using-groups", groups, refs}, {"with-groups", nil, slices.Concat(refs[:50000], groups, refs[50000:])}}
}

// openLarge is an empty store for a largeCases case, with its groups.
func openLarge(b *testing.B, groups []entry.Entry) *Store {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	if len(groups) > 0 {
		if err := s.Entries().Put("br-int", "lb", groups, nil); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkPutLarge: one request of largeCases into an empty store. bbolt
// splits nodes only at commit, so this is quadratic unless the store puts the
// entries, and their refs, in key order (7 s for using-groups at 50,000 when
// the refs went in flow order).
func BenchmarkPutLarge(b *testing.B) {
	for _, c := range largeCases() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := openLarge(b, c.groups)
				if err := s.Entries().Put("br-int", "pod", c.req, nil); err != nil {
					b.Fatal(err)
				}
				_ = s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.req)), "ns/entry")
		})
	}
}

// BenchmarkStageLarge: BenchmarkPutLarge's requests as a staged write (a
// spool, then Stage and Commit), into an empty store; B/op is what the write
// allocates in all, not what it holds at once.
func BenchmarkStageLarge(b *testing.B) {
	for _, c := range largeCases() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := openLarge(b, c.groups)
				sp, err := s.Staging().NewSpool()
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < len(c.req); i += 4096 {
					if err := sp.Add(c.req[i:min(i+4096, len(c.req))]); err != nil {
						b.Fatal(err)
					}
				}
				st, err := s.Staging().Stage(StagedWrite{Bridge: "br-int", Module: "pod", Spool: sp})
				if err == nil {
					err = st.Commit()
				}
				if err != nil {
					b.Fatal(err)
				}
				_ = sp.Close()
				_ = s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.req)), "ns/entry")
		})
	}
}
