package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestPlaced: the vswitchd a bridge's entries were replayed on survives a
// reopen, is per bridge, is replaced by the next, and a damaged value fails
// the read (the engine then learns no deletions from the relay).
func TestPlaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Placed().Vswitchd("br0"); err != nil || id != "" {
		t.Fatalf("new store: %q, %v, want nothing recorded", id, err)
	}
	for _, id := range []string{"7@t", "7@t", "8@u"} {
		if err := s.Placed().SetVswitchd("br0", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Placed().SetVswitchd("br1", "7@t"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	for br, want := range map[string]string{"br0": "8@u", "br1": "7@t", "br2": ""} {
		if id, err := s.Placed().Vswitchd(br); err != nil || id != want {
			t.Errorf("after reopen, %s: %q, %v, want %q", br, id, err, want)
		}
	}
	err = s.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPlaced).Put([]byte("br0"), []byte("8@u\x00\x00\x00\x00"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Placed().Vswitchd("br0"); !errors.Is(err, errChecksum) {
		t.Errorf("a damaged value: %q, %v, want a checksum error", id, err)
	}
}
