// One fault step: the lasting faults that run beside later steps or keep a
// kind from starting, and the injection of each kind without a file of its own.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// overlaps are the lasting faults that run beside the steps after them.
var overlaps = map[FaultKind]bool{ProtocolsFlip: true, FlowLimit: true, StalledReader: true, GuardFreeze: true, FlowstatedOutage: true,
	DiskFull: true, ManagedRecreate: true, UnmanagedRecreate: true, ProxiedOutage: true, ReadonlyGuard: true, StoreBulk: true}

// excludes are the lasting faults a kind does not start beside: a store
// flip must restore its byte and start flowstated itself (an outage would
// start it on the damaged store; a full disk would be a second fault in
// the same start). A live store flip checks within 15 s that the damaged
// flow left the switch: a protocols flip, which keeps both flowstated and
// the harness off br-int for longer than that, would make the check
// unobservable, not flowstated wrong.
var excludes = map[FaultKind][]FaultKind{
	StoreFlip:     {FlowstatedOutage, ProxiedOutage, ReadonlyGuard, DiskFull},
	StoreFlipLive: {FlowstatedOutage, ProxiedOutage, DiskFull, ProtocolsFlip},
	// A read-only guard replaces the guard flowstated spawned while
	// flowstated is down: an outage would start flowstated meanwhile.
	ReadonlyGuard: {FlowstatedOutage, ProxiedOutage, StoreFlip},
	ProxiedOutage: {ReadonlyGuard},
}

// blockedBy names the lasting fault that keeps kind from starting now: the
// same kind still on, or one it excludes; "" if none.
func (r *run) blockedBy(kind FaultKind) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range append([]FaultKind{kind}, excludes[kind]...) {
		if r.running[k] {
			if k == kind {
				return "still"
			}
			return string(k)
		}
	}
	return ""
}

func (r *run) setRunning(kind FaultKind, on bool) {
	r.mu.Lock()
	r.running[kind] = on
	r.mu.Unlock()
}

func (r *run) faultDone(kind FaultKind, err error) {
	r.touchFault()
	r.rep.Faults.add(string(kind), err)
	if err != nil {
		r.log.Warn("fault could not be injected", "kind", kind, "err", err)
	}
}

