package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ReleasedVswitchd returns the identity of the last ovs-vswitchd whose
// flow-restore-wait a flowstated cleared ("" if none), so a restarted
// flowstated can tell a release from a clear made only to re-arm.
func (s *Store) ReleasedVswitchd() (string, error) {
	var id string
	err := s.view(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyReleased))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store: released vswitchd: %w", err)
	}
	return id, nil
}

// SetReleasedVswitchd records id as the last released ovs-vswitchd.
func (s *Store) SetReleasedVswitchd(id string) error {
	err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyReleased, []byte(id))
	})
	if err != nil {
		return fmt.Errorf("store: released vswitchd: %w", err)
	}
	return nil
}
