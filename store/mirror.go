package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// Mirrors: what the switch held on bridges flowstated does not manage, so a
// restart of vswitchd under flow-restore-wait brings them back as ovs-save
// would. A mirror is the dump of a bridge, not desired state: no module owns
// its entries, and it is replaced whole.
// (bucketMirror, keyHash, buckets.go)

// Mirrors are the copies of unmanaged bridges, as last dumped. Store.Mirrors
// makes one.
type Mirrors struct {
	db     *trackedDB
	damage *damaged
}

// Set makes es the mirror of bridge and reports whether it changed. It
// compares a hash of es with the stored one in a read transaction first, so
// the periodic refresh of an unchanged bridge costs no write and no fsync.
// es need not be sorted; their Module is ignored.
func (mr Mirrors) Set(bridge string, es []entry.Entry) (changed bool, err error) {
	sum := mirrorHash(es)
	var same bool
	if err := mr.db.view(func(tx *bolt.Tx) error {
		same = bytes.Equal(storedMirrorHash(tx, bridge), sum)
		return nil
	}); err != nil {
		return false, fmt.Errorf("store: mirror of %s: %w", bridge, err)
	}
	if same {
		return false, nil
	}
	err = mr.db.update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bucketMirror)
		if err != nil {
			return err
		}
		if root.Bucket([]byte(bridge)) != nil {
			if err := root.DeleteBucket([]byte(bridge)); err != nil {
				return err
			}
		}
		br, err := root.CreateBucket([]byte(bridge))
		if err != nil {
			return err
		}
		for _, at := range newKeyOrder(es).idx { // in key order, as Put
			e := es[at]
			kb, err := kindBucket(br, e.Kind, true)
			if err != nil {
				return err
			}
			if err := kb.Put(e.ID, sealed(e.ID, e.Payload)); err != nil {
				return err
			}
		}
		return br.Put(keyHash, sum)
	})
	if err != nil {
		return false, fmt.Errorf("store: mirror of %s: %w", bridge, err)
	}
	return true, nil
}

// Get returns the mirror of bridge, ordered by kind and identity; ok is
// false when there is none. The entries have no Module. An entry whose
// checksum does not match is left out and recorded (File.Damaged).
func (mr Mirrors) Get(bridge string) (es []entry.Entry, ok bool, err error) {
	err = mr.db.view(func(tx *bolt.Tx) error {
		br := mirrorBucket(tx, bridge)
		if br == nil {
			return nil
		}
		ok = true
		for _, kind := range entry.Kinds {
			kb := br.Bucket(kindBuckets[kind])
			if kb == nil {
				continue
			}
			if err := kb.ForEach(func(k, v []byte) error {
				p, err := unseal(k, v)
				if err != nil {
					// Damaged (sum.go): left out, and recorded.
					mr.damage.note(string(bucketMirror), bridge, kind, k, v, err)
					return nil
				}
				es = append(es, entry.Entry{Kind: kind, ID: bytes.Clone(k), Payload: bytes.Clone(p)})
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("store: mirror of %s: %w", bridge, err)
	}
	return es, ok, nil
}

// Bridges returns the bridges that have a mirror, sorted.
func (mr Mirrors) Bridges() ([]string, error) {
	var out []string
	err := mr.db.view(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketMirror)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(name []byte) error {
			out = append(out, string(name))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: mirrored bridges: %w", err)
	}
	return out, nil
}

// Delete forgets the mirror of bridge (a bridge deleted from OVSDB).
// Deleting a mirror that does not exist is not an error.
func (mr Mirrors) Delete(bridge string) error {
	err := mr.db.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketMirror)
		if root == nil || root.Bucket([]byte(bridge)) == nil {
			return nil
		}
		return root.DeleteBucket([]byte(bridge))
	})
	if err != nil {
		return fmt.Errorf("store: delete mirror of %s: %w", bridge, err)
	}
	return nil
}

func mirrorBucket(tx *bolt.Tx, bridge string) *bolt.Bucket {
	root := tx.Bucket(bucketMirror)
	if root == nil {
		return nil
	}
	return root.Bucket([]byte(bridge))
}

func storedMirrorHash(tx *bolt.Tx, bridge string) []byte {
	if br := mirrorBucket(tx, bridge); br != nil {
		return br.Get(keyHash)
	}
	return nil
}

// mirrorHash is a SHA-256 over the entries in (kind, identity) order, each
// framed by its lengths, so the order of a dump does not matter.
func mirrorHash(es []entry.Entry) []byte {
	sorted := slices.Clone(es)
	slices.SortFunc(sorted, func(a, b entry.Entry) int {
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return bytes.Compare(a.ID, b.ID)
	})
	h := sha256.New()
	var n [9]byte
	for _, e := range sorted {
		n[0] = byte(e.Kind)
		binary.BigEndian.PutUint32(n[1:], uint32(len(e.ID)))
		binary.BigEndian.PutUint32(n[5:], uint32(len(e.Payload)))
		h.Write(n[:])
		h.Write(e.ID)
		h.Write(e.Payload)
	}
	return h.Sum(nil)
}
