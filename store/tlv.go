package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/errdefs"
)

// TLVMapping is one entry of a bridge's TLV table (NXT_TLV_TABLE_MOD):
// the Geneve option (Class, Type) of Len bytes is matched as
// tun_metadata<Index>. vswitchd keeps the table in memory only, so a
// restarted vswitchd has none, and a flow that uses the field is refused
// until the mapping is back: the replay restores these first.
type TLVMapping struct {
	Class uint16
	Type  uint8
	Len   uint8
	Index uint16
	// Module is the module whose controller mapped it (the OpenFlow
	// proxy).
	Module string
}

// ErrTLVOwned says a TLV mapping index belongs to another module.
var ErrTLVOwned = fmt.Errorf("store: tlv mapping owned by another module: %w", errdefs.ErrFailedPrecondition)

const tlvPayloadLen = 4 // class (2) | type (1) | len (1)

func tlvKey(index uint16) []byte { return binary.BigEndian.AppendUint16(nil, index) }

// TLVMaps are the TLV tables an OpenFlow proxy recorded, one a bridge.
// Store.TLVMaps makes one.
type TLVMaps struct {
	db     *trackedDB
	damage *damaged
}

// Get returns the TLV mappings stored for bridge, by index. A record
// whose checksum does not match is left out and recorded (File.Damaged): the
// controller that made it maps it again when it reconnects.
func (tm TLVMaps) Get(bridge string) ([]TLVMapping, error) {
	var out []TLVMapping
	err := tm.db.view(func(tx *bolt.Tx) error {
		b := tlvBucket(tx, bridge)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			m, err := decodeTLV(k, v)
			if err != nil {
				tm.damage.note(string(bucketTLV), bridge, 0, k, v, err)
				return nil
			}
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: tlv map of %s: %w", bridge, err)
	}
	return out, nil
}

// Update deletes del and then stores add as module's mappings on
// bridge, in one transaction. An index another module maps is
// ErrTLVOwned, and nothing is written.
func (tm TLVMaps) Update(bridge, module string, add, del []TLVMapping) error {
	err := tm.db.update(func(tx *bolt.Tx) error {
		b := tlvBucket(tx, bridge)
		if b == nil && len(add) > 0 {
			root, err := tx.CreateBucketIfNotExists(bucketTLV)
			if err != nil {
				return err
			}
			if b, err = root.CreateBucketIfNotExists([]byte(bridge)); err != nil {
				return err
			}
		}
		if b == nil {
			return nil // nothing stored, nothing to add
		}
		owned := func(m TLVMapping) error {
			v := b.Get(tlvKey(m.Index))
			if v == nil {
				return nil
			}
			old, err := decodeTLV(tlvKey(m.Index), v)
			if err != nil {
				return nil // damaged: overwritten, as the switch holds it now
			}
			if old.Module != module {
				return fmt.Errorf("tun_metadata%d is mapped by module %s: %w", m.Index, old.Module, ErrTLVOwned)
			}
			return nil
		}
		for _, m := range del {
			if err := owned(m); err != nil {
				return err
			}
			if err := b.Delete(tlvKey(m.Index)); err != nil {
				return err
			}
		}
		for _, m := range add {
			if err := owned(m); err != nil {
				return err
			}
			k := tlvKey(m.Index)
			p := []byte{byte(m.Class >> 8), byte(m.Class), m.Type, m.Len}
			if err := b.Put(k, encodeRecord(k, module, p)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrTLVOwned) {
			return err
		}
		return fmt.Errorf("store: tlv map of %s: %w", bridge, err)
	}
	return nil
}

// tlvBucket returns bridge's bucket under tlv, nil when absent.
func tlvBucket(tx *bolt.Tx, bridge string) *bolt.Bucket {
	root := tx.Bucket(bucketTLV)
	if root == nil {
		return nil
	}
	return root.Bucket([]byte(bridge))
}

func decodeTLV(k, v []byte) (TLVMapping, error) {
	module, p, err := decodeRecord(k, v)
	if err != nil {
		return TLVMapping{}, err
	}
	if len(k) != 2 || len(p) != tlvPayloadLen {
		return TLVMapping{}, fmt.Errorf("store: tlv record of %d bytes at a key of %d", len(p), len(k))
	}
	return TLVMapping{Class: binary.BigEndian.Uint16(p), Type: p[2], Len: p[3], Index: binary.BigEndian.Uint16(k), Module: module}, nil
}
