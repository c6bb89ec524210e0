package flag

import (
	"context"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Arm sets flow-restore-wait for a planned restart of vswitchd, only if this
// flowstated can restore and release the switch afterwards.
func (f *Flag) Arm(ctx context.Context) (wasSet bool, err error) {
	if w := f.cfg.Node.Wedged(); w != "" {
		return false, fmt.Errorf("flag: not arming flow-restore-wait: the engine is wedged (%s): %w", w, errdefs.ErrFailedPrecondition)
	}
	if ok, why := f.cfg.GuardPresent(); !ok {
		return false, fmt.Errorf("flag: not arming flow-restore-wait: no guard proves it would release the node if flowstated died (%s): %w", why, errdefs.ErrFailedPrecondition)
	}
	c := f.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, fmt.Errorf("flag: not arming flow-restore-wait: OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	if ok, nothing := f.restorable(c); !ok {
		// Armed, it would only hold vswitchd until flowstated clears it.
		return false, fmt.Errorf("flag: not arming flow-restore-wait: nothing for flowstated to restore (%s): %w", nothing, errdefs.ErrFailedPrecondition)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	on, err := c.FlowRestoreWait()
	if err != nil || on {
		return on, err
	}
	if err := c.SetFlowRestoreWait(ctx, true, false); err != nil {
		return false, err
	}
	f.log.Info("flow-restore-wait armed on request")
	return false, nil
}

// Release clears flow-restore-wait and waits until vswitchd has read it.
func (f *Flag) Release(ctx context.Context) (wasSet bool, ack time.Duration, err error) {
	c := f.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, 0, fmt.Errorf("flag: OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if wasSet, err = c.FlowRestoreWait(); err != nil {
		return false, 0, err
	}
	start := time.Now()
	if err := c.SetFlowRestoreWait(ctx, false, true); err != nil {
		f.unackedClear = true
		return wasSet, 0, err
	}
	f.unackedClear = false
	f.log.Warn("flow-restore-wait cleared on request", "was_set", wasSet, "ack", time.Since(start))
	return wasSet, time.Since(start), nil
}

// State is the flag and vswitchd as Status and the metrics report them.
type State struct {
	// On is the flag as stored in OVSDB; Connected is false while OVSDB is
	// not connected, and On then false.
	On, Connected bool
	// Acknowledged: vswitchd has read the latest change to OVSDB (cur_cfg
	// reached next_cfg).
	Acknowledged bool
	// VswitchdRunning: ovs-vswitchd runs (its pidfile is locked).
	// VswitchdUnheld: it is past the flag, released by a flowstated of this
	// store or seen with the flag cleared while it ran; a flag set under it
	// is armed for its next start, not holding it.
	VswitchdRunning, VswitchdUnheld bool
	// LastRelease is when a clear last released a held vswitchd, by this
	// flowstated or an earlier one of the same store (zero if never).
	LastRelease time.Time
}

// State reads the flag's state from OVSDB, the store and atomics, never
// waiting for a clear in progress.
func (f *Flag) State() State {
	var st State
	if c := f.ovsdb.Load(); c != nil && c.Connected() {
		on, err := c.FlowRestoreWait()
		st.On, st.Connected = on, err == nil
		next, cur, err := c.Config()
		st.Acknowledged = err == nil && cur >= next
	}
	st.VswitchdRunning, st.VswitchdUnheld = f.vswitchd()
	if n := f.lastRelease.Load(); n != 0 {
		st.LastRelease = time.Unix(0, n)
	} else {
		st.LastRelease, _ = f.cfg.Store.Last()
	}
	return st
}
