package restore

// The flag protocol: flow-restore-wait is owned by the OVSDB goroutine
// (runOVSDB), which clears it once nothing holds the node (syncFlag), re-arms
// it for the next vswitchd start, and answers Arm and Release; holding and
// disarm decide what a graceful stop leaves behind.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// holding says what the node waits for ("" for nothing): the cold-start gate,
// or a bridge not restored yet that still holds it.
func (e *Engine) holding() string {
	if !e.gate.isOpen() {
		return "the cold-start gate"
	}
	for _, name := range e.order {
		st := e.bridges[name].snapshot()
		if !st.Converged && st.Excused == "" {
			return "bridge " + name
		}
	}
	return ""
}

// disarm clears the flag when flowstated stops with nothing held: a flag left
// true with nobody to clear it would keep the next vswitchd from forwarding.
func (e *Engine) disarm(c *ovsconfig.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.AckTimeout)
	defer cancel()
	if err := c.SetFlowRestoreWait(ctx, false, false); err != nil {
		e.log.Error("could not disarm flow-restore-wait on stop; a vswitchd restarted now stays gated until it is cleared", "err", err)
		return
	}
	e.log.Info("flow-restore-wait disarmed for shutdown")
}

// runOVSDB dials OVSDB until it succeeds, then clears the flag whenever every
// bridge has converged after a (re)connection. The client reconnects by
// itself afterwards (package ovsconfig).
func (e *Engine) runOVSDB(ctx context.Context) {
	var c *ovsconfig.Client
	for c == nil {
		var err error
		c, err = ovsconfig.Dial(ctx, e.cfg.OVSDB, ovsconfig.Options{Logger: e.log})
		if err != nil {
			e.log.Warn("ovsdb unreachable, retrying", "addr", e.cfg.OVSDB, "err", err)
			if !sleepCtx(ctx, e.cfg.RetryInterval) {
				return
			}
		}
	}
	e.ovsdb.Store(c)
	close(e.ovsdbUp)
	e.log.Info("ovsdb connected", "addr", e.cfg.OVSDB)
	// A bridge may have converged before OVSDB answered.
	e.signalConverged()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	// The periodic check re-arms a flag the guard cleared while this
	// flowstated was frozen, and disarms it when the guard is gone.
	check := time.NewTicker(flagCheckInterval)
	defer check.Stop()
	release := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.converged:
			release = true
		case <-e.recheck:
		case <-retry.C:
		case <-check.C:
		}
		recheck, err := e.syncFlag(ctx, release)
		switch {
		case err != nil:
			e.log.Error("flow-restore-wait not in its intended state, retrying", "err", err)
			retry.Reset(e.cfg.RetryInterval)
		case recheck > 0:
			retry.Reset(recheck) // a bridge's MaxHold runs out then
		default:
			release = false
		}
	}
}

// flagCheckInterval paces the periodic flag check of runOVSDB.
const flagCheckInterval = time.Second

func (e *Engine) signalConverged() {
	select {
	case e.converged <- struct{}{}:
	default:
	}
}

func (e *Engine) signalRecheck() {
	select {
	case e.recheck <- struct{}{}:
	default:
	}
}

