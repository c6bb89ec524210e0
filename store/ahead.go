package store

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// What the switch holds apart from the store. A proxied controller's resync
// (server/restore/write, resync.go) stores a change to an entry its module
// held before the clear at once and sends it to the switch at the end, and
// keeps on the switch until then what the clear deleted from the store. The
// switch's copies of those entries are recorded here, in the write that
// makes them, so that a flowstated started after one that died mid-resync
// knows them for what they are: after the guard relayed the controller, its
// learning (server/restore/owner, adopt.go) does not take them for the
// controller's doing. A reconcile makes the switch the store's again, and
// Placed.SetVswitchd drops the bridge's record. No schema version: a store
// without the bucket reads as one where the switch holds the store's
// entries, and an older flowstated ignores it. (bucketAhead, buckets.go)
//
// A value is the digest of the switch's form of its copy (AheadDigest), and
// its sum; the key is module | 0 | the entry's key (its kind and identity).

// AheadDigest is the digest recorded of form, the switch's form of an entry
// (canon.Forms.Form): as a dump gives it back.
type AheadDigest [16]byte

// DigestOf is the AheadDigest of form.
func DigestOf(form []byte) AheadDigest {
	sum := sha256.Sum256(form)
	return AheadDigest(sum[:16])
}

// Ahead reads the switch's copies recorded for a bridge. Store.Ahead makes
// one.
type Ahead struct{ db *trackedDB }

// Of returns, by entry key, what bridge's switch holds of module's entries
// apart from the store; empty when nothing is recorded. A value whose sum
// does not match fails it.
func (a Ahead) Of(bridge, module string) (map[string]AheadDigest, error) {
	out := map[string]AheadDigest{}
	err := a.db.view(func(tx *bolt.Tx) error {
		return eachAhead(tx, bridge, module, func(key string, d AheadDigest) { out[key] = d })
	})
	if err != nil {
		return nil, fmt.Errorf("store: the switch's copies of %s/%s: %w", bridge, module, err)
	}
	return out, nil
}

func eachAhead(tx *bolt.Tx, bridge, module string, fn func(string, AheadDigest)) error {
	b := aheadBucket(tx, bridge)
	if b == nil {
		return nil
	}
	prefix := append([]byte(module), 0)
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		raw, err := unseal(k, v)
		if err != nil {
			return fmt.Errorf("key %q: %w", k[len(prefix):], err)
		}
		if len(raw) != len(AheadDigest{}) {
			return fmt.Errorf("key %q: %d bytes, want %d", k[len(prefix):], len(raw), len(AheadDigest{}))
		}
		fn(string(k[len(prefix):]), AheadDigest(raw))
	}
	return nil
}

func aheadBucket(tx *bolt.Tx, bridge string) *bolt.Bucket {
	top := tx.Bucket(bucketAhead)
	if top == nil {
		return nil
	}
	return top.Bucket([]byte(bridge))
}

func aheadKey(module, key string) []byte {
	return append(append([]byte(module), 0), key...)
}

// SetAhead records, in the write's transaction, that bridge's switch holds
// form (the switch's form) for module's entry of key, apart from what the
// store holds of it.
func (w *Writer) SetAhead(bridge, module, key string, form []byte) error {
	top, err := w.tx.CreateBucketIfNotExists(bucketAhead)
	if err != nil {
		return fmt.Errorf("store: the switch's copy of %s/%s: %w", bridge, module, err)
	}
	b, err := top.CreateBucketIfNotExists([]byte(bridge))
	if err != nil {
		return fmt.Errorf("store: the switch's copy of %s/%s: %w", bridge, module, err)
	}
	k, d := aheadKey(module, key), DigestOf(form)
	if err := b.Put(k, sealed(k, d[:])); err != nil {
		return fmt.Errorf("store: the switch's copy of %s/%s: %w", bridge, module, err)
	}
	return nil
}

// DropAhead records, in the write's transaction, that bridge's switch holds
// what the store holds of module's entry of key (or neither holds it).
func (w *Writer) DropAhead(bridge, module, key string) error {
	b := aheadBucket(w.tx, bridge)
	if b == nil {
		return nil
	}
	if err := b.Delete(aheadKey(module, key)); err != nil {
		return fmt.Errorf("store: the switch's copy of %s/%s: %w", bridge, module, err)
	}
	return nil
}

// ClearAhead records, in the write's transaction, that bridge's switch holds
// what the store holds of every entry of module.
func (w *Writer) ClearAhead(bridge, module string) error {
	b := aheadBucket(w.tx, bridge)
	if b == nil {
		return nil
	}
	prefix := append([]byte(module), 0)
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return fmt.Errorf("store: the switch's copies of %s/%s: %w", bridge, module, err)
		}
	}
	return nil
}

// dropAheadOf deletes the record of bridge, if any: its switch holds the
// store's entries (Placed.SetVswitchd).
func dropAheadOf(tx *bolt.Tx, bridge string) error {
	top := tx.Bucket(bucketAhead)
	if top == nil || top.Bucket([]byte(bridge)) == nil {
		return nil
	}
	return top.DeleteBucket([]byte(bridge))
}

// hasAhead reports whether anything is recorded for bridge.
func hasAhead(tx *bolt.Tx, bridge string) bool {
	b := aheadBucket(tx, bridge)
	if b == nil {
		return false
	}
	k, _ := b.Cursor().First()
	return k != nil
}
