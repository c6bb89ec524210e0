package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state", "flowstate.db"), Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Consistency check before closing, as bbolt's own tests do.
		if err := s.db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Errorf("consistency: %v", err)
		}
		_ = s.Close()
	})
	return s
}

func flow(module string, table, prio byte, match string) entry.Entry {
	id := append([]byte{table, 0, prio}, match...)
	return entry.Entry{Kind: entry.KindFlow, Module: module, ID: id, Payload: []byte("payload-" + match)}
}

// withRef gives e a FLOW_MOD payload whose apply_actions use the group or
// meter: the store reads references from the payload.
func withRef(e entry.Entry, k entry.Kind, id uint32) entry.Entry {
	e.Payload = flowModUsing(e.ID, entry.Ref{Kind: k, ID: id})
	return e
}

// flowModUsing is a minimal OpenFlow 1.5 FLOW_MOD (an empty match, made
// distinct by a cookie from tag) whose apply_actions use refs.
func flowModUsing(tag []byte, refs ...entry.Ref) []byte {
	b := make([]byte, 48, 64+8*len(refs))
	b[0], b[1] = 6, 14
	copy(b[8:16], tag)
	b = append(b, 0, 1, 0, 4, 0, 0, 0, 0)   // OXM match, no fields
	b = binary.BigEndian.AppendUint16(b, 4) // apply_actions
	b = binary.BigEndian.AppendUint16(b, uint16(8+8*len(refs)))
	b = append(b, 0, 0, 0, 0)
	for _, r := range refs {
		typ := uint16(22) // group
		if r.Kind == entry.KindMeter {
			typ = 29
		}
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint16(b, 8)
		b = binary.BigEndian.AppendUint32(b, r.ID)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

func list(t *testing.T, s *Store, f Filter) []entry.Entry {
	t.Helper()
	var es []entry.Entry
	if err := s.Entries().List(f, func(_ string, e entry.Entry) error { es = append(es, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return es
}

func TestPutListDelete(t *testing.T) {
	s := openTest(t)
	a, b := flow("pod", 0, 100, "a"), flow("pod", 3, 90, "b")
	if err := s.Entries().Put("br-int", "pod", []entry.Entry{a, b}, nil); err != nil {
		t.Fatal(err)
	}
	if got := list(t, s, Filter{}); len(got) != 2 || !got[0].Equal(a) || !got[1].Equal(b) {
		t.Fatalf("list = %+v", got)
	}
	tbl := uint8(3)
	if got := list(t, s, Filter{Table: &tbl}); len(got) != 1 || !got[0].Equal(b) {
		t.Fatalf("table filter = %+v", got)
	}
	if got := list(t, s, Filter{Module: "route"}); len(got) != 0 {
		t.Fatalf("module filter = %+v", got)
	}
	var removed []entry.Entry
	if err := s.Entries().Delete("br-int", "pod", []entry.Entry{a}, func(r []entry.Entry) error { removed = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || string(removed[0].Payload) != "payload-a" {
		t.Fatalf("removed = %+v", removed)
	}
	if got := list(t, s, Filter{}); len(got) != 1 || !got[0].Equal(b) {
		t.Fatalf("after delete = %+v", got)
	}
	counts, err := s.Entries().Counts()
	if err != nil || len(counts) != 1 || counts[0] != (Count{Bridge: "br-int", Module: "pod", Flows: 1}) {
		t.Fatalf("counts = %+v, %v", counts, err)
	}
}

func TestPutRejectsAndLeavesNothing(t *testing.T) {
	s := openTest(t)
	if err := s.Entries().Put("br-int", "route", []entry.Entry{flow("route", 0, 1, "owned")}, nil); err != nil {
		t.Fatal(err)
	}
	applyErr := errors.New("switch said no")
	cases := []struct {
		name  string
		es    []entry.Entry
		apply func([]Change) error
		kind  error
		index int
	}{
		{"owned by another module", []entry.Entry{flow("pod", 0, 1, "new"), flow("pod", 0, 1, "owned")}, nil, errdefs.ErrFailedPrecondition, 1},
		{"duplicate identity", []entry.Entry{flow("pod", 0, 1, "x"), flow("pod", 0, 1, "x")}, nil, errdefs.ErrInvalidArgument, 1},
		{"apply fails", []entry.Entry{flow("pod", 0, 1, "y")}, func([]Change) error { return applyErr }, applyErr, -1},
		{"undeclared group", []entry.Entry{withRef(flow("pod", 0, 1, "g"), entry.KindGroup, 7)}, nil, errdefs.ErrFailedPrecondition, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Entries().Put("br-int", "pod", tc.es, tc.apply)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			var ie *errdefs.EntryError
			if tc.index >= 0 && (!errors.As(err, &ie) || ie.Index != tc.index) {
				t.Fatalf("err = %v, want index %d", err, tc.index)
			}
			if got := list(t, s, Filter{Module: "pod"}); len(got) != 0 {
				t.Fatalf("stored %d entries of a rejected request", len(got))
			}
		})
	}
	if err := s.Entries().Delete("br-int", "pod", []entry.Entry{flow("", 0, 1, "owned")}, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete of another module's entry: %v", err)
	}
	if err := s.Entries().Delete("br-int", "route", []entry.Entry{flow("", 0, 1, "nope")}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete of a missing entry: %v", err)
	}
}

func TestReopenKeepsStateAndBootID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if b, err := s.Boots().Record("boot-1", t0); err != nil || !b.Cold() || !b.Since.Equal(t0) {
		t.Fatalf("first boot: %+v, %v", b, err)
	}
	// A restart within the boot before the gate opened is still cold, and
	// keeps the time the boot was first seen.
	if b, err := s.Boots().Record("boot-1", t0.Add(time.Minute)); err != nil || !b.Cold() || !b.Since.Equal(t0) {
		t.Fatalf("restart in the gate: %+v, %v", b, err)
	}
	if err := s.Boots().SetGateOpened("boot-1"); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Boots().Record("boot-1", t0.Add(2*time.Minute)); err != nil || b.Cold() {
		t.Fatalf("restart after the gate opened: %+v, %v", b, err)
	}
	if err := s.Entries().Put("br0", "m", []entry.Entry{flow("m", 1, 1, "z")}, nil); err != nil {
		t.Fatal(err)
	}
	// A second open of a locked file times out instead of hanging.
	if _, err := Open(path, Options{Timeout: 50 * time.Millisecond}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("second open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t1 := t0.Add(time.Hour)
	if b, err := s.Boots().Record("boot-2", t1); err != nil || !b.Cold() || b.GateOpened != "boot-1" || !b.Since.Equal(t1) {
		t.Fatalf("boot after reopen: %+v, %v", b, err)
	}
	if es, err := s.Entries().All("br0"); err != nil || len(es) != 1 {
		t.Fatalf("entries after reopen: %v, %v", es, err)
	}
}

func TestSchemaVersionMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucket(bucketMeta)
		return b.Put(keySchema, binary.BigEndian.AppendUint32(nil, SchemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if _, err := Open(path, Options{}); err == nil {
		t.Fatal("opened a store of a newer schema")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{0, 1, 100}, encodeRecord([]byte{0, 1, 100}, "pipeline", []byte{6, 14, 0, 8}))
	f.Add([]byte{}, []byte{2, 200, 'x', 0, 0, 0, 0})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		m, p, err := decodeRecord(k, v)
		if err != nil {
			return
		}
		if got := encodeRecord(k, m, p); string(got) != string(v) {
			t.Fatalf("re-encoding %x gives %x", v, got)
		}
	})
}

func TestSyncReplacesModuleSet(t *testing.T) {
	s := openTest(t)
	a, b, c := flow("pod", 0, 1, "a"), flow("pod", 0, 1, "b"), flow("pod", 0, 1, "c")
	other := flow("route", 0, 1, "r")
	if err := s.Entries().Put("br0", "pod", []entry.Entry{a, b}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Entries().Put("br0", "route", []entry.Entry{other}, nil); err != nil {
		t.Fatal(err)
	}
	b2 := b
	b2.Payload = []byte("new content")
	var removed []entry.Entry
	var changed []Change
	err := s.Entries().Sync("br0", "pod", []entry.Entry{b2, c}, func(r []entry.Entry, ch []Change) error {
		removed, changed = r, ch
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || !removed[0].Equal(a) {
		t.Fatalf("removed = %+v, want a", removed)
	}
	if len(changed) != 2 || !changed[0].Entry.Equal(b2) || !changed[0].Existed || !changed[1].Entry.Equal(c) || changed[1].Existed {
		t.Fatalf("changed = %+v, want b2 and c", changed)
	}
	got := list(t, s, Filter{Module: "pod"})
	if len(got) != 2 || !got[0].Equal(b2) || !got[1].Equal(c) {
		t.Fatalf("pod after sync = %+v", got)
	}
	if got := list(t, s, Filter{Module: "route"}); len(got) != 1 {
		t.Fatalf("sync of pod touched route: %+v", got)
	}
	// A failed apply leaves the previous set.
	if err := s.Entries().Sync("br0", "pod", nil, func([]entry.Entry, []Change) error { return errors.New("no") }); err == nil {
		t.Fatal("sync with failing apply succeeded")
	}
	if got := list(t, s, Filter{Module: "pod"}); len(got) != 2 {
		t.Fatalf("failed sync changed the set: %+v", got)
	}
	// Identical content is not reported as changed.
	if err := s.Entries().Sync("br0", "pod", []entry.Entry{b2, c}, func(r []entry.Entry, ch []Change) error {
		if len(r)+len(ch) != 0 {
			t.Errorf("no-op sync reported removed=%d changed=%d", len(r), len(ch))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestReadyBoots(t *testing.T) {
	s := openTest(t)
	if err := s.Modules().SetReady("pod", "boot-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Modules().SetReady("pod", "boot-2"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Modules().ReadyBoots()
	if err != nil || len(got) != 1 || got["pod"] != "boot-2" {
		t.Fatalf("ready = %v, %v", got, err)
	}
}

func TestRefsMustBeDeclared(t *testing.T) {
	s := openTest(t)
	g := entry.Entry{Kind: entry.KindGroup, Module: "lb", ID: entry.Ref{ID: 7}.Key(), Payload: []byte("group 7")}
	f := withRef(flow("pod", 0, 1, "uses-7"), entry.KindGroup, 7)
	// Declared in the same request, groups before or after the flow: fine.
	if err := s.Entries().Put("br0", "pod", []entry.Entry{f, {Kind: g.Kind, ID: g.ID, Payload: g.Payload}}, nil); err != nil {
		t.Fatal(err)
	}
	// On another bridge it is not declared.
	if err := s.Entries().Put("br1", "pod", []entry.Entry{f}, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("flow using an undeclared group: %v", err)
	}
}

func TestDuplicateNamesTheFirst(t *testing.T) {
	es := benchEntries(10, 0)
	es = append(es, es[7], es[3], es[3])
	err := checkDuplicates(es)
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 10 || !strings.Contains(err.Error(), "as entry 7") {
		t.Fatalf("duplicates: %v, want entry 10 named as a copy of entry 7", err)
	}
	if err := checkDuplicates(benchEntries(1000, 0)); err != nil {
		t.Fatal(err)
	}
	o := newKeyOrder(es)
	if !o.contains(es[5].Kind, es[5].ID) || o.contains(entry.KindGroup, es[5].ID) || o.contains(es[5].Kind, append(bytes.Clone(es[5].ID), 0)) {
		t.Fatal("contains")
	}
}
