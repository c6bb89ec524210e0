package store

import (
	"bytes"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

// TestForms: learned forms are stored, read back after a reopen, and a new
// form for the same key replaces the old one; a store without forms reads
// as one with none.
func TestForms(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if fs, err := s.Forms().All(); err != nil || len(fs) != 0 {
		t.Fatalf("new store: %d forms, %v", len(fs), err)
	}
	a, b := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	if err := s.Forms().Put(map[[sha256.Size]byte][]byte{a: []byte("form a"), b: []byte("form b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Forms().Put(map[[sha256.Size]byte][]byte{a: []byte("form a2")}); err != nil {
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
	fs, err := s.Forms().All()
	if err != nil || len(fs) != 2 || !bytes.Equal(fs[a], []byte("form a2")) || !bytes.Equal(fs[b], []byte("form b")) {
		t.Fatalf("forms after reopen: %q, %v", fs, err)
	}
}

// TestPruneForms: a form stays while an entry declares the payload it was
// learned for, or leads to it through a form learned for a form; the rest
// go, and a store without forms has nothing to prune.
func TestPruneForms(t *testing.T) {
	s := openTest(t)
	if n, err := s.Forms().Prune(); err != nil || n != 0 {
		t.Fatalf("no forms: pruned %d, %v", n, err)
	}
	declared := flow("m", 1, 1, "a")
	sum := func(b []byte) [sha256.Size]byte { return sha256.Sum256(b) }
	form1, form2 := []byte("form 1"), []byte("form 2")
	if err := s.Entries().Put("br-int", "m", []entry.Entry{declared}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Forms().Put(map[[sha256.Size]byte][]byte{
		sum(declared.Payload): form1, // learned for the declared payload
		sum(form1):            form2, // learned for that form
		sum([]byte("gone")):   []byte("form of an entry no longer declared"),
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Forms().Prune(); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	fs, err := s.Forms().All()
	if err != nil || len(fs) != 2 || !bytes.Equal(fs[sum(declared.Payload)], form1) || !bytes.Equal(fs[sum(form1)], form2) {
		t.Fatalf("forms left: %q, %v", fs, err)
	}
}
