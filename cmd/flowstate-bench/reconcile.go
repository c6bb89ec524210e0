package main

import (
	"context"
	"fmt"
)

// noopRun measures a Reconcile RPC with nothing to change (read the store,
// dump, diff, nothing sent), then `ovs-ofctl --bundle replace-flows` of the
// same file on the same, identical, bridge (it also dumps and diffs).
func (e *env) noopRun(ctx context.Context) (fs, of sample, err error) {
	m := newMeter(driverNone)
	if err := m.flowstated(e.d.pid(), false); err != nil {
		return fs, of, err
	}
	m.vswitchd(e.sb.VswitchdPID())
	m.begin()
	resp, err := e.d.c.Reconcile(ctx, bridge)
	fs = m.stop()
	if err != nil {
		return fs, of, fmt.Errorf("reconcile: %w", err)
	}
	b := findBridge(resp)
	if b == nil || !b.Converged {
		return fs, of, fmt.Errorf("reconcile: %s not converged: %+v", bridge, resp)
	}
	if n := b.LastReplay.Messages; n != 0 {
		return fs, of, fmt.Errorf("reconcile sent %d messages to a bridge that already held the desired flows: "+
			"flowstate's canonical form differs from what OVS returns", n)
	}

	m = newMeter(driverChildren)
	m.vswitchd(e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "replace-flows", bridge, e.file); err != nil {
		return fs, of, err
	}
	return fs, m.stop(), nil
}
