package store

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestKept: a bridge's record of entries left alone survives a reopen,
// changes apply in place, Replace drops what was stored, a record left
// keeping nothing is deleted, and a damaged value fails the read naming its
// key (the engine then keeps everything undeclared).
func TestKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Kept().Get("br0"); err != nil || !r.Empty() {
		t.Fatalf("new store: %+v, %v", r, err)
	}
	if err := s.Kept().Update("br0", KeptUpdate{Vswitchd: "7@t", Delete: [][]byte{{1, 2}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Kept().Get("br0"); err != nil || !r.Empty() || r.Vswitchd != "" {
		t.Fatalf("a delete on nothing stored: %+v, %v, want no record", r, err)
	}
	a, b, c := []byte{0, 1, 2, 3}, []byte{1, 0, 0, 0, 9}, []byte{2, 0, 0, 0, 4}
	if err := s.Kept().Update("br0", KeptUpdate{Vswitchd: "7@t", Put: [][]byte{a, b, c}, PutRules: []uint32{7, 1<<16 | 100}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Kept().Update("br0", KeptUpdate{Vswitchd: "7@t", Delete: [][]byte{b}, DeleteRules: []uint32{7}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	r, err := s.Kept().Get("br0")
	if err != nil || r.Vswitchd != "7@t" || r.All || !slices.EqualFunc(r.IDs, [][]byte{a, c}, slices.Equal) ||
		!slices.Equal(r.Rules, []uint32{1<<16 | 100}) {
		t.Fatalf("after reopen: %+v, %v", r, err)
	}
	if other, err := s.Kept().Get("br1"); err != nil || !other.Empty() {
		t.Fatalf("another bridge: %+v, %v", other, err)
	}
	if err := s.Kept().Update("br0", KeptUpdate{Replace: true, Vswitchd: "8@u", All: true}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Kept().Get("br0"); err != nil || r.Vswitchd != "8@u" || !r.All || len(r.IDs) != 0 || len(r.Rules) != 0 {
		t.Fatalf("replaced by all: %+v, %v", r, err)
	}
	if err := s.Kept().Update("br0", KeptUpdate{Vswitchd: "8@u", Put: [][]byte{a}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Kept().Update("br0", KeptUpdate{Vswitchd: "8@u", Delete: [][]byte{a}}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if keptBucket(tx, "br0") != nil {
			t.Error("a record keeping nothing is still stored")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Kept().Update("br0", KeptUpdate{Vswitchd: "8@u", Put: [][]byte{a, c}}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return keptBucket(tx, "br0").Bucket(bucketKeptIDs).Put(c, []byte{1, 2, 3, 4})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Kept().Get("br0"); err == nil || !strings.Contains(err.Error(), "id key "+keyHex(c)) {
		t.Fatalf("a damaged identity: %v, want an error naming it", err)
	}
}
