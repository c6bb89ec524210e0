package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// replicaName prefixes the replica's files in the sandbox directory.
const replicaName = "replica"

// Replica is a read-only copy of the sandbox's database: a second
// ovsdb-server that replicates it with --sync-from, as the backup of an
// active-backup pair does. It serves the same rows under the same _uuids and
// refuses every transaction that writes ("not allowed ... read only mode").
// Its files live in the sandbox directory (replica.db, replica.sock, ...).
// Close must be called before the Sandbox's.
type Replica struct {
	s         *Sandbox
	p         *proc
	closeOnce sync.Once
	closeErr  error
}

// StartReplica starts a read-only replica of the sandbox's database and
// waits until it serves the sandbox's Open_vSwitch row. One replica at a
// time.
func (s *Sandbox) StartReplica(ctx context.Context) (*Replica, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	db, sock := s.path(replicaName+".db"), s.path(replicaName+".sock")
	if _, err := os.Stat(sock); err == nil {
		return nil, fmt.Errorf("sandbox: a replica already serves %s", sock)
	}
	// An empty database of the same schema: the first sync replaces its
	// content with the active server's, _uuids included, so no file is
	// copied while the active server may be appending to it.
	_ = os.Remove(db)
	if _, err := s.run(ctx, s.bin.ovsdbTool, "create", db, s.schema); err != nil {
		return nil, err
	}
	p, err := startProc(s.log, replicaName, s.bin.ovsdbServer, []string{
		db,
		"--remote=punix:" + sock,
		"--sync-from=" + s.DBAddr(),
		"--no-chdir",
		"--pidfile=" + s.path(replicaName+".pid"),
		"--log-file=" + s.path(replicaName+".log"),
		"--unixctl=" + s.path(replicaName+".ctl"),
		"-vconsole:off",
	}, s.env, s.path(replicaName+".out"))
	if err != nil {
		return nil, err
	}
	r := &Replica{s: s, p: p}
	if err := r.waitSynced(ctx); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("%w\n%s", err, s.tails(replicaName))
	}
	return r, nil
}

// waitSynced polls until the replica's Open_vSwitch row is the sandbox's.
func (r *Replica) waitSynced(ctx context.Context) error {
	if err := waitSocket(ctx, r.s.path(replicaName+".sock"), r.p); err != nil {
		return err
	}
	want, err := r.s.Vsctl(ctx, "--no-wait", "get", "Open_vSwitch", ".", "_uuid")
	if err != nil {
		return err
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		got, err := r.s.run(ctx, r.s.bin.vsctl, "--db="+r.DBAddr(), "--no-wait", "get", "Open_vSwitch", ".", "_uuid")
		if err == nil && got == want {
			return nil
		}
		if last = err; err == nil {
			last = fmt.Errorf("its Open_vSwitch row is %s, the sandbox's %s", strings.TrimSpace(got), strings.TrimSpace(want))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox: replica not in sync: %w (last: %w)", ctx.Err(), last)
		case <-r.p.done:
			return fmt.Errorf("sandbox: replica exited (%w) before it was in sync", r.p.err)
		case <-tick.C:
		}
	}
}

// DBAddr is the replica's OVSDB address, as Sandbox.DBAddr.
func (r *Replica) DBAddr() string { return "unix:" + r.s.path(replicaName+".sock") }

// Close stops the replica's ovsdb-server and waits for it; it removes its
// socket, so another replica may start. Calls after the first return the
// first's result.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() {
		r.closeErr = r.p.terminate(stopGrace)
		for _, name := range []string{".sock", ".pid", ".ctl"} {
			if err := os.Remove(r.s.path(replicaName + name)); err != nil && !errors.Is(err, os.ErrNotExist) && r.closeErr == nil {
				r.closeErr = fmt.Errorf("sandbox: replica: %w", err)
			}
		}
	})
	return r.closeErr
}
