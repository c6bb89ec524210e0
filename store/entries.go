package store

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// Entries are the desired entries of every bridge, as read outside a write
// (Store.Update writes them): List and All, Get, ScanFlows, the refs index
// (RefTargets, EachUser), Counts and PlanPut. Store.Entries makes one.
type Entries struct{ s *Store }

// Filter selects entries for List. Zero fields match everything.
type Filter struct {
	Bridge string
	Module string
	Kind   entry.Kind
	// Table, when not nil, keeps only flows of that table.
	Table *uint8
}

// List calls fn for every entry that matches f, ordered by bridge, kind and
// identity. The entry's slices are copies. It reads in transactions of
// scanChunk records, as ScanFlows does, so a large store is never held by
// one read transaction (which would keep every page writes free from
// reuse): a caller that needs the entries not to change between chunks
// must keep the bridge's writers out. An entry whose checksum does not
// match is left out and recorded (File.Damaged).
func (en Entries) List(f Filter, fn func(bridge string, e entry.Entry) error) error {
	var bridges []string
	err := en.s.db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBridges).ForEachBucket(func(name []byte) error {
			if f.Bridge == "" || string(name) == f.Bridge {
				bridges = append(bridges, string(name))
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: list: %w", err)
	}
	for _, bridge := range bridges {
		for _, kind := range entry.Kinds {
			if (f.Kind != 0 && f.Kind != kind) || (f.Table != nil && kind != entry.KindFlow) {
				continue
			}
			if err := en.listKind(bridge, kind, f, fn); err != nil {
				return fmt.Errorf("store: list: %w", err)
			}
		}
	}
	return nil
}

// listKind is List of one bridge's entries of one kind.
func (en Entries) listKind(bridge string, kind entry.Kind, f Filter, fn func(bridge string, e entry.Entry) error) error {
	var next []byte
	if f.Table != nil {
		next = []byte{*f.Table}
	}
	for {
		var last []byte
		err := en.s.db.view(func(tx *bolt.Tx) error {
			br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
			if br == nil {
				return nil
			}
			kb := br.Bucket(kindBuckets[kind])
			if kb == nil {
				return nil
			}
			c := kb.Cursor()
			k, v := c.First()
			if next != nil {
				k, v = c.Seek(next)
			}
			for n := 0; k != nil; k, v = c.Next() {
				if f.Table != nil && entry.FlowTable(k) != *f.Table {
					return nil
				}
				if n == scanChunk {
					last = bytes.Clone(k)
					return nil
				}
				n++
				e, ok := en.s.damage.readEntry(bridge, kind, k, v)
				if !ok || (f.Module != "" && e.Module != f.Module) {
					continue
				}
				if err := fn(bridge, e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || last == nil {
			return err
		}
		next = last
	}
}

// All returns every desired entry of bridge.
func (en Entries) All(bridge string) ([]entry.Entry, error) {
	var es []entry.Entry
	err := en.List(Filter{Bridge: bridge}, func(_ string, e entry.Entry) error {
		es = append(es, e)
		return nil
	})
	return es, err
}

// Count is the number of entries of one module on one bridge, by kind.
type Count struct {
	Bridge, Module        string
	Flows, Groups, Meters int
}

// Counts returns the entry counts of every (bridge, module), ordered by bridge
// then module. It reads only the owner of each record, not its payload.
func (en Entries) Counts() ([]Count, error) {
	var out []Count
	err := en.s.db.view(func(tx *bolt.Tx) error {
		var err error
		out, err = countsTx(&en.s.damage, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: counts: %w", err)
	}
	sortCounts(out)
	return out, nil
}

// countsTx counts the entries of every (bridge, module) in tx, unordered,
// recording in d the records found damaged.
func countsTx(d *damaged, tx *bolt.Tx) ([]Count, error) {
	var out []Count
	root := tx.Bucket(bucketBridges)
	err := root.ForEachBucket(func(name []byte) error {
		idx := map[string]*[3]int{}
		br := root.Bucket(name)
		for ki, kind := range entry.Kinds {
			kb := br.Bucket(kindBuckets[kind])
			if kb == nil {
				continue
			}
			err := kb.ForEach(func(k, v []byte) error {
				owner, err := recordOwner(k, v)
				if err != nil {
					d.note(string(bucketBridges), string(name), kind, k, v, err)
					return nil
				}
				c := idx[string(owner)]
				if c == nil {
					c = new([3]int)
					idx[string(owner)] = c
				}
				c[ki]++
				return nil
			})
			if err != nil {
				return err
			}
		}
		for m, c := range idx {
			out = append(out, Count{Bridge: string(name), Module: m, Flows: c[0], Groups: c[1], Meters: c[2]})
		}
		return nil
	})
	return out, err
}

func sortCounts(cs []Count) {
	slices.SortFunc(cs, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.Bridge, b.Bridge), cmp.Compare(a.Module, b.Module))
	})
}
