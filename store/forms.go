package store

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// Forms: what the switch made of entries that package canon keeps in part as
// the controller sent them (canon.Forms), keyed by the SHA-256 of the
// declared payload. They are facts about OVS, not desired state: no module
// owns them, and they hold for every bridge.
// (bucketForms, buckets.go)

// Forms are the forms the switch gave declared payloads, by the payload's
// SHA-256. Store.Forms makes one.
type Forms struct{ db *trackedDB }

// All returns every learned form.
func (fm Forms) All() (map[[sha256.Size]byte][]byte, error) {
	out := map[[sha256.Size]byte][]byte{}
	err := fm.db.view(func(tx *bolt.Tx) error {
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

// Put stores learned forms in one transaction.
func (fm Forms) Put(forms map[[sha256.Size]byte][]byte) error {
	if len(forms) == 0 {
		return nil
	}
	err := fm.db.update(func(tx *bolt.Tx) error {
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

// maxFormChain is how far Prune follows a form learned for a form, as
// canon.Forms.Apply does.
const maxFormChain = 4

// Prune deletes the forms no stored entry leads to and returns how many
// it deleted: a form is kept while some bridge declares the payload it was
// learned for, or a payload whose form leads to it (a form learned for a
// form). A store without forms costs one read.
func (fm Forms) Prune() (int, error) {
	empty := true
	if err := fm.db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketForms); b != nil {
			k, _ := b.Cursor().First()
			empty = k == nil
		}
		return nil
	}); err != nil || empty {
		return 0, err
	}
	var n int
	err := fm.db.update(func(tx *bolt.Tx) error {
		forms := tx.Bucket(bucketForms)
		keep := map[[sha256.Size]byte]bool{}
		err := tx.Bucket(bucketBridges).ForEachBucket(func(name []byte) error {
			br := tx.Bucket(bucketBridges).Bucket(name)
			for _, kind := range entry.Kinds {
				kb := br.Bucket(kindBuckets[kind])
				if kb == nil {
					continue
				}
				if err := kb.ForEach(func(k, v []byte) error {
					_, payload, err := openRecord(k, v)
					if err != nil {
						return nil // damaged (sum.go): it leads to no form
					}
					for h, i := sha256.Sum256(payload), 0; i < maxFormChain && !keep[h]; i++ {
						form := forms.Get(h[:])
						if form == nil {
							break
						}
						keep[h] = true
						h = sha256.Sum256(form)
					}
					return nil
				}); err != nil {
					return fmt.Errorf("bridge %s %s: %w", name, kind, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		var drop [][]byte
		if err := forms.ForEach(func(k, _ []byte) error {
			if len(k) != sha256.Size || !keep[[sha256.Size]byte(k)] {
				drop = append(drop, bytes.Clone(k))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range drop {
			if err := forms.Delete(k); err != nil {
				return err
			}
		}
		n = len(drop)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune forms: %w", err)
	}
	return n, nil
}
