package store

import (
	"bytes"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"
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
	if fs, err := s.Forms(); err != nil || len(fs) != 0 {
		t.Fatalf("new store: %d forms, %v", len(fs), err)
	}
	a, b := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	if err := s.PutForms(map[[sha256.Size]byte][]byte{a: []byte("form a"), b: []byte("form b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutForms(map[[sha256.Size]byte][]byte{a: []byte("form a2")}); err != nil {
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
	fs, err := s.Forms()
	if err != nil || len(fs) != 2 || !bytes.Equal(fs[a], []byte("form a2")) || !bytes.Equal(fs[b], []byte("form b")) {
		t.Fatalf("forms after reopen: %q, %v", fs, err)
	}
}
