package store

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Standing aside: the bridges flowstated decided not to manage (another
// store's, or holding flows this store never declared). The decision is
// kept here because its evidence does not last: a vswitchd restart empties
// the bridge, and an empty bridge would otherwise be claimed for this
// store's empty state. It holds until the bridge is adopted (ClearStoodAside).
// (bucketAside, buckets.go)

// StoodAside is why and since when flowstated stands aside from a bridge.
type StoodAside struct {
	Since  time.Time
	Reason string
}

// SetStoodAside records that flowstated stands aside from bridge and returns
// the record kept: a bridge already recorded keeps its first decision.
func (is Identity) SetStoodAside(bridge string, a StoodAside) (StoodAside, error) {
	kept, found := a, false
	// Every round of a bridge standing aside calls this: a kept decision
	// costs a read, not a write and an fsync.
	err := is.db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketAside); b != nil {
			if v := b.Get([]byte(bridge)); v != nil {
				var err error
				kept, err = decodeAside(v)
				found = true
				return err
			}
		}
		return nil
	})
	if err != nil || found {
		if err != nil {
			return StoodAside{}, fmt.Errorf("store: stand aside from bridge %s: %w", bridge, err)
		}
		return kept, nil
	}
	err = is.db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketAside)
		if err != nil {
			return err
		}
		if v := b.Get([]byte(bridge)); v != nil {
			kept, err = decodeAside(v)
			return err
		}
		return b.Put([]byte(bridge), encodeAside(a))
	})
	if err != nil {
		return StoodAside{}, fmt.Errorf("store: stand aside from bridge %s: %w", bridge, err)
	}
	return kept, nil
}

// StoodAsideBridges returns the recorded decisions by bridge.
func (is Identity) StoodAsideBridges() (map[string]StoodAside, error) {
	out := map[string]StoodAside{}
	err := is.db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAside)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			a, err := decodeAside(v)
			if err != nil {
				return fmt.Errorf("bridge %s: %w", k, err)
			}
			out[string(k)] = a
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: bridges stood aside from: %w", err)
	}
	return out, nil
}

// ClearStoodAside forgets the decision for bridge (a no-op without one): the
// bridge was adopted.
func (is Identity) ClearStoodAside(bridge string) error {
	var present bool
	if err := is.db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAside)
		present = b != nil && b.Get([]byte(bridge)) != nil
		return nil
	}); err != nil || !present {
		// Every claim calls this: an adopted bridge costs no write.
		if err != nil {
			return fmt.Errorf("store: adopt bridge %s: %w", bridge, err)
		}
		return nil
	}
	err := is.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAside).Delete([]byte(bridge))
	})
	if err != nil {
		return fmt.Errorf("store: adopt bridge %s: %w", bridge, err)
	}
	return nil
}

// A record is "RFC 3339 time \n reason".
func encodeAside(a StoodAside) []byte {
	return []byte(a.Since.UTC().Format(time.RFC3339Nano) + "\n" + a.Reason)
}

func decodeAside(v []byte) (StoodAside, error) {
	ts, reason, ok := bytes.Cut(v, []byte("\n"))
	if !ok {
		return StoodAside{}, fmt.Errorf("stand-aside record %q: no reason", v)
	}
	since, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return StoodAside{}, fmt.Errorf("stand-aside record: %w", err)
	}
	return StoodAside{Since: since, Reason: string(reason)}, nil
}