// inject runs one fault to its end.
func (r *run) inject(ctx context.Context, st Step) error {
	n := r.n
	switch st.Kind {
	case VswitchdKill, VswitchdTerm:
		r.mu.Lock()
		r.vsDown = true
		r.mu.Unlock()
		var err error
		if st.Kind == VswitchdKill {
			r.noteVswitchdKill()
			err = n.sb.KillVswitchd(ctx)
		} else {
			err = n.sb.StopVswitchd(ctx)
		}
		if err != nil {
			return err
		}
		return r.startVswitchd(ctx)
	case VswitchdFreeze:
		if err := n.sb.FreezeVswitchd(); err != nil {
			return err
		}
		r.mu.Lock()
		r.vsFrozen = true
		r.mu.Unlock()
		sleepCtx(ctx, st.Hold)
		err := n.sb.ThawVswitchd()
		r.mu.Lock()
		r.vsFrozen, r.disrupted = false, time.Now()
		r.mu.Unlock()
		return err
	case FlowstatedKill, FlowstatedTerm, FlowstatedReboot:
		r.excuse()
		r.flowstatedStops()
		sig := syscall.SIGKILL
		if st.Kind == FlowstatedTerm {
			sig = syscall.SIGTERM
		}
		if err := n.signalFlowstated(sig); err != nil {
			return err
		}
		if st.Kind == FlowstatedReboot {
			if err := n.newBoot(); err != nil {
				return err
			}
		}
		sleepCtx(ctx, st.Hold)
		err := r.startFlowstated(ctx)
		r.excuse()
		return err
	case FlowstatedOutage:
		// Dead for longer than the hold promise, counted from a
		// vswitchd restart a few steps later: that restart must be
		// released by the guard (or start unheld), not by flowstated's
		// return.
		r.excuse()
		r.flowstatedStops()
		if err := n.signalFlowstated(syscall.SIGKILL); err != nil {
			return err
		}
		sleepCtx(ctx, lastingBound+st.Hold)
		if n.alive() {
			return nil // another step started it again
		}
		err := r.startFlowstated(ctx)
		r.excuse()
		return err
	case ProxiedOutage:
		return r.proxiedOutage(ctx, st.Hold)
	case ForeignWrites:
		return r.foreignWrites(ctx)
	case ReadonlyGuard:
		return r.readonlyGuard(ctx, st.Hold)
	case FlowstatedFreeze:
		r.excuse()
		r.flowstatedStops()
		if err := n.signalFlowstated(syscall.SIGSTOP); err != nil {
			return err
		}
		sleepCtx(ctx, st.Hold)
		err := n.signalFlowstated(syscall.SIGCONT)
		r.excuse()
		return err
	case GuardKill, GuardFreeze:
		pid := r.waitGuard(ctx)
		if pid == 0 {
			return errors.New("chaos: no guard runs")
		}
		r.noteGuard(pid)
		r.excuse()
		if st.Kind == GuardKill {
			r.mu.Lock()
			r.guardKilledAt = time.Now()
			r.mu.Unlock()
			return syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		r.mu.Lock()
		r.guardFrozenAt = time.Now()
		r.mu.Unlock()
		// Frozen for longer than the hold promise, counted from a
		// vswitchd restart a few steps later: a frozen guard releases
		// nothing, so flowstated must not count on it; a shorter
		// freeze is only a guard that releases late.
		sleepCtx(ctx, lastingBound+st.Hold)
		err := syscall.Kill(pid, syscall.SIGCONT)
		if errors.Is(err, syscall.ESRCH) {
			// Killed while frozen (a guard-kill, a flowstated replacing
			// it): the freeze was injected, there is nothing to thaw.
			r.rep.Faults.add("guard-freeze: guard gone before its thaw", nil)
			err = nil
		}
		r.mu.Lock()
		r.guardFrozenAt, r.blind = time.Time{}, false
		r.mu.Unlock()
		r.excuse()
		return err
	case LeaseUnlink:
		r.excuse()
		return os.Remove(n.lease)
	case ProtocolsFlip:
		r.excuse()
		if _, err := n.sb.Vsctl(ctx, "--no-wait", "set", "bridge", Managed, "protocols=OpenFlow13"); err != nil {
			return err
		}
		// Longer than the hold promise: a vswitchd restart among the
		// next steps must be released without br-int (--max-hold).
		sleepCtx(ctx, holdBound+st.Hold)
		_, err := n.sb.Vsctl(ctx, "--no-wait", "clear", "bridge", Managed, "protocols")
		r.excuse()
		return err
	case StalledReader:
		return r.stalledReader(ctx, st.Hold)
	case BridgeRebuild:
		// The dummy datapath stands in for both types
		// (--enable-dummy=override): vswitchd destroys br-ex and makes
		// it anew with only its default flow, as plain OVS does.
		r.mu.Lock()
		r.rebuilt++
		typ := []string{"netdev", "dummy"}[(r.rebuilt-1)%2]
		released := r.lastFwd[Unmanaged].After(r.vsStart)
		r.rebuiltLive = r.rebuiltLive || released
		r.unarmed = true // plain OVS's default flow is br-ex's from now on too
		r.mu.Unlock()
		_, err := n.sb.Vsctl(ctx, "--no-wait", "set", "bridge", Unmanaged, "datapath_type="+typ)
		return err
	case DiskFull:
		return r.diskFull(ctx, st.Hold)
	case StoreFlip:
		return r.storeFlip(ctx, st)
	case StoreFlipLive:
		return r.storeFlipLive(ctx, st, r.writers)
	case ManagedRecreate:
		return r.recreate(ctx, Managed, st.Hold)
	case UnmanagedRecreate:
		return r.recreate(ctx, Unmanaged, st.Hold)
	case OVSDBRestart:
		r.excuse()
		err := n.sb.RestartOVSDB(ctx)
		r.excuse()
		return err
	case StoreBulk:
		return r.storeBulk(ctx, st.Hold)
	case FlowLimit:
		// The pod module's table takes 5 flows: writes past it are
		// refused, a replay quarantines the rest.
		if _, err := n.sb.Vsctl(ctx, "--no-wait", "--", "--id=@ft", "create", "Flow_Table", "flow_limit=5", "overflow_policy=refuse",
			"--", "set", "bridge", Managed, "flow_tables:10=@ft"); err != nil {
			return err
		}
		sleepCtx(ctx, st.Hold)
		_, err := n.sb.Vsctl(ctx, "--no-wait", "clear", "bridge", Managed, "flow_tables")
		return err
	}
	return fmt.Errorf("chaos: unknown fault %q", st.Kind)
}

// recreate deletes br from OVSDB, as an operator or a CNI that rebuilds its
// bridge does, and creates it again after hold with the same ports. br-int
// missing must hold nothing, and re-created it gets the store's pipeline
// back; br-ex re-created on a released vswitchd is plain OVS's new bridge,
// which flowstated must not write (as after bridge-rebuild).
func (r *run) recreate(ctx context.Context, br string, hold time.Duration) error {
	r.excuse()
	if br == Managed {
		r.mu.Lock()
		r.brGen++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.brGen++
			r.mu.Unlock()
		}()
	}
	if _, err := r.n.sb.Vsctl(ctx, "--no-wait", "del-br", br); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	// The step re-creates the bridge: an ovsdb-server restarting at the
	// same moment (ovsdb-restart) refuses the connection, and a bridge
	// left deleted would fail every later check on it as flowstated's.
	// Both calls are idempotent (--may-exist), so they are tried again
	// until they succeed, within 20 s.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var err error
	for {
		err = r.n.sb.AddBridge(cctx, br)
		for i, p := range []string{"p1", "p2"} {
			if err == nil {
				err = r.n.sb.AddPort(cctx, br, br+"-"+p, i+1)
			}
		}
		if err == nil || !sleepCtx(cctx, 200*time.Millisecond) {
			break
		}
	}
	if br == Unmanaged {
		r.mu.Lock()
		// A held vswitchd forwards on no bridge: either bridge
		// forwarding since its start means it was released.
		released := r.lastFwd[Managed].After(r.vsStart) || r.lastFwd[Unmanaged].After(r.vsStart)
		r.rebuiltLive = r.rebuiltLive || released
		r.unarmed = true
		r.mu.Unlock()
	}
	r.excuse()
	return err
}

