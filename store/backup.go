package store

import (
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the store file to w, from one read
// transaction, while writes go on: the copy is the store as of the moment
// Backup began. It returns the bytes written. The copy is a complete bbolt
// file with the same store id; opening it as --db restores that state.
//
// The read transaction lasts as long as w takes: until it ends, a write that
// needs the file to grow waits (bbolt cannot remap under a reader), so w
// should not be slower than the network or disk it feeds.
func (s *Store) Backup(w io.Writer) (int64, error) {
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("store: backup: %w", err)
	}
	return n, nil
}
