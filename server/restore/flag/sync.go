package flag

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// sync brings flow-restore-wait to its intended state once nothing holds
// the node any more (the steps of doc.go):
//
//  1. Every managed bridge is converged, or excused: missing from OVSDB,
//     stood aside from, or unconverged for longer than MaxHold since it
//     stopped converging, the gate opened or the running vswitchd started,
//     whichever came last (named in status, a metric, an event and an error
//     log). Otherwise return the time until the next MaxHold expires.
//  2. With release (a bridge converged after a new connection) and the flag
//     set, clear it in one transaction that bumps next_cfg, and wait until
//     cur_cfg reaches it: vswitchd forwards through the restored pipeline
//     from here on. The clear is counted only if it released a vswitchd
//     that had not been released yet. Release is owed too when every
//     managed bridge is excused and a running vswitchd has not been
//     released: no bridge will converge to ask for it.
//  3. Arm it again (Rearm, and a guard is present) only once vswitchd has
//     acknowledged every change so far, the clear included: a re-arm that
//     overtook an unread clear would hold vswitchd for ever.
//  4. Without a guard the flag is cleared instead, whoever set it: nobody
//     would release the node if flowstated died.
//  5. With nothing to restore (every managed bridge missing from OVSDB or
//     stood aside from) the flag is not armed, and cleared whoever set it:
//     a held vswitchd is released as in 2, otherwise the flag is cleared
//     without waiting for a vswitchd that may not run (provisioning: the
//     CNI creates br-int later, and vswitchd must start forwarding).
//
// release is false for the periodic check, which never clears a flag that
// is armed with a guard present and something to restore, unless step 2
// owes it: an operator (ovs-restart) may have armed it for a planned
// restart.
func (f *Flag) sync(ctx context.Context, release bool) (recheck time.Duration, err error) {
	c := f.ovsdb.Load()
	if c == nil {
		return 0, nil
	}
	vs := f.watchVswitchd()
	restorable, nothing := f.restorable(c)
	if wait := f.settle(c, restorable); wait > 0 {
		return wait, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busySince.Store(time.Now().UnixNano())
	defer f.busySince.Store(0)
	on, err := c.FlowRestoreWait()
	if err != nil {
		return 0, fmt.Errorf("flag: reading flow-restore-wait: %w", err)
	}
	guarded, why := f.cfg.GuardPresent()
	arm := f.cfg.Rearm && guarded
	arm = arm && restorable
	if !on && vs.running {
		// A waiting vswitchd reads the flag at every change of the
		// database: this one is not held, whoever cleared it.
		f.vswitchdUnheld = vs.id
		f.unheldView.Store(&vs.id)
	}
	unreleased := f.unreleasedLocked(vs)
	if on && !release && unreleased && f.noneConverged() {
		release = true // step 2: owed
	}
	actx, cancel := context.WithTimeout(ctx, f.cfg.AckTimeout)
	defer cancel()
	switch {
	case on && !restorable && !unreleased:
		// Step 5 with no vswitchd held.
		if err := c.SetFlowRestoreWait(actx, false, false); err != nil {
			return 0, fmt.Errorf("flag: disarming flow-restore-wait: %w", err)
		}
		on = false
		f.log.Warn("flow-restore-wait disarmed: nothing for flowstated to restore", "reason", nothing)
	case on && (release || !guarded || !restorable):
		if (release || !restorable) && !f.cfg.Node.MirrorsSettled(c) {
			// Unmanaged bridges come back first; their hold timer
			// bounds the wait.
			return f.cfg.RetryInterval, nil
		}
		cleared, err := f.clearLocked(actx, c, arm)
		if err != nil {
			return 0, err
		}
		on = !cleared
	}
	if f.cfg.Rearm && guarded && nothing != f.notArmedFor {
		f.notArmedFor = nothing
		if nothing != "" {
			f.log.Warn("flow-restore-wait not armed: nothing for flowstated to restore; vswitchd starts as plain Open vSwitch would", "reason", nothing)
		} else {
			f.log.Info("a managed bridge can be restored again: flow-restore-wait may be armed")
		}
	}
	if !on {
		f.noteReleased(c)
	}
	if f.cfg.Rearm && guarded == f.guardMissing {
		f.guardMissing = !guarded
		if !guarded {
			f.log.Error("flow-restore-wait is not armed: no proven guard would release the node if flowstated died (see --guard)", "why", why)
		} else {
			f.log.Info("a guard is running again: flow-restore-wait may be armed")
		}
	}
	if on || !arm {
		return 0, nil
	}
	if f.unackedClear || f.anyConnected() {
		// A running vswitchd must have read the clear before the flag
		// comes back (one that is down reads the flag at its start).
		if err := c.WaitConfigured(actx); err != nil {
			return 0, fmt.Errorf("flag: re-arming flow-restore-wait: %w", err)
		}
		f.unackedClear = false
	}
	if err := c.SetFlowRestoreWait(actx, true, false); err != nil {
		return 0, fmt.Errorf("flag: re-arming flow-restore-wait: %w", err)
	}
	f.cfg.Metrics.rearmed.Inc()
	f.log.Info("flow-restore-wait re-armed for the next vswitchd start")
	f.cfg.Publish(events.Event{Type: events.FlagRearmed, Message: "flow-restore-wait re-armed for the next vswitchd start"})
	return 0, nil
}

// clearLocked clears the flag and waits for vswitchd's acknowledgement.
// With keepIfReleased it leaves the flag alone (cleared false) when the
// running vswitchd was released before: vswitchd reads the flag only until
// it first sees it false, so it is not held, and a clear followed by a
// re-arm would only open a window in which a vswitchd restart comes back
// ungated. f.mu must be held.
func (f *Flag) clearLocked(ctx context.Context, c *ovsconfig.Client, keepIfReleased bool) (cleared bool, err error) {
	start := time.Now()
	held := f.vswitchdIdentity()
	known := held != "" && held == f.releasedLocked()
	if known && keepIfReleased {
		f.log.Debug("flow-restore-wait left armed: this vswitchd was released before", "vswitchd", held)
		return false, nil
	}
	f.cfg.BeforeClear()
	if err := c.SetFlowRestoreWait(ctx, false, true); err != nil {
		f.unackedClear = true
		return false, err
	}
	f.unackedClear = false
	ack := time.Since(start)
	if known {
		f.log.Info("flow-restore-wait cleared: no guard runs", "ack", ack)
		return true, nil
	}
	f.releasedVswitchd = held
	if err := f.cfg.Store.SetVswitchd(held); err != nil {
		f.log.Warn("recording the released vswitchd; a restarted flowstated may count this release again", "err", err)
	}
	now := time.Now()
	f.lastRelease.Store(now.UnixNano())
	if err := f.cfg.Store.SetLast(now); err != nil {
		f.log.Warn("recording the release time; a restarted flowstated will not report it", "err", err)
	}
	f.cfg.Metrics.cleared.Inc()
	f.log.Info("flow-restore-wait cleared", "ack", ack)
	f.cfg.Publish(events.Event{Type: events.FlagCleared, Message: "flow-restore-wait cleared and acknowledged by vswitchd",
		Attrs: map[string]string{"ack": ack.String()}})
	return true, nil
}

// noneConverged reports whether no managed bridge is converged. With every
// bridge excused, nothing else asks for the release; while one is converged,
// it may be on the connection to a vswitchd that just died, and its next
// connection asks.
func (f *Flag) noneConverged() bool {
	for _, b := range f.cfg.Node.Bridges() {
		if b.Converged {
			return false
		}
	}
	return true
}

func (f *Flag) anyConnected() bool {
	for _, b := range f.cfg.Node.Bridges() {
		if b.Connected {
			return true
		}
	}
	return false
}

// restorable reports whether a vswitchd start has something of this
// flowstated's to wait for: a managed bridge in OVSDB and not stood aside
// from. Otherwise nothing says why, for each bridge.
func (f *Flag) restorable(c *ovsconfig.Client) (ok bool, nothing string) {
	brs, err := c.Bridges()
	if err != nil {
		return true, "" // unknown: the other rules hold
	}
	present := map[string]bool{}
	for _, br := range brs {
		present[br.Name] = true
	}
	var why []string
	for _, b := range f.cfg.Node.Bridges() {
		switch {
		case !present[b.Name]:
			why = append(why, "bridge "+b.Name+" does not exist in OVSDB")
		case b.StandingAside:
			why = append(why, "flowstated stands aside from bridge "+b.Name)
		default:
			return true, ""
		}
	}
	return false, strings.Join(why, "; ")
}

// settle reports how long the node must stay held for the managed bridges:
// 0 when each is converged or excused (see sync), else the time until the
// first of them reaches MaxHold. The cold-start gate holds only while
// something can be restored (restorable): modules that resync for a bridge
// that does not exist yet would hold a provisioning node for nothing.
func (f *Flag) settle(c *ovsconfig.Client, restorable bool) time.Duration {
	present := map[string]bool{}
	brs, err := c.Bridges()
	for _, br := range brs {
		present[br.Name] = true
	}
	gateOpened := f.cfg.Node.GateOpened()
	if gateOpened.IsZero() && restorable {
		// The cold-start gate holds the node, bounded by its own timeout.
		return f.cfg.RetryInterval
	}
	// Each vswitchd start gets its own MaxHold: a bridge unconverged while
	// vswitchd was down is not excused from the restore of the next one.
	holdFrom := gateOpened
	if f.vswitchdSince.After(holdFrom) {
		holdFrom = f.vswitchdSince
	}
	var wait time.Duration
	for _, b := range f.cfg.Node.Bridges() {
		var why string
		switch {
		case b.Converged:
		case err == nil && !present[b.Name]:
			why = "bridge " + b.Name + " does not exist in OVSDB"
		case b.StandingAside:
			// Not this store's to restore: waiting for it would hold
			// the node for nothing. Its reason is the bridge's own
			// (status, the standing-aside log line): repeated here it
			// would be printed twice.
			why = "flowstated stands aside from bridge " + b.Name
		case gateOpened.IsZero():
			// Appeared in OVSDB since restorable looked: the gate
			// holds it.
			return f.cfg.RetryInterval
		default:
			since := b.Since
			if since.Before(holdFrom) {
				since = holdFrom
			}
			left := f.cfg.MaxHold - time.Since(since)
			if left > 0 {
				if wait == 0 || left < wait {
					wait = left
				}
				// Held again, by this vswitchd start.
				f.excuse(b.Name, "")
				continue
			}
			why = fmt.Sprintf("bridge %s could not be restored within --max-hold %v (%s)", b.Name, f.cfg.MaxHold, b.Reason)
		}
		f.excuse(b.Name, why)
	}
	return wait
}

// excuse records why a bridge does not hold the node ("" when it is
// converged), and reports each new excuse loudly: log, event, metric.
func (f *Flag) excuse(bridge, why string) {
	if !f.cfg.Node.Excuse(bridge, why) {
		return
	}
	if why == "" {
		f.cfg.Metrics.notRestored.WithLabelValues(bridge).Set(0)
		return
	}
	f.cfg.Metrics.notRestored.WithLabelValues(bridge).Set(1)
	f.log.Error("releasing the node without this bridge", "bridge", bridge, "reason", why)
	f.cfg.Publish(events.Event{Type: events.BridgeNotRestored, Bridge: bridge,
		Message: "flow-restore-wait released without this bridge: " + why})
}