// stalledReader reads a Backup and stops reading for hold, then lets it go.
func (r *run) stalledReader(ctx context.Context, hold time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, hold+10*time.Second)
	defer cancel()
	w := &stallWriter{until: time.Now().Add(hold)}
	_, err := r.n.c.Backup(ctx, w)
	return err
}

type stallWriter struct{ until time.Time }

func (s *stallWriter) Write(p []byte) (int, error) {
	if d := time.Until(s.until); d > 0 {
		time.Sleep(d) // the stall is the fault being injected
	}
	return len(p), nil
}

// waitGuard returns the running guard's pid, waiting up to guardRespawn
// (path.go) for flowstated to spawn one when none runs: a guard step drawn right
// after a guard-kill would otherwise fail to inject, and the orderings it
// starts (the frozen guard of round 2) would never run. 0 when flowstated
// is not running (nobody spawns a guard) or none came.
func (r *run) waitGuard(ctx context.Context) int {
	n := r.n
	deadline := time.Now().Add(guardRespawn)
	for {
		// The lock may still name a guard that just exited (ESRCH at
		// the signal): wait for the one that runs.
		pid := n.guardPID()
		if pid > 0 && !processRuns(pid) {
			pid = 0
		}
		if pid > 0 || !n.alive() || time.Now().After(deadline) {
			return pid
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return 0
		}
	}
}
