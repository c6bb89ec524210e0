package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Boots are the host boots the store saw, in meta: the current boot id,
// when flowstated first started in it, and whose cold-start gate last
// opened. Store.Boots makes one.
type Boots struct{ db *trackedDB }

// Boot is what the store knows of host boots: whether the cold-start gate
// of the current boot has opened, so a flowstated restarted during the gate
// keeps waiting instead of taking the second start for a warm one.
type Boot struct {
	// ID is the current boot id and Since when a flowstated first started
	// in it (the readiness timeout counts from there).
	ID    string
	Since time.Time
	// GateOpened is the boot id whose gate last opened: replays ran from
	// the store in that boot. "" on a new store.
	GateOpened string
}

// Cold reports whether the gate of the current boot has yet to open.
func (b Boot) Cold() bool { return b.GateOpened != b.ID }

// Record records id as the current boot id and returns what the store
// knows of it. Since is kept across restarts within one boot.
func (bs Boots) Record(id string, now time.Time) (Boot, error) {
	var b Boot
	err := bs.db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		prev := string(meta.Get(keyBootID))
		if v := meta.Get(keyGateOpened); v != nil {
			b.GateOpened = string(v)
		} else if prev != "" {
			// Stores written before the gate was recorded opened their
			// gate in every boot they saw.
			b.GateOpened = prev
		}
		since, _ := time.Parse(time.RFC3339Nano, string(meta.Get(keyBootSince)))
		if prev != id || since.IsZero() {
			since = now
		}
		b.ID, b.Since = id, since
		if err := meta.Put(keyBootID, []byte(id)); err != nil {
			return err
		}
		if err := meta.Put(keyGateOpened, []byte(b.GateOpened)); err != nil {
			return err
		}
		return meta.Put(keyBootSince, []byte(since.UTC().Format(time.RFC3339Nano)))
	})
	if err != nil {
		return Boot{}, fmt.Errorf("store: boot id: %w", err)
	}
	return b, nil
}

// SetGateOpened records that the gate of boot id has opened.
func (bs Boots) SetGateOpened(id string) error {
	err := bs.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyGateOpened, []byte(id))
	})
	if err != nil {
		return fmt.Errorf("store: gate of boot %s: %w", id, err)
	}
	return nil
}
