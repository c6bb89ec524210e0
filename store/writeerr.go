package store

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/errdefs"
)

// update is db.Update, tracked, with the file system's refusals translated
// (writeErrorAt).
func (d *trackedDB) update(fn func(tx *bolt.Tx) error) error {
	slot := d.busy.begin(opWrite)
	defer d.busy.end(slot)
	return writeErrorAt(d.Path(), d.Update(fn))
}

// writeErrorAt translates a failure to write path (the store, or a spool or
// backup beside it) into a kind the caller can act on, naming the file: a
// full disk or quota is ErrResourceExhausted, a file system that refuses
// writes (read-only, I/O errors) ErrUnavailable. Other errors pass
// unchanged. bbolt rolls the transaction back in either case: nothing of it
// is stored.
func writeErrorAt(path string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	// bbolt formats some file errors with %s (growing the file): match
	// those by text.
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), strings.Contains(err.Error(), syscall.ENOSPC.Error()):
		return fmt.Errorf("store: %s: the disk is full, nothing of this write was stored (make room on its file system): %w: %w",
			path, err, errdefs.ErrResourceExhausted)
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EIO), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("store: %s: the store cannot be written, nothing of this write was stored: %w: %w",
			path, err, errdefs.ErrUnavailable)
	}
	return err
}
