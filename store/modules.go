package store

import (
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Modules are the records of the modules (the modules bucket): the boot id
// each last marked itself ready for. Store.Modules makes one.
type Modules struct {
	db     *trackedDB
	damage *damaged
}

// SetReady records that module is ready for boot bootID.
func (md Modules) SetReady(module, bootID string) error {
	err := md.db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketModules).Put([]byte(module), []byte(bootID))
	})
	if err != nil {
		return fmt.Errorf("store: module %s: %w", module, err)
	}
	return nil
}

// ReadyBoots returns, per module that ever marked itself ready, the boot id
// it last did so for.
func (md Modules) ReadyBoots() (map[string]string, error) {
	out := map[string]string{}
	err := md.db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketModules).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: modules: %w", err)
	}
	return out, nil
}

// Forget removes the record of module (its ready mark), which only a
// module that declares no entries may lose: in the same transaction it
// counts module's entries and, when there are any, removes nothing and
// returns their number and bridges. A module without a record fails
// wrapping errdefs.ErrNotFound.
func (md Modules) Forget(module string) (declared int, bridges []string, err error) {
	err = md.db.update(func(tx *bolt.Tx) error {
		counts, err := countsTx(md.damage, tx)
		if err != nil {
			return err
		}
		for _, c := range counts {
			if c.Module == module {
				declared += c.Flows + c.Groups + c.Meters
				bridges = append(bridges, c.Bridge)
			}
		}
		if declared > 0 {
			slices.Sort(bridges)
			return nil
		}
		b := tx.Bucket(bucketModules)
		if b.Get([]byte(module)) == nil {
			return fmt.Errorf("no record of it: %w", errdefs.ErrNotFound)
		}
		return b.Delete([]byte(module))
	})
	if err != nil {
		return 0, nil, fmt.Errorf("store: forget module %s: %w", module, err)
	}
	return declared, bridges, nil
}
