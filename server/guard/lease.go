package guard

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Lease is flowstated's side: a file whose content changes at every renewal.
// It is not safe for concurrent use; one goroutine renews it.
type Lease struct {
	path string
	f    *os.File
	seq  uint64
}

// OpenLease creates or opens the lease file at path (mode 0640), creating its
// directory.
func OpenLease(path string) (*Lease, error) {
	l := &Lease{path: path}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Lease) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o750); err != nil {
		return fmt.Errorf("guard: lease: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("guard: lease: %w", err)
	}
	l.f = f
	return nil
}

// Renew writes a new lease content: the guard only compares contents, so the
// sequence number is what matters; the pid is for people reading the file,
// and ovsdb (the _uuid of flowstated's Open_vSwitch row, "" if unknown) lets
// a spawned guard of another database step aside (Run).
//
// A lease path that was unlinked or replaced (a tmpfiles clean-up, an
// operator tidying the directory) is re-created first, so the guard keeps
// reading what flowstated writes: renewing an unlinked inode would look to
// the guard like a flowstated that stopped. recreated reports that.
func (l *Lease) Renew(ovsdb string) (recreated bool, err error) {
	if !l.samePath() {
		_ = l.f.Close()
		if err := l.open(); err != nil {
			return false, err
		}
		recreated = true
	}
	l.seq++
	b := fmt.Appendf(nil, "flowstated pid=%d seq=%d ovsdb=%s\n", os.Getpid(), l.seq, ovsdb)
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return recreated, fmt.Errorf("guard: renew lease: %w", err)
	}
	if err := l.f.Truncate(int64(len(b))); err != nil {
		return recreated, fmt.Errorf("guard: renew lease: %w", err)
	}
	return recreated, nil
}

// stoppedMark ends the lease line flowstated writes as it stops in order.
const stoppedMark = "stopped"

// MarkStopped tells the guard that flowstated stops in order, so its
// release after the grace is logged as expected, not as a dead flowstated.
// It does not renew: the guard still counts the grace from the last Renew.
// A lease path no longer the open file is left alone.
func (l *Lease) MarkStopped(ovsdb string) error {
	if !l.samePath() {
		return nil
	}
	b := fmt.Appendf(nil, "flowstated pid=%d seq=%d ovsdb=%s %s\n", os.Getpid(), l.seq, ovsdb, stoppedMark)
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("guard: mark lease stopped: %w", err)
	}
	if err := l.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("guard: mark lease stopped: %w", err)
	}
	return nil
}

// leaseStopped reports whether a lease's content carries the stopped mark.
func leaseStopped(b []byte) bool {
	line, _, whole := bytes.Cut(b, []byte("\n"))
	if !whole {
		return false
	}
	f := bytes.Fields(line)
	return len(f) > 0 && string(f[len(f)-1]) == stoppedMark
}

// samePath reports whether the open file is still the one at the path.
func (l *Lease) samePath() bool {
	at, err := os.Stat(l.path)
	if err != nil {
		return false
	}
	open, err := l.f.Stat()
	return err == nil && os.SameFile(at, open)
}

// Close closes the file, leaving it in place: a lease that stops changing is
// what tells the guard flowstated is gone (MarkStopped says it went in order).
func (l *Lease) Close() error { return l.f.Close() }

// leaseOVSDB is the ovsdb= field of a lease's content ("" when absent or
// not a whole line).
func leaseOVSDB(b []byte) string {
	line, _, whole := bytes.Cut(b, []byte("\n"))
	if !whole {
		return ""
	}
	for _, f := range bytes.Fields(line) {
		if v, ok := bytes.CutPrefix(f, []byte("ovsdb=")); ok {
			return string(v)
		}
	}
	return ""
}

// LockPath is the file a running guard holds locked, beside the lease.
func LockPath(lease string) string { return lease + ".lock" }

// lockFile takes an exclusive, non-blocking flock on path. ok is false when
// another process holds it. The returned file keeps the lock until closed or
// until the process exits, however it exits.
func lockFile(path string) (f *os.File, ok bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, false, fmt.Errorf("guard: lock: %w", err)
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, false, fmt.Errorf("guard: lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("guard: lock %s: %w", path, err)
	}
	return f, true, nil
}

// Present reports whether a guard process holds the lock of lease.
func Present(lease string) (bool, error) {
	f, ok, err := lockFile(LockPath(lease))
	if err != nil {
		return false, err
	}
	if ok {
		_ = f.Close() // nobody held it: let it go again
		return false, nil
	}
	return true, nil
}

// Holder is the pid the guard holding the lock of lease wrote into it (0 if
// none can be read).
func Holder(lease string) int { return ownerPID(LockPath(lease)) }

// ownerPID reads the pid a guard wrote into its lock file, for messages.
func ownerPID(lock string) int {
	b, err := os.ReadFile(lock)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(string(trimNL(b)))
	return pid
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == 0) {
		b = b[:len(b)-1]
	}
	return b
}
