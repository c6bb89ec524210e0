package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A record, the value of a desired entry (doc.go): version | len(module) |
// module | payload | sum.

func bridgeBucket(tx *bolt.Tx, bridge string, create bool) (*bolt.Bucket, error) {
	root := tx.Bucket(bucketBridges)
	if create {
		return root.CreateBucketIfNotExists([]byte(bridge))
	}
	if b := root.Bucket([]byte(bridge)); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("bridge %q holds no entries: %w", bridge, errdefs.ErrNotFound)
}

func kindBucket(br *bolt.Bucket, kind entry.Kind, create bool) (*bolt.Bucket, error) {
	name, ok := kindBuckets[kind]
	if !ok {
		return nil, fmt.Errorf("invalid entry kind %d: %w", kind, errdefs.ErrInvalidArgument)
	}
	if create {
		return br.CreateBucketIfNotExists(name)
	}
	return br.Bucket(name), nil
}

func encodeRecord(key []byte, module string, payload []byte) []byte {
	return appendRecord(make([]byte, 0, 2+len(module)+len(payload)+sumSize), key, module, payload)
}

// appendRecord appends the record of module's payload stored at key, its
// checksum last (sum.go).
func appendRecord(b, key []byte, module string, payload []byte) []byte {
	at := len(b)
	b = append(b, recordVersion, byte(len(module)))
	b = append(b, module...)
	b = append(b, payload...)
	return appendSum(b, key, at)
}

// decodeRecord returns copies: bbolt's slices are valid only inside the
// transaction. The record must be stored at key k (its checksum covers it).
func decodeRecord(k, v []byte) (module string, payload []byte, err error) {
	owner, p, err := openRecord(k, v)
	if err != nil {
		return "", nil, err
	}
	return string(owner), bytes.Clone(p), nil
}

// recordOwner returns the module of the record v stored at k, aliasing v.
func recordOwner(k, v []byte) ([]byte, error) {
	owner, _, err := openRecord(k, v)
	return owner, err
}

// openRecord checks the checksum of the record v stored at key k and returns
// its module and payload, aliasing v. Every error is a damageError.
func openRecord(k, v []byte) (owner, payload []byte, err error) {
	if _, err := unseal(k, v); err != nil {
		return nil, nil, err
	}
	return splitRecord(v)
}

// splitRecord returns the module and payload of record v without checking
// its checksum.
func splitRecord(v []byte) (owner, payload []byte, err error) {
	if len(v) < 2+sumSize || v[0] != recordVersion {
		return nil, nil, damageError("corrupt record: bad version")
	}
	n := int(v[1])
	if len(v) < 2+n+sumSize {
		return nil, nil, damageError("corrupt record: truncated module name")
	}
	return v[2 : 2+n], v[2+n : len(v)-sumSize], nil
}
