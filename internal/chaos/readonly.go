package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// A read-only database for the guard (issue 31, fault 2). readonly-guard
// kills flowstated and the guard it spawned, starts a read-only replica of
// the node's database (ovsdb-server --sync-from: the same Open_vSwitch
// _uuid, every write refused) and an external guard on it that takes the
// guard lock, then starts flowstated, which adopts the lock holder as its
// guard (server/lease.go). That guard can never clear the flag, so the
// readonly-guard invariant: from readonlyBound after flowstated serves
// until the replica's guard stops, the flag is never armed, and status
// names the guard unproven. Then the replica's guard is killed and
// flowstated spawns its own again.

// readonlyBound is how long a started flowstated may take to judge the
// adopted guard unproven and disarm a flag left armed: its start-up wait
// for a heartbeat, a renewal or two, and slack for a loaded machine.
const readonlyBound = 4 * time.Second

func (r *run) readonlyGuard(ctx context.Context, hold time.Duration) error {
	n := r.n
	r.excuse()
	r.flowstatedStops()
	if err := n.signalFlowstated(syscall.SIGKILL); err != nil {
		return err
	}
	if pid := n.guardPID(); pid > 0 {
		r.noteGuard(pid)
		r.mu.Lock()
		r.guardKilledAt = time.Now()
		r.mu.Unlock()
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	rep, err := n.sb.StartReplica(ctx)
	if err != nil {
		return errors.Join(err, r.restartFlowstated(ctx))
	}
	defer func() { _ = rep.Close() }()
	g, err := n.startExternalGuard(ctx, rep.DBAddr())
	if err != nil {
		return errors.Join(err, r.restartFlowstated(ctx))
	}
	r.noteGuard(g.Process.Pid)
	if err := r.startFlowstated(ctx); err != nil {
		n.stopExternalGuard()
		return err
	}
	r.excuse()
	r.readonlyWatch(ctx, g.Process.Pid, readonlyBound+hold+2*time.Second)
	n.stopExternalGuard()
	r.excuse()
	return nil
}

// restartFlowstated starts flowstated after a readonly-guard that could not
// set up its guard.
func (r *run) restartFlowstated(ctx context.Context) error {
	err := r.startFlowstated(ctx)
	r.excuse()
	return err
}

// readonlyWatch checks the readonly-guard invariant for d: past
// readonlyBound, while the replica's guard (pid) holds the lock, the flag
// stays clear and status says the guard is not proven.
func (r *run) readonlyWatch(ctx context.Context, pid int, d time.Duration) {
	start := time.Now()
	end := start.Add(d)
	for time.Now().Before(end) && sleepCtx(ctx, 250*time.Millisecond) {
		if time.Since(start) < readonlyBound || r.n.guardPID() != pid || !r.n.alive() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		on, err := r.n.sb.FlowRestoreWait(cctx)
		st, serr := r.n.c.Status(cctx)
		cancel()
		if err != nil || r.n.guardPID() != pid {
			continue
		}
		proven := serr == nil && st.Guard.Proven
		bad := on || proven
		r.rep.Checks.add(InvReadonly, errIf(bad))
		if bad {
			why := "status: " + fmt.Sprint(serr)
			if serr == nil {
				why = fmt.Sprintf("status says proven %v (unproven field %q: %s)", st.Guard.Proven, st.Guard.UnprovenField, st.Guard.Reason)
			}
			r.violate(InvReadonly, "the only guard (pid %d) runs on a read-only replica and cannot clear the flag, yet %v after flowstated started the flag is armed: %v; %s",
				pid, time.Since(start).Round(time.Millisecond), on, why)
			return
		}
	}
}

// startExternalGuard runs `flowstated guard` on ovsdb (the replica) with
// the node's lease, as an external guard deployment would, and waits until
// it holds the guard lock.
func (n *node) startExternalGuard(ctx context.Context, ovsdb string) (*exec.Cmd, error) {
	cmd := exec.Command(n.bin, "guard", "--ovsdb", ovsdb, "--lease", n.lease, "--grace", guardGrace.String())
	logf, err := os.Create(filepath.Join(n.dir, "readonly-guard.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("chaos: start the replica's guard: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.mu.Lock()
	n.ext, n.extDone = cmd, done
	n.mu.Unlock()
	for n.guardPID() != cmd.Process.Pid {
		select {
		case <-done:
			return nil, errors.New("chaos: the replica's guard exited before it held the lock")
		case <-ctx.Done():
			n.stopExternalGuard()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return cmd, nil
}

// stopExternalGuard kills the replica's guard, if one runs, and waits for
// it.
func (n *node) stopExternalGuard() {
	n.mu.Lock()
	cmd, done := n.ext, n.extDone
	n.ext, n.extDone = nil, nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}