// syncFlag brings flow-restore-wait to its intended state once nothing holds
// the node any more:
//
//  1. Every managed bridge is converged, or excused: missing from OVSDB, or
//     unconverged for longer than MaxHold (named in status, a metric, an
//     event and an error log). Otherwise return the time until the next
//     MaxHold expires.
//  2. With release (a bridge converged after a new connection) and the flag
//     set, clear it in one transaction that bumps next_cfg, and wait until
//     cur_cfg reaches it: vswitchd forwards through the restored pipeline
//     from here on. The clear is counted only if it released a vswitchd
//     that had not been released yet.
//  3. Arm it again (Rearm, and a guard is present) only once vswitchd has
//     acknowledged every change so far, the clear included: a re-arm that
//     overtook an unread clear would hold vswitchd for ever.
//  4. Without a guard the flag is cleared instead, whoever set it: nobody
//     would release the node if flowstated died.
//
// release is false for the periodic check, which never clears a flag that
// is armed with a guard present: an operator (ovs-restart) may have armed it
// for a planned restart.
func (e *Engine) syncFlag(ctx context.Context, release bool) (recheck time.Duration, err error) {
	c := e.ovsdb.Load()
	if c == nil {
		return 0, nil
	}
	if wait := e.settle(c); wait > 0 {
		return wait, nil
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	e.flagBusySince.Store(time.Now().UnixNano())
	defer e.flagBusySince.Store(0)
	on, err := c.FlowRestoreWait()
	if err != nil {
		return 0, fmt.Errorf("reading flow-restore-wait: %w", err)
	}
	guarded := e.cfg.GuardPresent()
	arm := e.cfg.Rearm && guarded
	actx, cancel := context.WithTimeout(ctx, e.cfg.AckTimeout)
	defer cancel()
	if on && (release || !guarded) {
		if release && !e.mirrorsSettled(c) {
			// Unmanaged bridges come back first (mirror.go); its hold
			// timer bounds the wait.
			return e.cfg.RetryInterval, nil
		}
		cleared, err := e.clearLocked(actx, c, arm)
		if err != nil {
			return 0, err
		}
		on = !cleared
	}
	if !on {
		e.noteReleased(c)
	}
	if e.cfg.Rearm && guarded == e.guardMissing {
		e.guardMissing = !guarded
		if !guarded {
			e.log.Error("flow-restore-wait is not armed: no guard is running that would release the node if flowstated died (see --guard)")
		} else {
			e.log.Info("a guard is running again: flow-restore-wait may be armed")
		}
	}
	if on || !arm {
		return 0, nil
	}
	if e.unackedClear || e.anyConnected() {
		// A running vswitchd must have read the clear before the flag
		// comes back (one that is down reads the flag at its start).
		if err := c.WaitConfigured(actx); err != nil {
			return 0, fmt.Errorf("re-arming flow-restore-wait: %w", err)
		}
		e.unackedClear = false
	}
	if err := c.SetFlowRestoreWait(actx, true, false); err != nil {
		return 0, fmt.Errorf("re-arming flow-restore-wait: %w", err)
	}
	e.cfg.Metrics.flagRearmed.Inc()
	e.log.Info("flow-restore-wait re-armed for the next vswitchd start")
	e.publish(events.Event{Type: events.FlagRearmed, Message: "flow-restore-wait re-armed for the next vswitchd start"})
	return 0, nil
}

// clearLocked clears the flag and waits for vswitchd's acknowledgement.
// With keepIfReleased it leaves the flag alone (cleared false) when the
// running vswitchd was released before: vswitchd reads the flag only until
// it first sees it false, so it is not held, and a clear followed by a
// re-arm would only open a window in which a vswitchd restart comes back
// ungated.
func (e *Engine) clearLocked(ctx context.Context, c *ovsconfig.Client, keepIfReleased bool) (cleared bool, err error) {
	start := time.Now()
	held := e.vswitchdIdentity()
	if e.releasedVswitchd == "" {
		// The first clear of this process: the last release may have
		// been a previous flowstated's.
		e.releasedVswitchd, _ = e.cfg.Store.ReleasedVswitchd()
	}
	known := held != "" && held == e.releasedVswitchd
	if known && keepIfReleased {
		e.log.Debug("flow-restore-wait left armed: this vswitchd was released before", "vswitchd", held)
		return false, nil
	}
	if e.beforeClear != nil {
		e.beforeClear()
	}
	if err := c.SetFlowRestoreWait(ctx, false, true); err != nil {
		e.unackedClear = true
		return false, err
	}
	e.unackedClear = false
	ack := time.Since(start)
	if known {
		e.log.Info("flow-restore-wait cleared: no guard runs", "ack", ack)
		return true, nil
	}
	e.releasedVswitchd = held
	if err := e.cfg.Store.SetReleasedVswitchd(held); err != nil {
		e.log.Warn("recording the released vswitchd; a restarted flowstated may count this release again", "err", err)
	}
	e.lastRelease.Store(time.Now().UnixNano())
	e.cfg.Metrics.flagCleared.Inc()
	e.log.Info("flow-restore-wait cleared", "ack", ack)
	e.publish(events.Event{Type: events.FlagCleared, Message: "flow-restore-wait cleared and acknowledged by vswitchd",
		Attrs: map[string]string{"ack": ack.String()}})
	return true, nil
}

// LastRelease is when a clear last released a held vswitchd (zero if never
// since start).
func (e *Engine) LastRelease() time.Time {
	if n := e.lastRelease.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Arm sets flow-restore-wait for a planned restart of vswitchd, only if this
// flowstated can restore and release the switch afterwards.
func (e *Engine) Arm(ctx context.Context) (wasSet bool, err error) {
	if w := e.Wedged(); w != "" {
		return false, fmt.Errorf("not arming flow-restore-wait: the engine is wedged (%s): %w", w, errdefs.ErrFailedPrecondition)
	}
	if !e.cfg.GuardPresent() {
		return false, fmt.Errorf("not arming flow-restore-wait: no guard runs that would release the node if flowstated died: %w", errdefs.ErrFailedPrecondition)
	}
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, fmt.Errorf("not arming flow-restore-wait: OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	on, err := c.FlowRestoreWait()
	if err != nil || on {
		return on, err
	}
	if err := c.SetFlowRestoreWait(ctx, true, false); err != nil {
		return false, err
	}
	e.log.Info("flow-restore-wait armed on request")
	return false, nil
}

// Release clears flow-restore-wait and waits until vswitchd has read it.
func (e *Engine) Release(ctx context.Context) (wasSet bool, ack time.Duration, err error) {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, 0, fmt.Errorf("OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	if wasSet, err = c.FlowRestoreWait(); err != nil {
		return false, 0, err
	}
	start := time.Now()
	if err := c.SetFlowRestoreWait(ctx, false, true); err != nil {
		e.unackedClear = true
		return wasSet, 0, err
	}
	e.unackedClear = false
	e.log.Warn("flow-restore-wait cleared on request", "was_set", wasSet, "ack", time.Since(start))
	return wasSet, time.Since(start), nil
}

// settle reports how long the node must stay held for the managed bridges:
// 0 when each is converged or excused (see syncFlag), else the time until
// the first of them reaches MaxHold.
func (e *Engine) settle(c *ovsconfig.Client) time.Duration {
	present := map[string]bool{}
	brs, err := c.Bridges()
	for _, br := range brs {
		present[br.Name] = true
	}
	gateOpened := e.gate.openedAt()
	if gateOpened.IsZero() {
		// The cold-start gate holds the node, bounded by its own timeout.
		return e.cfg.RetryInterval
	}
	var wait time.Duration
	for _, name := range e.order {
		b := e.bridges[name]
		st := b.snapshot()
		var why string
		switch {
		case st.Converged:
		case err == nil && !present[name]:
			why = "bridge " + name + " does not exist in OVSDB"
		case b.owner.refused.Load() != nil && !b.owner.claimed.Load():
			// Not this store's to restore (owner.go): waiting for it
			// would hold the node for nothing.
			why = "flowstated stands aside from bridge " + name + ": " + *b.owner.refused.Load()
		default:
			since := st.Since
			if since.Before(gateOpened) {
				since = gateOpened
			}
			left := e.cfg.MaxHold - time.Since(since)
			if left > 0 {
				if wait == 0 || left < wait {
					wait = left
				}
				continue
			}
			why = fmt.Sprintf("bridge %s could not be restored within --max-hold %v (%s)", name, e.cfg.MaxHold, st.Reason)
		}
		e.excuse(b, why)
	}
	return wait
}

// excuse records why b does not hold the node ("" when it is converged), and
// reports each new excuse loudly: log, event, metric.
func (e *Engine) excuse(b *bridge, why string) {
	prev := b.excused.Load()
	if why == "" {
		if prev != nil {
			b.excused.Store(nil)
			e.cfg.Metrics.notRestored.WithLabelValues(b.name).Set(0)
		}
		return
	}
	if prev != nil && *prev == why {
		return
	}
	b.excused.Store(&why)
	e.cfg.Metrics.notRestored.WithLabelValues(b.name).Set(1)
	e.log.Error("releasing the node without this bridge", "bridge", b.name, "reason", why)
	e.publish(events.Event{Type: events.BridgeNotRestored, Bridge: b.name,
		Message: "flow-restore-wait released without this bridge: " + why})
}

func (e *Engine) anyConnected() bool {
	for _, name := range e.order {
		if e.bridges[name].snapshot().Connected {
			return true
		}
	}
	return false
}

// vswitchdIdentity names the running ovs-vswitchd by its pidfile (pid and
// start time), "" when unknown.
func (e *Engine) vswitchdIdentity() string {
	path := filepath.Join(e.cfg.RunDir, "ovs-vswitchd.pid")
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b)) + "@" + fi.ModTime().UTC().Format(time.RFC3339Nano)
}

// VswitchdAcknowledged reports whether vswitchd has read the latest change
// to OVSDB (cur_cfg reached next_cfg).
func (e *Engine) VswitchdAcknowledged() bool {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false
	}
	next, cur, err := c.Config()
	return err == nil && cur >= next
}

// FlowRestoreWait returns the flag as stored in OVSDB; ok is false while OVSDB
// is not connected.
func (e *Engine) FlowRestoreWait() (on, ok bool) {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, false
	}
	on, err := c.FlowRestoreWait()
	return on, err == nil
}
