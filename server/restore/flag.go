package restore

// The flag protocol: flow-restore-wait is owned by the OVSDB goroutine
// (runOVSDB), which clears it once nothing holds the node (syncFlag), re-arms
// it for the next vswitchd start, and answers Arm and Release; holding and
// disarm decide what a graceful stop leaves behind.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
		b := e.bridges[name]
		if st := b.snapshot(); !st.Converged && st.Excused == "" && !b.owner.standingAside() {
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

// GuardChanged tells the engine that Config.GuardPresent's answer changed:
// the flag is disarmed (or armed again) now, not at the next periodic check.
func (e *Engine) GuardChanged() { e.signalRecheck() }

func (e *Engine) signalRecheck() {
	select {
	case e.recheck <- struct{}{}:
	default:
	}
}

// syncFlag brings flow-restore-wait to its intended state once nothing holds
// the node any more:
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
func (e *Engine) syncFlag(ctx context.Context, release bool) (recheck time.Duration, err error) {
	c := e.ovsdb.Load()
	if c == nil {
		return 0, nil
	}
	vs := e.watchVswitchd()
	restorable, nothing := e.restorable(c)
	if wait := e.settle(c, restorable); wait > 0 {
		return wait, nil
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	e.flagBusySince.Store(time.Now().UnixNano())
	defer e.flagBusySince.Store(0)
	on, err := c.FlowRestoreWait()
	if err != nil {
		return 0, fmt.Errorf("restore: reading flow-restore-wait: %w", err)
	}
	guarded, why := e.cfg.GuardPresent()
	arm := e.cfg.Rearm && guarded
	arm = arm && restorable
	if !on && vs.running {
		// A waiting vswitchd reads the flag at every change of the
		// database: this one is not held, whoever cleared it.
		e.vswitchdUnheld = vs.id
		e.unheldView.Store(&vs.id)
	}
	unreleased := e.unreleasedLocked(vs)
	if on && !release && unreleased && e.noneConverged() {
		release = true // step 2: owed
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.AckTimeout)
	defer cancel()
	switch {
	case on && !restorable && !unreleased:
		// Step 5 with no vswitchd held.
		if err := c.SetFlowRestoreWait(actx, false, false); err != nil {
			return 0, fmt.Errorf("restore: disarming flow-restore-wait: %w", err)
		}
		on = false
		e.log.Warn("flow-restore-wait disarmed: nothing for flowstated to restore", "reason", nothing)
	case on && (release || !guarded || !restorable):
		if (release || !restorable) && !e.mirrorsSettled(c) {
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
	if e.cfg.Rearm && guarded && nothing != e.notArmedFor {
		e.notArmedFor = nothing
		if nothing != "" {
			e.log.Warn("flow-restore-wait not armed: nothing for flowstated to restore; vswitchd starts as plain Open vSwitch would", "reason", nothing)
		} else {
			e.log.Info("a managed bridge can be restored again: flow-restore-wait may be armed")
		}
	}
	if !on {
		e.noteReleased(c)
	}
	if e.cfg.Rearm && guarded == e.guardMissing {
		e.guardMissing = !guarded
		if !guarded {
			e.log.Error("flow-restore-wait is not armed: no proven guard would release the node if flowstated died (see --guard)", "why", why)
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
			return 0, fmt.Errorf("restore: re-arming flow-restore-wait: %w", err)
		}
		e.unackedClear = false
	}
	if err := c.SetFlowRestoreWait(actx, true, false); err != nil {
		return 0, fmt.Errorf("restore: re-arming flow-restore-wait: %w", err)
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
	known := held != "" && held == e.releasedLocked()
	if known && keepIfReleased {
		e.log.Debug("flow-restore-wait left armed: this vswitchd was released before", "vswitchd", held)
		return false, nil
	}
	e.cfg.Faults.beforeClear()
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
	if err := e.cfg.Store.Releases().SetVswitchd(held); err != nil {
		e.log.Warn("recording the released vswitchd; a restarted flowstated may count this release again", "err", err)
	}
	now := time.Now()
	e.lastRelease.Store(now.UnixNano())
	if err := e.cfg.Store.Releases().SetLast(now); err != nil {
		e.log.Warn("recording the release time; a restarted flowstated will not report it", "err", err)
	}
	e.cfg.Metrics.flagCleared.Inc()
	e.log.Info("flow-restore-wait cleared", "ack", ack)
	e.publish(events.Event{Type: events.FlagCleared, Message: "flow-restore-wait cleared and acknowledged by vswitchd",
		Attrs: map[string]string{"ack": ack.String()}})
	return true, nil
}

// releasedLocked is the vswitchd last released; flagMu must be held.
func (e *Engine) releasedLocked() string {
	if e.releasedVswitchd == "" {
		// The first look of this process: the last release may have
		// been a previous flowstated's.
		e.releasedVswitchd, _ = e.cfg.Store.Releases().Vswitchd()
	}
	return e.releasedVswitchd
}

// vswitchdSeen is the vswitchd syncFlag saw running.
type vswitchdSeen struct {
	id      string // vswitchdIdentity
	running bool   // its pidfile is locked: the process lives
}

// watchVswitchd looks at the running vswitchd and notes when a new one
// started (vswitchdSince), from which a bridge that cannot be restored holds
// it at most MaxHold. Called by the OVSDB goroutine only, which owns
// vswitchdLast and vswitchdSince.
func (e *Engine) watchVswitchd() vswitchdSeen {
	v := vswitchdSeen{id: e.vswitchdIdentity()}
	v.running = v.id != "" && pidfileLocked(filepath.Join(e.cfg.RunDir, "ovs-vswitchd.pid"))
	if v.id != e.vswitchdLast {
		e.vswitchdLast = v.id
		if v.id != "" {
			e.vswitchdSince = time.Now()
		}
	}
	return v
}

// unreleasedLocked reports whether v is a running vswitchd that may be held:
// no flowstated of this store released it, and the flag was not seen
// cleared while it ran. flagMu must be held.
func (e *Engine) unreleasedLocked(v vswitchdSeen) bool {
	return v.running && v.id != e.releasedLocked() && v.id != e.vswitchdUnheld
}

// pidfileLocked reports whether the process that wrote the OVS pidfile at
// path still runs: OVS holds a write lock on it for its life, which also
// shows across pid namespaces (flowstated in a container without hostPID).
// A failed check counts as running.
func pidfileLocked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return true
	}
	return lk.Type != syscall.F_UNLCK
}

// noneConverged reports whether no managed bridge is converged. With every
// bridge excused, nothing else asks for the release; while one is converged,
// it may be on the connection to a vswitchd that just died, and its next
// connection asks.
func (e *Engine) noneConverged() bool {
	for _, name := range e.order {
		if e.bridges[name].snapshot().Converged {
			return false
		}
	}
	return true
}

// restorable reports whether a vswitchd start has something of this
// flowstated's to wait for: a managed bridge in OVSDB and not stood aside
// from. Otherwise nothing says why, for each bridge.
func (e *Engine) restorable(c *ovsconfig.Client) (ok bool, nothing string) {
	brs, err := c.Bridges()
	if err != nil {
		return true, "" // unknown: the other rules hold
	}
	present := map[string]bool{}
	for _, br := range brs {
		present[br.Name] = true
	}
	var why []string
	for _, name := range e.order {
		switch {
		case !present[name]:
			why = append(why, "bridge "+name+" does not exist in OVSDB")
		case e.bridges[name].owner.standingAside():
			why = append(why, "flowstated stands aside from bridge "+name)
		default:
			return true, ""
		}
	}
	return false, strings.Join(why, "; ")
}

// LastRelease is when a clear last released a held vswitchd, by this
// flowstated or an earlier one of the same store (zero if never).
func (e *Engine) LastRelease() time.Time {
	if n := e.lastRelease.Load(); n != 0 {
		return time.Unix(0, n)
	}
	at, _ := e.cfg.Store.Releases().Last()
	return at
}

// Vswitchd says whether ovs-vswitchd runs (its pidfile is locked) and, if it
// does, whether it is past the flag: released by a flowstated of this store,
// or seen with the flag cleared while it ran. A flag set under such a
// vswitchd is armed for its next start, not holding it. Status calls it:
// it reads the store and atomics, never waiting for a clear in progress.
func (e *Engine) Vswitchd() (running, unheld bool) {
	id := e.vswitchdIdentity()
	if id == "" || !pidfileLocked(filepath.Join(e.cfg.RunDir, "ovs-vswitchd.pid")) {
		return false, false
	}
	if p := e.unheldView.Load(); p != nil && *p == id {
		return true, true
	}
	rec, _ := e.cfg.Store.Releases().Vswitchd()
	return true, rec == id
}

// Arm sets flow-restore-wait for a planned restart of vswitchd, only if this
// flowstated can restore and release the switch afterwards.
func (e *Engine) Arm(ctx context.Context) (wasSet bool, err error) {
	if w := e.Wedged(); w != "" {
		return false, fmt.Errorf("restore: not arming flow-restore-wait: the engine is wedged (%s): %w", w, errdefs.ErrFailedPrecondition)
	}
	if ok, why := e.cfg.GuardPresent(); !ok {
		return false, fmt.Errorf("restore: not arming flow-restore-wait: no guard proves it would release the node if flowstated died (%s): %w", why, errdefs.ErrFailedPrecondition)
	}
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, fmt.Errorf("restore: not arming flow-restore-wait: OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	if ok, nothing := e.restorable(c); !ok {
		// Armed, it would only hold vswitchd until flowstated clears it.
		return false, fmt.Errorf("restore: not arming flow-restore-wait: nothing for flowstated to restore (%s): %w", nothing, errdefs.ErrFailedPrecondition)
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
		return false, 0, fmt.Errorf("restore: OVSDB is not connected: %w", errdefs.ErrUnavailable)
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
// the first of them reaches MaxHold. The cold-start gate holds only while
// something can be restored (restorable): modules that resync for a bridge
// that does not exist yet would hold a provisioning node for nothing.
func (e *Engine) settle(c *ovsconfig.Client, restorable bool) time.Duration {
	present := map[string]bool{}
	brs, err := c.Bridges()
	for _, br := range brs {
		present[br.Name] = true
	}
	gateOpened := e.gate.openedAt()
	if gateOpened.IsZero() && restorable {
		// The cold-start gate holds the node, bounded by its own timeout.
		return e.cfg.RetryInterval
	}
	// Each vswitchd start gets its own MaxHold: a bridge unconverged while
	// vswitchd was down is not excused from the restore of the next one.
	holdFrom := gateOpened
	if e.vswitchdSince.After(holdFrom) {
		holdFrom = e.vswitchdSince
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
		case b.owner.standingAside():
			// Not this store's to restore (owner.go): waiting for it
			// would hold the node for nothing.
			// Its reason is the bridge's own (Status, the standing-aside
			// log line): repeated here it would be printed twice.
			why = "flowstated stands aside from bridge " + name
		case gateOpened.IsZero():
			// Appeared in OVSDB since restorable looked: the gate
			// holds it.
			return e.cfg.RetryInterval
		default:
			since := st.Since
			if since.Before(holdFrom) {
				since = holdFrom
			}
			left := e.cfg.MaxHold - time.Since(since)
			if left > 0 {
				if wait == 0 || left < wait {
					wait = left
				}
				// Held again, by this vswitchd start.
				e.excuse(b, "")
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
func (e *Engine) vswitchdIdentity() string { return ovsconfig.VswitchdIdentity(e.cfg.RunDir) }

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

// vswitchdHeld reports whether the running vswitchd may still be held by
// flow-restore-wait, decided from what vswitchd reports, never from the flag
// alone: re-armed, the flag reads true on a vswitchd released long ago, which
// reads it only until it first sees it false.
//
//  1. OVSDB cannot tell (not connected, no row): known is false.
//  2. The flag is off: not held.
//  3. The running vswitchd is named by its pidfile in the run dir
//     (vswitchdIdentity: pid and start time). Without one flowstated cannot
//     tell a restarted vswitchd from a bridge rebuilt on a running one, so
//     it is taken as not held: an unmanaged bridge then comes back as plain
//     OVS would bring it back, never overwritten on a running vswitchd.
//  4. That vswitchd was released: the one a flowstated's clear released (the
//     store records it, clearLocked), or one seen running with the flag off
//     and cur_cfg caught up with next_cfg (noteReleased): not held.
//  5. Otherwise it started under the flag and nobody released it: held.
//
// flagMu must be held.
func (e *Engine) vswitchdHeld() (held, known bool) {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, false
	}
	on, err := c.FlowRestoreWait()
	if err != nil {
		return false, false
	}
	if !on {
		return false, true
	}
	id := e.vswitchdIdentity()
	if id == "" {
		if !e.mirrors.noIdentity {
			e.mirrors.noIdentity = true
			e.log.Warn("no ovs-vswitchd pidfile in the run dir: vswitchd is taken as not held, and unmanaged bridges are not restored",
				"pidfile", filepath.Join(e.cfg.RunDir, "ovs-vswitchd.pid"))
		}
		return false, true
	}
	e.mirrors.noIdentity = false
	if e.releasedVswitchd == "" {
		// Before this process's first clear, the last release may have
		// been a previous flowstated's.
		if rec, err := e.cfg.Store.Releases().Vswitchd(); err == nil {
			e.releasedVswitchd = rec
		}
	}
	return id != e.releasedVswitchd && id != e.mirrors.seenReleased, true
}

// noteReleased records the running vswitchd as released when the flag is off
// and vswitchd has caught up with OVSDB (cur_cfg reached next_cfg): it has
// read the flag false, so it is not held, whatever the flag reads later
// (vswitchdHeld). flagMu must be held.
func (e *Engine) noteReleased(c *ovsconfig.Client) {
	if next, cur, err := c.Config(); err != nil || cur < next {
		return
	}
	if id := e.vswitchdIdentity(); id != "" {
		e.mirrors.seenReleased = id
	}
}
