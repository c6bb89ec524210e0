package store

import (
	"bytes"
	"cmp"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

// spoolEntries decodes fuzz input into entries: per entry a byte of kind, a
// byte of identity length (0-7), a byte of payload length (0-15), then the
// bytes; identities repeat often at these lengths.
func spoolEntries(b []byte) []entry.Entry {
	var es []entry.Entry
	for len(b) >= 3 {
		kind, idLen, payLen := entry.Kind(1+int(b[0])%3), int(b[1])%8, int(b[2])%16
		b = b[3:]
		if len(b) < idLen+payLen {
			break
		}
		es = append(es, entry.Entry{Kind: kind, ID: b[:idLen], Payload: b[idLen : idLen+payLen], Opaque: payLen%2 == 1})
		b = b[idLen+payLen:]
	}
	return es
}

// FuzzSpool: whatever the entries, a spool of runs of a few entries yields
// them merged in key order (equal identities in request order), every one
// once with its index: the flows from its runs, the groups and meters from
// memory.
func FuzzSpool(f *testing.F) {
	f.Add([]byte("\x00\x02\x03ab123\x01\x01\x00z\x00\x02\x01ab9\x00\x00\x00"))
	f.Add(bytes.Repeat([]byte("\x00\x01\x01ax"), 20))
	f.Add([]byte{})
	dir := f.TempDir()
	s, err := Open(filepath.Join(dir, "s.db"), Options{Timeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	s.spoolRunEntries = 3
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		es := spoolEntries(b)
		sp, err := s.Staging().NewSpool()
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		for i := 0; i < len(es); i += 2 {
			if err := sp.Add(es[i:min(i+2, len(es))]); err != nil {
				t.Fatal(err)
			}
		}
		if sp.Len() != len(es) {
			t.Fatalf("Len %d, added %d", sp.Len(), len(es))
		}
		want := make([]int, len(es))
		for i := range want {
			want[i] = i
		}
		slices.SortStableFunc(want, func(a, b int) int {
			return cmp.Or(compareKey(es[a].Kind, es[a].ID, es[b].Kind, es[b].ID), cmp.Compare(a, b))
		})
		// The flows come from the runs, the groups and meters from memory:
		// together, every entry in key order (flows sort first).
		it, err := sp.iter()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		check := func(e *spooled) {
			t.Helper()
			if n >= len(es) {
				t.Fatalf("more than the %d entries added", len(es))
			}
			w := es[want[n]]
			if e.index != want[n] || e.kind != w.Kind || !bytes.Equal(e.id, w.ID) || !bytes.Equal(e.payload, w.Payload) || e.opaque != w.Opaque {
				t.Fatalf("merge position %d: entry %d (%d %x %x), want entry %d (%d %x %x)", n, e.index, e.kind, e.id, e.payload, want[n], w.Kind, w.ID, w.Payload)
			}
			n++
		}
		for e := it.peek(); e != nil; e = it.peek() {
			if e.kind != entry.KindFlow {
				t.Fatalf("the runs hold a %s", e.kind)
			}
			check(e)
			it.next()
		}
		if it.err != nil {
			t.Fatal(it.err)
		}
		for _, e := range sp.sortedNonFlows() {
			check(&e)
		}
		if n != len(es) {
			t.Fatalf("read %d of %d entries", n, len(es))
		}
		if sp.Count(entry.KindFlow)+sp.Count(entry.KindGroup)+sp.Count(entry.KindMeter) != len(es) {
			t.Fatalf("counts %d+%d+%d, added %d", sp.Count(entry.KindFlow), sp.Count(entry.KindGroup), sp.Count(entry.KindMeter), len(es))
		}
	})
}
