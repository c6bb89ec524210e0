package chaos

import (
	"context"
	"syscall"
	"time"
)

// proxiedRestart is when a proxied outage restarts vswitchd, from the
// step's start; proxiedBack is how long after that flowstated stays away,
// besides the step's hold.
const (
	proxiedRestart = guardGrace + time.Second
	proxiedBack    = pathBound + 2*time.Second
)

// proxiedOutage is a flowstated outage across a vswitchd restart under the
// proxied controller (issue 31, fault 1): flowstated killed, and once the
// guard's grace has passed (the guard released the node and relays the
// proxy socket) vswitchd killed and started plainly, as a crash or an
// upgrade would; flowstated stays away for pathBound and hold more, so the
// controller must reach the new vswitchd through the relay (the path
// check) and reinstall through flowstated once it is back.
func (r *run) proxiedOutage(ctx context.Context, hold time.Duration) error {
	n := r.n
	r.excuse()
	r.flowstatedStops()
	if err := n.signalFlowstated(syscall.SIGKILL); err != nil {
		return err
	}
	sleepCtx(ctx, proxiedRestart)
	r.mu.Lock()
	r.vsDown = true
	r.mu.Unlock()
	r.noteVswitchdKill()
	if err := n.sb.KillVswitchd(ctx); err != nil {
		return err
	}
	if err := r.startVswitchd(ctx); err != nil {
		return err
	}
	// Long enough that a relay that does not carry the controller is
	// seen (pathBound), then the schedule's hold.
	sleepCtx(ctx, proxiedBack+hold)
	if n.deadSince().IsZero() {
		return nil // another step started it again
	}
	err := r.startFlowstated(ctx)
	r.excuse()
	return err
}
