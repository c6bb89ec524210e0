package store

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the store file to w while writes go
// on: the copy is the store as of the moment Backup began. It returns the
// bytes written. The copy is a complete bbolt file with the same store id;
// opening it as --db restores that state.
//
// The copy is made first into an unlinked file beside the store, in one
// read transaction that lasts as long as the local disk takes, and only then
// written to w, with no transaction held. A read transaction held open stops
// bbolt from reusing the pages writes free, so the file grows by every
// write's size, and a write that then needs a larger mapping waits for the
// reader, and every other store operation behind it: w, a peer that may stop
// reading, must not decide how long that lasts. The spool costs disk space
// of the store's size for the duration of the call, and no memory.
func (fl File) Backup(w io.Writer) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(fl.s.Path()), ".backup-*")
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	defer f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	var size int64
	slot := fl.s.db.busy.begin(opBackup)
	err = fl.s.db.View(func(tx *bolt.Tx) error {
		var err error
		size, err = tx.WriteTo(f)
		return err
	})
	fl.s.db.busy.end(slot)
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", writeErrorAt(f.Name(), err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	// Through Write (not w's ReadFrom), in io.Copy's 32 KiB pieces.
	n, err := io.Copy(struct{ io.Writer }{w}, io.LimitReader(f, size))
	if err != nil {
		return n, fmt.Errorf("store: backup: %w", err)
	}
	return n, nil
}
