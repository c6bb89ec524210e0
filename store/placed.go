package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Where a bridge's entries were last put: the bridge's switch on which a
// flowstated of this store last replayed it in full, the ovs-vswitchd
// (pid@start) and the bridge's incarnation in it (ovsconfig.BridgeIdentity;
// a store written before that names the vswitchd only). Only that switch
// holds them; a vswitchd started since, or the bridge deleted and created
// again under the same vswitchd, holds none of them, so what it lacks is no
// evidence that a controller deleted it (server/restore, adopt.go). The
// value is opaque here: Vswitchd and SetVswitchd keep their names. No schema version: a store without the bucket reads as one
// where nothing was recorded, and an older flowstated ignores it.
// (bucketPlaced, buckets.go)

// Placed records, per bridge, the vswitchd its entries were last replayed
// on. Store.Placed makes one.
type Placed struct{ db *trackedDB }

// Vswitchd returns the vswitchd bridge's entries were last replayed on, ""
// when none was recorded. A value whose checksum does not match fails it.
func (pl Placed) Vswitchd(bridge string) (string, error) {
	var id string
	err := pl.db.view(func(tx *bolt.Tx) (err error) {
		id, err = placedOn(tx, bridge)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("store: vswitchd of bridge %s's entries: %w", bridge, err)
	}
	return id, nil
}

// placedOn reads the vswitchd recorded for bridge in tx ("" none).
func placedOn(tx *bolt.Tx, bridge string) (string, error) {
	b := tx.Bucket(bucketPlaced)
	if b == nil {
		return "", nil
	}
	v := b.Get([]byte(bridge))
	if v == nil {
		return "", nil
	}
	raw, err := unseal([]byte(bridge), v)
	return string(raw), err
}

// SetVswitchd records id as the vswitchd bridge's entries were replayed
// on, durably, and that its switch holds the store's entries (the bridge's
// switch copies go, ahead.go). The same id again, with no copies recorded,
// costs a read, not a write and an fsync: every reconcile calls it.
func (pl Placed) SetVswitchd(bridge, id string) error {
	same := false
	_ = pl.db.view(func(tx *bolt.Tx) error {
		cur, err := placedOn(tx, bridge)
		same = err == nil && cur == id && !hasAhead(tx, bridge)
		return nil
	})
	if same {
		return nil
	}
	err := pl.db.update(func(tx *bolt.Tx) error {
		if err := dropAheadOf(tx, bridge); err != nil {
			return err
		}
		b, err := tx.CreateBucketIfNotExists(bucketPlaced)
		if err != nil {
			return err
		}
		return b.Put([]byte(bridge), sealed([]byte(bridge), []byte(id)))
	})
	if err != nil {
		return fmt.Errorf("store: vswitchd of bridge %s's entries: %w", bridge, err)
	}
	return nil
}
