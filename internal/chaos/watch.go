// What runs beside the schedule: bring-up, the writers and the policy loop,
// the supervisor that restarts what died by itself, and the prober that
// checks hold and deny against the clocks each fault resets (excuse).

package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// bringUp starts flowstated and waits until br-int holds the policy, the
// flag is re-armed and a guard runs.
func (r *run) bringUp(ctx context.Context) error {
	if err := r.startFlowstated(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.syncPolicy(ctx); err != nil {
		return err
	}
	for {
		st, err := r.n.c.Status(ctx)
		if err == nil && len(st.Bridges) == 1 && st.Bridges[0].Converged && st.FlowRestoreWait && r.n.guardPID() > 0 {
			break
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("not converged and armed with a guard: status %+v: %w", st, errors.Join(err, ctx.Err()))
		}
	}
	r.mu.Lock()
	r.vsStart, r.strict = time.Now(), false
	r.disrupted = time.Now()
	r.mu.Unlock()
	return nil
}

func (r *run) startFlowstated(ctx context.Context) error {
	if err := r.n.startFlowstated(); err != nil {
		return err
	}
	r.mu.Lock()
	r.epoch++
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return r.n.waitServing(wctx)
}

func (r *run) syncPolicy(ctx context.Context) error {
	es := make([]client.Entry, len(policy))
	for i, f := range policy {
		es[i] = client.FlowText(f)
	}
	_, err := r.n.c.Sync(ctx, client.Module{Bridge: Managed, Name: "policy"}, true, es...)
	return err
}

func (r *run) writeLoop(ctx context.Context, w *writer) {
	for ctx.Err() == nil {
		r.gate.RLock()
		w.step(ctx, r.rep.Ops)
		r.gate.RUnlock()
		if !sleepCtx(ctx, time.Duration(50+w.r.IntN(250))*time.Millisecond) {
			return
		}
	}
}

// policyLoop re-declares the policy and marks it ready, as a controller
// that resyncs after every flowstated start would; it opens a cold gate.
func (r *run) policyLoop(ctx context.Context) {
	for ctx.Err() == nil {
		r.gate.RLock()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.syncPolicy(cctx)
		cancel()
		r.gate.RUnlock()
		if ctx.Err() == nil {
			r.rep.Ops.add("policy-sync", err)
			r.checkWriteErr("policy-sync", err)
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
}

// excuse marks a fault that may legitimately let vswitchd forward without
// the pipeline (the guard released it, a stuck bridge was released at
// --max-hold, the flag was disarmed): the deny check is lifted for the
// running vswitchd, and the hold clock restarts.
func (r *run) excuse() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.excusedAt = time.Now()
	r.strict = false
	r.disrupted = time.Now()
}

// flowstatedStops notes that flowstated is about to be killed or frozen: if
// the guard was frozen less than guardDetect ago, the hold check waits for
// the guard's thaw.
func (r *run) flowstatedStops() {
	guard := r.n.guardPID() > 0
	r.mu.Lock()
	defer r.mu.Unlock()
	r.guardAtDeath = guard
	if !r.guardFrozenAt.IsZero() && time.Since(r.guardFrozenAt) < guardDetect {
		r.blind = true
	}
}

func (r *run) noteGuard(pid int) {
	r.mu.Lock()
	r.guards[pid] = true
	r.mu.Unlock()
}

// startVswitchd starts vswitchd plainly, as a supervisor would, and notes
// whether this start is held to the deny check.
func (r *run) startVswitchd(ctx context.Context) error {
	armed, _ := r.n.sb.FlowRestoreWait(ctx)
	alive := r.n.alive() && r.n.guardPID() > 0
	err := r.n.sb.StartVswitchd(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vsDown = false
	r.unarmed = r.unarmed || !armed
	r.rebuiltLive = false
	r.vsStart, r.disrupted = time.Now(), time.Now()
	// A start while br-int speaks no OpenFlow 1.5 (protocols-flip) is
	// released without br-int at --max-hold, which then forwards as plain
	// OVS's would: no deny to hold it to, however long ago the flip began.
	r.strict = armed && alive && time.Since(r.excusedAt) > guardGrace+maxHold && !r.running[ProtocolsFlip]
	return err
}

// superviseLoop restarts a vswitchd that died by itself (counting deaths in
// a row) and a flowstated that exited by itself (a violation).
func (r *run) superviseLoop(ctx context.Context) {
	var upSince time.Time
	for sleepCtx(ctx, 100*time.Millisecond) {
		if exited, state := r.n.exitedBySelf(); exited {
			r.violate(InvExit, "flowstated exited by itself (%s)", state)
			r.excuse()
			if err := r.startFlowstated(ctx); err != nil && ctx.Err() == nil {
				r.violate(InvExit, "flowstated does not start again: %v", err)
			}
		}
		r.mu.Lock()
		expectDown := r.vsDown || r.vsFrozen
		r.mu.Unlock()
		if expectDown {
			continue
		}
		if r.n.sb.VswitchdPID() != 0 {
			if !upSince.IsZero() && time.Since(upSince) > 10*time.Second {
				r.mu.Lock()
				r.crashes = 0
				r.mu.Unlock()
			}
			continue
		}
		r.mu.Lock()
		r.crashes++
		crashes := r.crashes
		r.mu.Unlock()
		r.rep.Checks.add(InvCrashloop, errIf(crashes > 2))
		if crashes == 3 {
			r.violate(InvCrashloop, "ovs-vswitchd died by itself %d times in a row", crashes)
		}
		r.log.Warn("ovs-vswitchd died by itself: starting it again", "in_a_row", crashes)
		if err := r.startVswitchd(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("restarting ovs-vswitchd", "err", err)
		}
		upSince = time.Now()
	}
}

// probeLoop injects SYNs to the allowed and the denied address on both
// bridges, and checks the hold and deny invariants.
func (r *run) probeLoop(ctx context.Context) {
	for sleepCtx(ctx, 250*time.Millisecond) {
		r.probeOnce(ctx)
	}
}

func (r *run) probeOnce(ctx context.Context) {
	if pid := r.n.guardPID(); pid > 0 {
		r.noteGuard(pid)
	}
	r.mu.Lock()
	skip := r.vsDown || r.vsFrozen
	r.mu.Unlock()
	pid := r.n.sb.VswitchdPID()
	if skip || pid == 0 {
		return
	}
	for _, br := range []string{Managed, Unmanaged} {
		fwd, ok := r.forwards(ctx, br, AllowedIP, pid)
		if ok && fwd {
			r.mu.Lock()
			r.lastFwd[br] = time.Now()
			r.mu.Unlock()
		}
		denied, ok2 := r.forwards(ctx, br, DeniedIP, pid)
		r.mu.Lock()
		strict := r.strict
		r.mu.Unlock()
		if ok2 && br == Managed {
			bad := denied && strict
			r.rep.Checks.add(InvDeny, errIf(bad))
			if bad {
				r.violate(InvDeny, "a SYN to %s was forwarded on %s after a vswitchd start that found the flag armed under a live flowstated", DeniedIP, br)
			}
		}
	}
	r.mu.Lock()
	if r.blind {
		r.mu.Unlock()
		return
	}
	since := r.disrupted
	if r.vsStart.After(since) {
		since = r.vsStart
	}
	var stale []string
	for _, br := range []string{Managed, Unmanaged} {
		last := r.lastFwd[br]
		if last.Before(since) {
			last = since
		}
		if time.Since(last) > holdBound {
			stale = append(stale, fmt.Sprintf("%s silent for %v", br, time.Since(last).Round(time.Millisecond)))
		}
	}
	bad := len(stale) > 0 && r.holdWarned.Before(since)
	if bad {
		r.holdWarned = time.Now()
	}
	r.mu.Unlock()
	r.rep.Checks.add(InvHold, errIf(bad))
	if bad {
		r.violate(InvHold, "vswitchd (pid %d) forwards nothing past the promise of %v: %s", pid, holdBound, strings.Join(stale, ", "))
	}
}

// forwards injects one SYN to dst at port 1 of br and reports whether port
// 2 sent it; ok is false when the answer is void (vswitchd changed, a tool
// failed or timed out).
func (r *run) forwards(ctx context.Context, br, dst string, pid int) (fwd, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, tx0, err := r.n.sb.PortStats(ctx, br, br+"-p2")
	if err != nil {
		return false, false
	}
	if err := r.n.sb.InjectSYN(ctx, br, br+"-p1", sandbox.Packet{DstIP: dst}); err != nil {
		return false, false
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for {
		_, tx, err := r.n.sb.PortStats(ctx, br, br+"-p2")
		if err != nil || r.n.sb.VswitchdPID() != pid {
			return false, false
		}
		if tx > tx0 {
			return true, true
		}
		if time.Now().After(deadline) {
			return false, true
		}
		if !sleepCtx(ctx, 30*time.Millisecond) {
			return false, false
		}
	}
}
