package store

import (
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/errdefs"
)

// ForgetModule removes the record of module (its ready mark), which only a
// module that declares no entries may lose: in the same transaction it
// counts module's entries and, when there are any, removes nothing and
// returns their number and bridges. A module without a record fails
// wrapping errdefs.ErrNotFound.
func (s *Store) ForgetModule(module string) (declared int, bridges []string, err error) {
	err = s.update(func(tx *bolt.Tx) error {
		counts, err := s.countsTx(tx)
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
