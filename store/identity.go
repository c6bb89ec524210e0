package store

import (
	"crypto/rand"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Store identity: every store draws a random id once, at creation, and
// records which bridges it has managed. The server writes the id into the
// bridge's OVSDB row when it first manages it, so a store that is new, lost
// or another instance's can be told apart from the one that programmed the
// switch (server/restore/owner.go).
// (keyStoreID, bucketManaged, buckets.go)

// storeIDVersion is the version of a store id: a random UUID.
const storeIDVersion = byte(4)

// loadIdentity returns the store id, drawing it on a store that has none.
func loadIdentity(db *trackedDB) (id string, err error) {
	err = db.update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketManaged); err != nil {
			return err
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyStoreID); v != nil {
			id = string(v)
			return nil
		}
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		b[6] = b[6]&0x0f | storeIDVersion<<4
		b[8] = b[8]&0x3f | 0x80
		id = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		return meta.Put(keyStoreID, []byte(id))
	})
	return id, err
}

// Identity is the store id and the bridges the store manages (Managed) or
// stands aside from (aside.go). Store.Identity makes one.
type Identity struct {
	db *trackedDB
	id string
}

// ID is the store's id, drawn once when the store was created: a UUID.
func (is Identity) ID() string { return is.id }

// Managed reports whether this store has managed bridge before: it recorded
// so (MarkManaged), or it holds entries for it (a store written before
// identities were recorded).
func (is Identity) Managed(bridge string) (bool, error) {
	var managed bool
	err := is.db.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketManaged).Get([]byte(bridge)) != nil {
			managed = true
			return nil
		}
		br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
		if br == nil {
			return nil
		}
		return br.ForEachBucket(func(k []byte) error {
			if kb := br.Bucket(k); kb != nil {
				if first, _ := kb.Cursor().First(); first != nil {
					managed = true
				}
			}
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("store: bridge %s: %w", bridge, err)
	}
	return managed, nil
}

// MarkManaged records that this store manages bridge from now on.
func (is Identity) MarkManaged(bridge string, now time.Time) error {
	err := is.db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketManaged)
		if b.Get([]byte(bridge)) != nil {
			return nil
		}
		return b.Put([]byte(bridge), []byte(now.UTC().Format(time.RFC3339Nano)))
	})
	if err != nil {
		return fmt.Errorf("store: bridge %s: %w", bridge, err)
	}
	return nil
}
