package storetest

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Floor is the cost of durability alone, what a benchmark of small writes
// measures its figures against in the same run (docs/benchmarks.md, issue
// 35): one fsync'd bbolt Update of a new 120-byte key and value, in a file
// of its own (bbolt's default page size) on the file system of the store.
type Floor struct {
	t  testing.TB
	db *bolt.DB
	n  uint64
}

// OpenFloor opens the floor's file in dir; it is closed at cleanup.
func OpenFloor(t testing.TB, dir string) *Floor {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, "floor.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &Floor{t: t, db: db}
}

// Update writes one new key in one durable transaction and returns how
// long it took.
func (f *Floor) Update() time.Duration {
	f.n++
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 120), f.n)
	k = append(k, make([]byte, 112)...)
	start := time.Now()
	err := f.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("floor"))
		if err != nil {
			return err
		}
		return b.Put(k, k)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return time.Since(start)
}

// Updates runs n Updates one after the other and returns their times.
func (f *Floor) Updates(n int) []time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = f.Update()
	}
	return d
}
