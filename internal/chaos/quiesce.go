// The end of a run: heal every fault, wait for rest, check the invariants
// that hold at quiescence, and check that nothing flowstated started is left.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// quiesce heals every fault, waits for convergence and checks the
// invariants that hold at rest, then stops flowstated and checks that
// nothing it started is left.
func (r *run) quiesce(parent context.Context, writers []*writer) {
	n := r.n
	ctx, cancel := context.WithTimeout(parent, r.cfg.Settle)
	defer cancel()
	for _, col := range []string{"protocols", "flow_tables"} {
		if _, err := n.sb.Vsctl(ctx, "--no-wait", "clear", "bridge", Managed, col); err != nil {
			r.violate(InvConverged, "heal: %v", err)
		}
	}
	if n.sb.VswitchdPID() == 0 {
		if err := r.startVswitchd(ctx); err != nil {
			r.violate(InvConverged, "heal: vswitchd does not start: %v", err)
			return
		}
	}
	if !n.alive() {
		_ = n.signalFlowstated(syscall.SIGCONT)
		if !n.alive() {
			if err := r.startFlowstated(ctx); err != nil {
				r.violate(InvConverged, "heal: flowstated does not start: %v", err)
				return
			}
		}
	}
	for _, m := range []string{"pod", "route"} {
		_ = n.c.MarkReady(ctx, m)
	}
	if err := r.syncPolicy(ctx); err != nil {
		r.violate(InvConverged, "the policy cannot be declared at quiescence: %v", err)
	}
	// Converged, diff empty, br-ex restored: all must hold at one moment.
	var last string
	for {
		why := r.atRest(ctx)
		if why != "" && ctx.Err() != nil && last != "" {
			why = last // the deadline cut the last look short: keep the one before
		}
		if last = why; last == "" {
			break
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			r.violate(InvConverged, "not at rest within %v: %s", r.cfg.Settle, last)
			break
		}
	}
	r.rep.Checks.add(InvConverged, errIf(last != ""))
	r.mu.Lock()
	foreign := slices.Clone(r.foreignIPs)
	r.mu.Unlock()
	r.foreignCheck(parent, foreign)
	r.checkPoisoned(parent)
	r.protected(parent)
	ctx, cancel = context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	for _, w := range writers {
		bad, checked, err := w.check(ctx)
		if err != nil {
			r.violate(InvAcked, "listing module %s: %v", w.module, err)
			continue
		}
		for range checked - len(bad) {
			r.rep.Checks.add(InvAcked, nil)
		}
		for _, b := range bad {
			r.rep.Checks.add(InvAcked, errors.New("violated"))
			r.violate(InvAcked, "%s", b)
		}
	}
	if pid := n.sb.VswitchdPID(); pid != 0 {
		for _, br := range []string{Managed, Unmanaged} {
			if fwd, ok := r.forwards(ctx, br, AllowedIP, pid); ok && !fwd {
				r.violate(InvConverged, "at rest %s does not forward the allowed SYN", br)
			}
			if br == Unmanaged {
				// br-ex may rightly be plain OVS's after an unarmed start.
				if dump, err := n.sb.DumpFlows(ctx, br); err != nil || !holdsPolicy(dump) {
					continue
				}
			}
			if fwd, ok := r.forwards(ctx, br, DeniedIP, pid); ok && fwd {
				r.violate(InvDeny, "at rest %s forwards the SYN to %s", br, DeniedIP)
			}
		}
	}
	r.mu.Lock()
	r.rep.Ops.mu.Lock()
	accepted, refused := r.rep.Ops.ok[string(OpCrashing)], r.rep.Ops.failed[string(OpCrashing)]
	r.rep.Ops.mu.Unlock()
	r.mu.Unlock()
	if accepted+refused > 0 {
		r.rep.Checks.add(InvRefused, errIf(accepted > 0))
		if accepted > 0 {
			r.violate(InvRefused, "%d declarations of a flow that aborts vswitchd (a 2,000-spec learn) were accepted", accepted)
		}
	}
	r.leftovers(parent)
}

