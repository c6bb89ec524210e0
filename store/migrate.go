package store

import (
	"bytes"
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
			owner, payload, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("bridge %s flow %x: %w", name, k, err)
			}
			flows = append(flows, flow{[]byte(owner), bytes.Clone(k), payload})
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
