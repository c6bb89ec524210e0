package store

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

func group(id byte, payload string) entry.Entry {
	return entry.Entry{Kind: entry.KindGroup, ID: []byte{0, 0, 0, id}, Payload: []byte(payload)}
}

func TestMirror(t *testing.T) {
	s := openTest(t)
	if es, ok, err := s.Mirrors().Get("br-ex"); err != nil || ok || len(es) != 0 {
		t.Fatalf("mirror of a new store: %v %v %v, want none", es, ok, err)
	}
	a, b, g := flow("", 0, 100, "a"), flow("", 0, 0, ""), group(1, "g1")
	changed, err := s.Mirrors().Set("br-ex", []entry.Entry{g, a, b})
	if err != nil || !changed {
		t.Fatalf("first SetMirror: changed %v, %v", changed, err)
	}
	es, ok, err := s.Mirrors().Get("br-ex")
	if err != nil || !ok {
		t.Fatalf("Mirror: %v %v", ok, err)
	}
	// Ordered by kind and identity, whatever the order given.
	want := []entry.Entry{b, a, g}
	if !slices.EqualFunc(es, want, entry.Entry.Equal) {
		t.Fatalf("Mirror = %v, want %v", es, want)
	}

	// The same content in another order is no change: nothing is written.
	writes := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }
	before := writes()
	if changed, err := s.Mirrors().Set("br-ex", []entry.Entry{a, g, b}); err != nil || changed {
		t.Fatalf("SetMirror of the same entries: changed %v, %v", changed, err)
	}
	if w := writes(); w != before {
		t.Fatalf("an unchanged mirror was rewritten (%d page writes)", w-before)
	}

	// A changed payload replaces the whole mirror; entries gone are gone.
	a2 := a
	a2.Payload = []byte("other")
	if changed, err := s.Mirrors().Set("br-ex", []entry.Entry{a2}); err != nil || !changed {
		t.Fatalf("SetMirror of new content: changed %v, %v", changed, err)
	}
	if es, _, _ := s.Mirrors().Get("br-ex"); !slices.EqualFunc(es, []entry.Entry{a2}, entry.Entry.Equal) {
		t.Fatalf("after replace: %v", es)
	}

	// An empty mirror exists (a bridge with nothing on it) and differs from none.
	if changed, err := s.Mirrors().Set("br-empty", nil); err != nil || !changed {
		t.Fatalf("SetMirror(nil): changed %v, %v", changed, err)
	}
	if es, ok, err := s.Mirrors().Get("br-empty"); err != nil || !ok || len(es) != 0 {
		t.Fatalf("empty mirror: %v %v %v", es, ok, err)
	}
	if got, err := s.Mirrors().Bridges(); err != nil || !slices.Equal(got, []string{"br-empty", "br-ex"}) {
		t.Fatalf("MirroredBridges = %v, %v", got, err)
	}

	// Mirrors are not desired state: List and Counts do not see them.
	if es := list(t, s, Filter{}); len(es) != 0 {
		t.Fatalf("List sees mirrored entries: %v", es)
	}

	if err := s.Mirrors().Delete("br-ex"); err != nil {
		t.Fatal(err)
	}
	if err := s.Mirrors().Delete("br-never"); err != nil {
		t.Fatalf("deleting a mirror that does not exist: %v", err)
	}
	if _, ok, _ := s.Mirrors().Get("br-ex"); ok {
		t.Fatal("mirror still there after DeleteMirror")
	}
}

// TestMirrorSurvivesReopen: the mirror is what a restarted flowstated
// restores from.
func TestMirrorSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := []entry.Entry{flow("", 0, 100, "a"), group(7, "g7")}
	if _, err := s.Mirrors().Set("br-ex", want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.Mirrors().Get("br-ex")
	if err != nil || !ok || !slices.EqualFunc(got, want, entry.Entry.Equal) {
		t.Fatalf("after reopen: %v %v %v, want %v", got, ok, err, want)
	}
	if changed, err := s.Mirrors().Set("br-ex", want); err != nil || changed {
		t.Fatalf("the stored hash is kept across a reopen: changed %v, %v", changed, err)
	}
}
