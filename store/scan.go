package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// scanChunk is how many records one read transaction of ScanFlows reads: a
// scan of a million flows never holds one transaction (and with it bbolt's
// remap of a growing file, which writers of other bridges may need) for the
// whole replay.
const scanChunk = 4096

// StopScan ends a ScanFlows scan without an error when its callback returns
// it, as filepath.SkipAll does for a walk.
var StopScan = errors.New("store: stop scan") //nolint:revive,staticcheck // named like filepath.SkipAll, not ErrX: it is not a failure

// Record is one desired entry as ScanFlows reads it. Its slices alias the
// store's pages: they are valid only during the call that receives them.
type Record struct {
	ID, Payload, Module []byte
}

// ScanFlows calls fn for every flow of bridge in identity order (table,
// priority, match), starting at the first identity not below from (nil: the
// first), without copying. A flow whose checksum does not match is left out
// and recorded (File.Damaged). It reads in transactions of scanChunk records, so
// a caller that needs the flows not to change between chunks must keep the
// bridge's writers out (the engine holds the bridge's lock).
func (en Entries) ScanFlows(bridge string, from []byte, fn func(Record) error) error {
	next := from
	var fnErr error
	for {
		var last []byte
		n := 0
		err := en.s.db.view(func(tx *bolt.Tx) error {
			br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
			if br == nil {
				return nil
			}
			kb := br.Bucket(kindBuckets[entry.KindFlow])
			if kb == nil {
				return nil
			}
			c := kb.Cursor()
			k, v := c.First()
			if next != nil {
				k, v = c.Seek(next)
			}
			for ; k != nil; k, v = c.Next() {
				if n == scanChunk {
					last = bytes.Clone(k)
					return nil
				}
				owner, payload, err := openRecord(k, v)
				if err != nil {
					// Damaged: left out, and recorded (sum.go).
					en.s.damage.note(string(bucketBridges), bridge, entry.KindFlow, k, v, err)
					n++
					continue
				}
				if err := fn(Record{ID: k, Payload: payload, Module: owner}); err != nil {
					fnErr = err
					return err
				}
				n++
			}
			return nil
		})
		switch {
		case errors.Is(err, StopScan):
			return nil
		case fnErr != nil:
			// The caller's own failure (a switch that went away
			// during a replay): not the store's to claim.
			return fnErr
		case err != nil:
			return fmt.Errorf("store: scan flows: %w", err)
		case last == nil:
			return nil
		}
		next = last
	}
}

// RefTargets returns the groups and meters that flows of bridge use, each
// once, in key order.
func (en Entries) RefTargets(bridge string) ([]entry.Ref, error) {
	var out []entry.Ref
	err := en.s.db.view(func(tx *bolt.Tx) error {
		rb := refsBucket(tx, bridge)
		if rb == nil {
			return nil
		}
		c := rb.Cursor()
		for k, _ := c.First(); k != nil; {
			if len(k) < 5 {
				return fmt.Errorf("bridge %s: corrupt refs key %x", bridge, k)
			}
			r := entry.Ref{Kind: entry.Kind(k[0]), ID: binary.BigEndian.Uint32(k[1:5])}
			out = append(out, r)
			succ, ok := prefixSuccessor(k[:5])
			if !ok {
				break
			}
			k, _ = c.Seek(succ)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: ref targets: %w", err)
	}
	return out, nil
}

// EachUser calls fn with the identity of every flow of bridge that uses r, in
// identity order, in one read transaction; the slice is valid only during
// the call.
func (en Entries) EachUser(bridge string, r entry.Ref, fn func(flowID []byte) error) error {
	err := en.s.db.view(func(tx *bolt.Tx) error {
		rb := refsBucket(tx, bridge)
		if rb == nil {
			return nil
		}
		prefix := refPrefix(r.Kind, r.Key())
		c := rb.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if err := fn(k[len(prefix):]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: users of %s: %w", r, err)
	}
	return nil
}

// Get returns the desired entry of bridge with the given kind and identity,
// and whether there is one. Its slices are copies.
func (en Entries) Get(bridge string, kind entry.Kind, id []byte) (entry.Entry, bool, error) {
	var e entry.Entry
	found := false
	err := en.s.db.view(func(tx *bolt.Tx) error {
		var err error
		e, found, err = getEntry(tx, &en.s.damage, bridge, kind, id)
		return err
	})
	if err != nil {
		return entry.Entry{}, false, fmt.Errorf("store: get: %w", err)
	}
	return e, found, nil
}

// getEntry is Get in transaction tx. A damaged record reads as absent, and
// is recorded in d (sum.go).
func getEntry(tx *bolt.Tx, d *damaged, bridge string, kind entry.Kind, id []byte) (entry.Entry, bool, error) {
	br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
	if br == nil {
		return entry.Entry{}, false, nil
	}
	kb, err := kindBucket(br, kind, false)
	if err != nil || kb == nil {
		return entry.Entry{}, false, err
	}
	v := kb.Get(id)
	if v == nil {
		return entry.Entry{}, false, nil
	}
	e, ok := d.readEntry(bridge, kind, id, v)
	return e, ok, nil
}

// readEntry is the entry of the record v stored at k in bridge's kind
// bucket, with copies of its bytes; a damaged record is recorded in d
// (sum.go) and reads as absent.
func (d *damaged) readEntry(bridge string, kind entry.Kind, k, v []byte) (entry.Entry, bool) {
	owner, payload, err := decodeRecord(k, v)
	if err != nil {
		d.note(string(bucketBridges), bridge, kind, k, v, err)
		return entry.Entry{}, false
	}
	return entry.Entry{Kind: kind, Module: owner, ID: bytes.Clone(k), Payload: payload}, true
}

// Get is Entries.Get inside the write transaction: it sees the writes made
// in it so far.
func (w *Writer) Get(bridge string, kind entry.Kind, id []byte) (entry.Entry, bool, error) {
	e, ok, err := getEntry(w.tx, &w.s.damage, bridge, kind, id)
	if err != nil {
		return entry.Entry{}, false, fmt.Errorf("store: get: %w", err)
	}
	return e, ok, nil
}

// Each calls fn, in identity order, for every entry of kind that module
// holds on bridge, inside the write transaction; fn must not write. A
// damaged record is left out and recorded, as in List.
func (w *Writer) Each(bridge, module string, kind entry.Kind, fn func(entry.Entry) error) error {
	br := w.tx.Bucket(bucketBridges).Bucket([]byte(bridge))
	if br == nil {
		return nil
	}
	kb, err := kindBucket(br, kind, false)
	if err != nil {
		return fmt.Errorf("store: each: %w", err)
	}
	if kb == nil {
		return nil
	}
	c := kb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		e, ok := w.s.damage.readEntry(bridge, kind, k, v)
		if !ok || e.Module != module {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func refsBucket(tx *bolt.Tx, bridge string) *bolt.Bucket {
	br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
	if br == nil {
		return nil
	}
	return br.Bucket(bucketRefs)
}

// prefixSuccessor returns the smallest key above every key with prefix p, and
// false when there is none (p is all 0xff).
func prefixSuccessor(p []byte) ([]byte, bool) {
	s := bytes.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] < 0xff {
			s[i]++
			return s[:i+1], true
		}
	}
	return nil, false
}
