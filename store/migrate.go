package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// migration brings a store from schema version to-1 to version to, inside
// the transaction that records the new version.
type migration struct {
	to   uint32
	what string
	fn   func(tx *bolt.Tx) error
}

// migrations, in order; the last one's version is SchemaVersion.
var migrations = []migration{
	{to: 2, what: "index which flows use which group or meter (refs buckets)", fn: migrateRefs},
	{to: 3, what: "a checksum on every record and mirrored payload (sum.go)", fn: migrateSums},
}

// migrate runs the migrations after version from. A store of a newer schema
// is refused: this flowstated would not keep its layout.
func migrate(tx *bolt.Tx, from uint32) error {
	if from > SchemaVersion {
		return fmt.Errorf("schema version %d, this flowstated understands %d: run a newer flowstated", from, SchemaVersion)
	}
	for _, m := range migrations {
		if m.to <= from {
			continue
		}
		if err := m.fn(tx); err != nil {
			return fmt.Errorf("migrating to schema version %d (%s): %w", m.to, m.what, err)
		}
	}
	return nil
}

// migrateRefs builds the refs bucket of every bridge from its flows.
func migrateRefs(tx *bolt.Tx) error {
	root := tx.Bucket(bucketBridges)
	return root.ForEachBucket(func(name []byte) error {
		br := root.Bucket(name)
		fb := br.Bucket(kindBuckets[entry.KindFlow])
		if fb == nil {
			return nil
		}
		type flow struct{ module, id, payload []byte }
		var flows []flow
		err := fb.ForEach(func(k, v []byte) error {
			owner, payload, err := splitAnyRecord(k, v)
			if err != nil {
				return fmt.Errorf("bridge %s flow %x: %w", name, k, err)
			}
			flows = append(flows, flow{bytes.Clone(owner), bytes.Clone(k), bytes.Clone(payload)})
			return nil
		})
		if err != nil {
			return err
		}
		var refs refMoves
		for _, f := range flows {
			refs.move(string(f.module), f.id, nil, f.payload)
		}
		return refs.apply(br)
	})
}

// recordVersionV1 is the record of schemas 1 and 2: version (1) | len(module)
// | module | payload, without a checksum.
const recordVersionV1 = 1

func splitRecordV1(v []byte) (owner, payload []byte, err error) {
	if len(v) < 2 || v[0] != recordVersionV1 {
		return nil, nil, errors.New("corrupt record: bad version")
	}
	n := int(v[1])
	if len(v) < 2+n {
		return nil, nil, errors.New("corrupt record: truncated module name")
	}
	return v[2 : 2+n], v[2+n:], nil
}

// splitAnyRecord reads a record of version 1, or of version 2 with its
// checksum checked: a migration from schema 1 may meet records sealed ahead
// of it (sealInChunks).
func splitAnyRecord(k, v []byte) (owner, payload []byte, err error) {
	if len(v) > 0 && v[0] == recordVersion {
		return openRecord(k, v)
	}
	return splitRecordV1(v)
}

// sealChunk is how many records one transaction of sealInChunks rewrites.
const sealChunk = 20_000

// sealInChunks does the record rewriting of migrateSums ahead of it, in
// transactions of sealChunk records, so that the migration of a large store
// does not hold every record of it in one transaction's memory (1M flows:
// about 700 MB). It runs before Open's migrations, only on a store whose
// schema is older than 3; a crash half-way leaves records of both versions,
// which the next Open continues from (a sealed one is checked, not resealed).
// migrateSums then finds every record sealed and only checks them.
func sealInChunks(db *trackedDB) error {
	old := false
	if err := db.view(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			if v := meta.Get(keySchema); len(v) == 4 && binary.BigEndian.Uint32(v) < 3 {
				old = true
			}
		}
		return nil
	}); err != nil || !old {
		return err
	}
	var bridges [][]byte
	if err := db.view(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketBridges)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(name []byte) error {
			bridges = append(bridges, bytes.Clone(name))
			return nil
		})
	}); err != nil {
		return err
	}
	for _, name := range bridges {
		for _, kind := range entry.Kinds {
			var resume []byte
			for done := false; !done; {
				err := db.update(func(tx *bolt.Tx) error {
					kb := tx.Bucket(bucketBridges).Bucket(name).Bucket(kindBuckets[kind])
					if kb == nil {
						done = true
						return nil
					}
					c := kb.Cursor()
					k, v := c.First()
					if resume != nil {
						k, v = c.Seek(resume)
					}
					for n := 0; ; n++ {
						if k == nil {
							done = true
							return nil
						}
						if n == sealChunk {
							resume = bytes.Clone(k)
							return nil
						}
						if v != nil && (len(v) == 0 || v[0] != recordVersion) {
							owner, payload, err := splitRecordV1(v)
							if err != nil {
								return fmt.Errorf("bridge %s %s key %s: %w", name, kind, keyHex(k), err)
							}
							k = bytes.Clone(k)
							if err := kb.Put(k, encodeRecord(k, string(owner), payload)); err != nil {
								return err
							}
							c.Seek(k)
						}
						k, v = c.Next()
					}
				})
				if err != nil {
					return fmt.Errorf("sealing records: %w", err)
				}
			}
		}
	}
	return nil
}

// migrateSums rewrites every record of version 1 as version 2, which ends
// with its checksum, and seals every mirrored payload (sum.go). A value that
// already has a checksum is checked instead: a store whose schema version
// was damaged is not resealed over damage.
func migrateSums(tx *bolt.Tx) error {
	root := tx.Bucket(bucketBridges)
	err := root.ForEachBucket(func(name []byte) error {
		br := root.Bucket(name)
		for _, kind := range entry.Kinds {
			kb := br.Bucket(kindBuckets[kind])
			if kb == nil {
				continue
			}
			err := rewriteValues(kb, func(k, v []byte) ([]byte, error) {
				if len(v) > 0 && v[0] == recordVersion {
					_, _, err := openRecord(k, v)
					return nil, err
				}
				owner, payload, err := splitRecordV1(v)
				if err != nil {
					return nil, err
				}
				return encodeRecord(k, string(owner), payload), nil
			})
			if err != nil {
				return fmt.Errorf("bridge %s %s: %w", name, kind, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	mr := tx.Bucket(bucketMirror)
	if mr == nil {
		return nil
	}
	return mr.ForEachBucket(func(name []byte) error {
		br := mr.Bucket(name)
		for _, kind := range entry.Kinds {
			if kb := br.Bucket(kindBuckets[kind]); kb != nil {
				if err := rewriteValues(kb, func(k, v []byte) ([]byte, error) { return sealed(k, v), nil }); err != nil {
					return fmt.Errorf("mirror %s %s: %w", name, kind, err)
				}
			}
		}
		return nil
	})
}

// rewriteValues replaces each value of b with what fn returns for it (nil:
// kept), in one pass of a cursor re-positioned after each Put.
func rewriteValues(b *bolt.Bucket, fn func(k, v []byte) ([]byte, error)) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			continue // a nested bucket
		}
		nv, err := fn(k, v)
		if err != nil {
			return fmt.Errorf("key %x: %w", k, err)
		}
		if nv == nil {
			continue
		}
		k = bytes.Clone(k)
		if err := b.Put(k, nv); err != nil {
			return err
		}
		c.Seek(k)
	}
	return nil
}
