package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Releases are the records of the last release of a held ovs-vswitchd.
// Store.Releases makes one.
type Releases struct{ db *trackedDB }

// Vswitchd returns the identity of the last ovs-vswitchd whose
// flow-restore-wait a flowstated cleared ("" if none), so a restarted
// flowstated can tell a release from a clear made only to re-arm.
func (rl Releases) Vswitchd() (string, error) {
	var id string
	err := rl.db.view(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyReleased))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store: released vswitchd: %w", err)
	}
	return id, nil
}

// SetVswitchd records id as the last released ovs-vswitchd.
func (rl Releases) SetVswitchd(id string) error {
	err := rl.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyReleased, []byte(id))
	})
	if err != nil {
		return fmt.Errorf("store: released vswitchd: %w", err)
	}
	return nil
}

// Last returns when a flowstated of this store last released a held
// ovs-vswitchd (zero if never recorded), so that the time survives a
// flowstated restart (Status.last_release, flowctl wait --released --since).
func (rl Releases) Last() (time.Time, error) {
	var at time.Time
	err := rl.db.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyLastRelease)
		if v == nil {
			return nil
		}
		var err error
		at, err = time.Parse(time.RFC3339Nano, string(v))
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: last release: %w", err)
	}
	return at, nil
}

// SetLast records at as the time of the last release.
func (rl Releases) SetLast(at time.Time) error {
	err := rl.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyLastRelease, []byte(at.UTC().Format(time.RFC3339Nano)))
	})
	if err != nil {
		return fmt.Errorf("store: last release: %w", err)
	}
	return nil
}
