package store

import (
	"path/filepath"
	"testing"
	"time"
)

// TestStoodAside: a decision to stand aside is kept across a reopen, a
// second decision for the same bridge keeps the first, and clearing it (the
// bridge adopted) forgets only that bridge; a store without the bucket reads
// as one with no decisions.
func TestStoodAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Identity().StoodAsideBridges(); err != nil || len(got) != 0 {
		t.Fatalf("new store: %v, %v", got, err)
	}
	if err := s.Identity().ClearStoodAside("br-int"); err != nil {
		t.Fatalf("clear without a record: %v", err)
	}
	first := StoodAside{Since: time.Date(2026, 12, 3, 13, 0, 0, 5, time.UTC), Reason: "bridge br-int holds 6 flows\nand more"}
	kept, err := s.Identity().SetStoodAside("br-int", first)
	if err != nil || kept != first {
		t.Fatalf("first decision: kept %+v, %v", kept, err)
	}
	kept, err = s.Identity().SetStoodAside("br-int", StoodAside{Since: first.Since.Add(time.Hour), Reason: "later"})
	if err != nil || kept != first {
		t.Fatalf("second decision: kept %+v, %v; want the first", kept, err)
	}
	if _, err := s.Identity().SetStoodAside("br-ex", StoodAside{Since: first.Since, Reason: "another store"}); err != nil {
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
	got, err := s.Identity().StoodAsideBridges()
	if err != nil || len(got) != 2 || !got["br-int"].Since.Equal(first.Since) || got["br-int"].Reason != first.Reason ||
		got["br-ex"].Reason != "another store" {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	if err := s.Identity().ClearStoodAside("br-int"); err != nil {
		t.Fatal(err)
	}
	got, err = s.Identity().StoodAsideBridges()
	if _, still := got["br-int"]; err != nil || still || len(got) != 1 {
		t.Fatalf("after adopting br-int: %+v, %v", got, err)
	}
}
