package store

import (
	"crypto/sha256"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Forms: what the switch made of entries that package canon keeps in part as
// the controller sent them (canon.Forms), keyed by the SHA-256 of the
// declared payload. They are facts about OVS, not desired state: no module
// owns them, and they hold for every bridge.
var bucketForms = []byte("forms")

// Forms returns every learned form.
func (s *Store) Forms() (map[[sha256.Size]byte][]byte, error) {
	out := map[[sha256.Size]byte][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketForms)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) != sha256.Size {
				return fmt.Errorf("form key of %d bytes", len(k))
			}
			out[[sha256.Size]byte(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: forms: %w", err)
	}
	return out, nil
}

// PutForms stores learned forms in one transaction.
func (s *Store) PutForms(forms map[[sha256.Size]byte][]byte) error {
	if len(forms) == 0 {
		return nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketForms)
		if err != nil {
			return err
		}
		for k, v := range forms {
			if err := b.Put(k[:], v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: forms: %w", err)
	}
	return nil
}