// protected checks that a node at rest stays protected: for a guard's grace
// and more, the flag stays armed for the next vswitchd start and a guard
// holds the lease. A flag that flaps, or stays off beside a running guard,
// leaves the next crash unprotected.
func (r *run) protected(parent context.Context) {
	window := guardGrace + 3*time.Second
	ctx, cancel := context.WithTimeout(parent, window+10*time.Second)
	defer cancel()
	// The re-arm follows convergence by a flag check or two.
	deadline := time.Now().Add(5 * time.Second)
	for {
		on, err := r.n.sb.FlowRestoreWait(ctx)
		if err == nil && on && r.n.guardPID() > 0 {
			break
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			r.rep.Checks.add(InvProtected, errors.New("violated"))
			r.violate(InvProtected, "at rest the flag is not re-armed with a guard running within 5 s (flag %v, err %v, guard pid %d)", on, err, r.n.guardPID())
			return
		}
	}
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		on, err := r.n.sb.FlowRestoreWait(ctx)
		guardPID := r.n.guardPID()
		if err != nil || !on || guardPID == 0 {
			r.rep.Checks.add(InvProtected, errors.New("violated"))
			r.violate(InvProtected, "at rest the flag went off or the guard went away (flag %v, err %v, guard pid %d)", on, err, guardPID)
			return
		}
		r.rep.Checks.add(InvProtected, nil)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// atRest returns why the node is not at rest yet, "" when it is.
func (r *run) atRest(ctx context.Context) string {
	n := r.n
	st, err := n.c.Status(ctx)
	if err != nil {
		return "status: " + err.Error()
	}
	if len(st.Bridges) != 1 || !st.Bridges[0].Converged {
		return fmt.Sprintf("br-int not converged: %+v", st.Bridges)
	}
	changes, err := n.c.Diff(ctx, Managed)
	if err != nil {
		return "diff: " + err.Error()
	}
	if len(changes) > 0 {
		return fmt.Sprintf("status says converged but the diff holds %d changes, first %+v", len(changes), changes[0])
	}
	dump, err := n.sb.DumpFlows(ctx, Unmanaged)
	if err != nil {
		return "dump br-ex: " + err.Error()
	}
	r.mu.Lock()
	unarmed := r.unarmed
	r.mu.Unlock()
	// A guard that released a held vswitchd let it start as plain OVS.
	unarmed = unarmed || strings.Contains(n.logs(), "flow-restore-wait cleared by the guard")
	r.mu.Lock()
	rebuilt := r.rebuiltLive
	r.mu.Unlock()
	if rebuilt {
		// Rebuilt on a running vswitchd: what vswitchd made is br-ex's
		// state, and the mirror learns it; writing the old flows back
		// would be flowstated changing a bridge it does not manage.
		if !slices.Equal(dump, []string{"priority=0 actions=NORMAL"}) {
			return fmt.Sprintf("br-ex was rebuilt on a running vswitchd, so it must hold only vswitchd's default flow, not %q", dump)
		}
		return ""
	}
	// After a start that found the flag clear, vswitchd gave br-ex its
	// default flow and the mirror learned that: plain OVS's bridge is then
	// as right as the policy. A mix of both is neither.
	if !holdsPolicy(dump) && (!unarmed || !slices.Equal(dump, []string{"priority=0 actions=NORMAL"})) {
		return fmt.Sprintf("br-ex holds neither its policy nor (after an unarmed vswitchd start) plain OVS's default flow: %q", dump)
	}
	return ""
}

func holdsPolicy(dump []string) bool {
	if len(dump) != len(policy) {
		return false
	}
	deny := slices.ContainsFunc(dump, func(l string) bool {
		return strings.Contains(l, "nw_dst="+DeniedIP) && strings.HasSuffix(l, "actions=drop")
	})
	fwd := slices.ContainsFunc(dump, func(l string) bool {
		return strings.Contains(l, "in_port=1") && strings.HasSuffix(l, "actions=output:2")
	})
	return deny && fwd
}

// leftovers stops flowstated gracefully and checks that it disarmed the
// flag and that neither it nor any guard it spawned is still running once
// the guard's grace has passed.
func (r *run) leftovers(ctx context.Context) {
	n := r.n
	if pid := n.guardPID(); pid > 0 {
		r.noteGuard(pid)
	}
	if err := n.signalFlowstated(syscall.SIGTERM); err != nil {
		r.violate(InvLeftover, "%v", err)
	}
	// A guard holding the proxy's socket stays, relaying, while its path
	// exists (flowstated leaves it on a graceful stop): remove it, as an
	// operator retiring the proxy would, once flowstated is gone
	// (signalFlowstated waited for it).
	if err := os.Remove(filepath.Join(n.proxyDir(), Managed+".mgmt")); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.violate(InvLeftover, "removing the proxy socket: %v", err)
	}
	r.mu.Lock()
	pids := slices.Clone(n.started)
	for pid := range r.guards {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	limit := guardGrace + 5*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(limit)
	for {
		var running []int
		for _, pid := range pids {
			if processRuns(pid) {
				running = append(running, pid)
			}
		}
		if len(running) == 0 {
			r.rep.Checks.add(InvLeftover, nil)
			return
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			r.rep.Checks.add(InvLeftover, errors.New("violated"))
			r.violate(InvLeftover, "still running %v after flowstated stopped: pids %v", limit, running)
			return
		}
	}
}

// processRuns reports a live, non-zombie process.
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
