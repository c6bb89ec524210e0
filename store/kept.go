package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Entries left alone: per bridge, what the controllers that the OpenFlow
// proxy relays without recording (OpenFlow < 1.5) installed, so that a
// restarted flowstated does not delete them as undeclared while the same
// vswitchd runs (server/restore, kept.go). Identities and rules are keys,
// each value only its checksum; the record names the vswitchd it belongs
// to. No schema version: a store without the bucket reads as one where
// nothing is left alone, and an older flowstated ignores it.
// (bucketKept, buckets.go)

// KeptRecord is what one bridge's unrecorded controllers installed.
type KeptRecord struct {
	// Vswitchd is the ovs-vswitchd (pid@start) the set was filled under,
	// "" when unknown.
	Vswitchd string
	// All: the set overflowed, every undeclared entry is left alone.
	All bool
	// IDs are kind | identity of each entry.
	IDs [][]byte
	// Rules are table<<16 | priority of the flows kept by rule.
	Rules []uint32
}

// Empty reports whether r keeps nothing.
func (r KeptRecord) Empty() bool { return !r.All && len(r.IDs) == 0 && len(r.Rules) == 0 }

// KeptUpdate is a change to a bridge's KeptRecord.
type KeptUpdate struct {
	// Replace drops what is stored before the rest applies.
	Replace bool
	// Vswitchd and All replace the record's.
	Vswitchd string
	All      bool
	// Put and Delete add and remove identities, PutRules and DeleteRules
	// rules.
	Put, Delete           [][]byte
	PutRules, DeleteRules []uint32
}

var (
	keyKeptVswitchd = []byte("vswitchd")
	keyKeptAll      = []byte("all")
	bucketKeptIDs   = []byte("id")
	bucketKeptRules = []byte("rule")
)

// Kept is what unrecorded controllers installed and flowstated leaves
// alone, one record a bridge. Store.Kept makes one.
type Kept struct{ db *trackedDB }

// Get returns the record of bridge (the empty record if none). A value
// whose checksum does not match fails it, naming the key: the caller
// cannot tell what is kept.
func (kp Kept) Get(bridge string) (KeptRecord, error) {
	var r KeptRecord
	err := kp.db.view(func(tx *bolt.Tx) error {
		b := keptBucket(tx, bridge)
		if b == nil {
			return nil
		}
		if v := b.Get(keyKeptVswitchd); v != nil {
			id, err := unseal(keyKeptVswitchd, v)
			if err != nil {
				return fmt.Errorf("key %s: %w", keyKeptVswitchd, err)
			}
			r.Vswitchd = string(id)
		}
		if v := b.Get(keyKeptAll); v != nil {
			if _, err := unseal(keyKeptAll, v); err != nil {
				return fmt.Errorf("key %s: %w", keyKeptAll, err)
			}
			r.All = true
		}
		if ib := b.Bucket(bucketKeptIDs); ib != nil {
			if err := ib.ForEach(func(k, v []byte) error {
				if _, err := unseal(k, v); err != nil {
					return fmt.Errorf("%s key %s: %w", bucketKeptIDs, keyHex(k), err)
				}
				r.IDs = append(r.IDs, bytes.Clone(k))
				return nil
			}); err != nil {
				return err
			}
		}
		if rb := b.Bucket(bucketKeptRules); rb != nil {
			return rb.ForEach(func(k, v []byte) error {
				if _, err := unseal(k, v); err != nil {
					return fmt.Errorf("%s key %s: %w", bucketKeptRules, keyHex(k), err)
				}
				if len(k) != 4 {
					return fmt.Errorf("%s key %s: %d bytes, want 4", bucketKeptRules, keyHex(k), len(k))
				}
				r.Rules = append(r.Rules, binary.BigEndian.Uint32(k))
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return KeptRecord{}, fmt.Errorf("store: entries left alone on %s: %w", bridge, err)
	}
	return r, nil
}

// Update applies u to the record of bridge, durably, in one
// transaction; a record left keeping nothing is deleted.
func (kp Kept) Update(bridge string, u KeptUpdate) error {
	err := kp.db.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketKept)
		if u.Replace && root != nil && root.Bucket([]byte(bridge)) != nil {
			if err := root.DeleteBucket([]byte(bridge)); err != nil {
				return err
			}
		}
		if root == nil || root.Bucket([]byte(bridge)) == nil {
			if !u.All && len(u.Put) == 0 && len(u.PutRules) == 0 {
				return nil // nothing stored, nothing to keep
			}
		}
		root, err := tx.CreateBucketIfNotExists(bucketKept)
		if err != nil {
			return err
		}
		b, err := root.CreateBucketIfNotExists([]byte(bridge))
		if err != nil {
			return err
		}
		if err := b.Put(keyKeptVswitchd, sealed(keyKeptVswitchd, []byte(u.Vswitchd))); err != nil {
			return err
		}
		if u.All {
			err = b.Put(keyKeptAll, sealed(keyKeptAll, nil))
		} else {
			err = b.Delete(keyKeptAll)
		}
		if err != nil {
			return err
		}
		rules := make([][]byte, 0, len(u.PutRules))
		for _, r := range u.PutRules {
			rules = append(rules, binary.BigEndian.AppendUint32(nil, r))
		}
		delRules := make([][]byte, 0, len(u.DeleteRules))
		for _, r := range u.DeleteRules {
			delRules = append(delRules, binary.BigEndian.AppendUint32(nil, r))
		}
		someIDs, err := keptKeys(b, bucketKeptIDs, u.Put, u.Delete)
		if err != nil {
			return err
		}
		someRules, err := keptKeys(b, bucketKeptRules, rules, delRules)
		if err != nil {
			return err
		}
		if !u.All && !someIDs && !someRules {
			return root.DeleteBucket([]byte(bridge))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: entries left alone on %s: %w", bridge, err)
	}
	return nil
}

// keptKeys deletes del and puts put in b's sub-bucket name, and reports
// whether it then holds any key (an empty one is deleted).
func keptKeys(b *bolt.Bucket, name []byte, put, del [][]byte) (bool, error) {
	sb := b.Bucket(name)
	if sb == nil {
		if len(put) == 0 {
			return false, nil
		}
		var err error
		if sb, err = b.CreateBucket(name); err != nil {
			return false, err
		}
	}
	for _, k := range del {
		if err := sb.Delete(k); err != nil {
			return false, err
		}
	}
	for _, k := range put {
		if len(k) == 0 {
			return false, errors.New("an empty identity")
		}
		if err := sb.Put(k, sealed(k, nil)); err != nil {
			return false, err
		}
	}
	if k, _ := sb.Cursor().First(); k == nil {
		return false, b.DeleteBucket(name)
	}
	return true, nil
}

// keptBucket returns bridge's bucket under kept, nil when absent.
func keptBucket(tx *bolt.Tx, bridge string) *bolt.Bucket {
	root := tx.Bucket(bucketKept)
	if root == nil {
		return nil
	}
	return root.Bucket([]byte(bridge))
}
