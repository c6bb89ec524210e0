package store

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
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
		if err := s.Put("br-int", "pod", benchEntries(1000, i*1000), nil); err != nil {
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
			if err := s.Put("br-int", "pod", benchEntries(10000, off), nil); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("Entries/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if es, err := s.Entries("br-int"); err != nil || len(es) != n {
					b.Fatal(len(es), err)
				}
			}
		})
		b.Run(fmt.Sprintf("Counts/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if cs, err := s.Counts(); err != nil || cs[0].Flows != n {
					b.Fatal(cs, err)
				}
			}
		})
		_ = s.Close()
	}
}
