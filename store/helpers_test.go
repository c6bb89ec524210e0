package store

import "github.com/flowstate-io/flowstate/entry"

// The store's requests one at a time, as tests make them; flowstated makes
// them through Update and a Writer (group commit).

// Put is one Update with one Writer.Put; apply, when not nil, runs before the
// commit with the changed entries, and its error aborts the transaction.
func (en Entries) Put(bridge, module string, es []entry.Entry, apply func(changed []Change) error) error {
	return en.s.Update(func(w *Writer) error {
		r, err := w.Put(bridge, module, es)
		if err == nil && apply != nil {
			err = apply(r.Changed)
		}
		return err
	})
}

// Sync is one Update with one Writer.Sync; see Put for apply.
func (en Entries) Sync(bridge, module string, es []entry.Entry, apply func(removed []entry.Entry, changed []Change) error) error {
	return en.s.Update(func(w *Writer) error {
		r, err := w.Sync(bridge, module, es)
		if err == nil && apply != nil {
			err = apply(r.Removed, r.Changed)
		}
		return err
	})
}

// Delete is one Update with one Writer.Delete; see Put for apply.
func (en Entries) Delete(bridge, module string, keys []entry.Entry, apply func(removed []entry.Entry) error) error {
	return en.s.Update(func(w *Writer) error {
		r, err := w.Delete(bridge, module, keys)
		if err == nil && apply != nil {
			err = apply(r.Removed)
		}
		return err
	})
}
