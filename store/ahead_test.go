package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestAhead: the switch's copies a resync records are per bridge and module,
// survive a reopen, go one by one, by module, and all of a bridge's with the
// next record of where its entries were placed (a reconcile); a damaged
// value fails the read.
func TestAhead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	of := func(bridge, module string) map[string]AheadDigest {
		t.Helper()
		m, err := s.Ahead().Of(bridge, module)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := of("br0", "ovn"); len(m) != 0 {
		t.Fatalf("new store: %v, want nothing", m)
	}
	update := func(fn func(w *Writer) error) {
		t.Helper()
		if err := s.Update(func(w *Writer) error { return fn(w) }); err != nil {
			t.Fatal(err)
		}
	}
	update(func(w *Writer) error {
		for _, c := range []struct{ br, mod, key, form string }{
			{"br0", "ovn", "f1", "A"}, {"br0", "ovn", "f2", "B"}, {"br0", "ov", "f1", "C"}, {"br1", "ovn", "f1", "D"},
		} {
			if err := w.SetAhead(c.br, c.mod, c.key, []byte(c.form)); err != nil {
				return err
			}
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if m := of("br0", "ovn"); len(m) != 2 || m["f1"] != DigestOf([]byte("A")) || m["f2"] != DigestOf([]byte("B")) {
		t.Errorf("br0/ovn after reopen: %v", m)
	}
	if m := of("br0", "ov"); len(m) != 1 || m["f1"] != DigestOf([]byte("C")) {
		t.Errorf("br0/ov (a prefix of ovn's name): %v", m)
	}
	update(func(w *Writer) error { return w.DropAhead("br0", "ovn", "f2") })
	if m := of("br0", "ovn"); len(m) != 1 {
		t.Errorf("br0/ovn after a drop: %v", m)
	}
	update(func(w *Writer) error { return w.ClearAhead("br0", "ovn") })
	if m, m2 := of("br0", "ovn"), of("br0", "ov"); len(m) != 0 || len(m2) != 1 {
		t.Errorf("after ovn's clear: ovn %v, ov %v", m, m2)
	}
	// A reconcile: the bridge's switch holds the store's entries.
	if err := s.Placed().SetVswitchd("br0", "7@t"); err != nil {
		t.Fatal(err)
	}
	if m := of("br0", "ov"); len(m) != 0 {
		t.Errorf("br0 after its entries were placed: %v", m)
	}
	if m := of("br1", "ovn"); len(m) != 1 {
		t.Errorf("br1 after br0's were placed: %v", m)
	}
	// The same vswitchd again drops copies recorded since.
	update(func(w *Writer) error { return w.SetAhead("br0", "ovn", "f3", []byte("E")) })
	if err := s.Placed().SetVswitchd("br0", "7@t"); err != nil {
		t.Fatal(err)
	}
	if m := of("br0", "ovn"); len(m) != 0 {
		t.Errorf("br0 placed again on the same vswitchd: %v", m)
	}
	err = s.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAhead).Bucket([]byte("br1")).Put(aheadKey("ovn", "f1"), make([]byte, 20))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ahead().Of("br1", "ovn"); !errors.Is(err, errChecksum) {
		t.Errorf("a damaged value: %v, want a checksum error", err)
	}
}
