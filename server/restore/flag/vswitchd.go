package flag

import (
	"path/filepath"
	"time"

	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// vswitchdSeen is the vswitchd sync saw running.
type vswitchdSeen struct {
	id      string // vswitchdIdentity
	running bool   // its pidfile is locked: the process lives
}

// vswitchdIdentity names the running ovs-vswitchd by its pidfile (pid and
// start time), "" when unknown.
func (f *Flag) vswitchdIdentity() string { return ovsconfig.VswitchdIdentity(f.cfg.RunDir) }

func (f *Flag) pidfile() string { return filepath.Join(f.cfg.RunDir, "ovs-vswitchd.pid") }

// watchVswitchd looks at the running vswitchd and notes when a new one
// started (vswitchdSince), from which a bridge that cannot be restored holds
// it at most MaxHold. Called by Run only, which owns vswitchdLast and
// vswitchdSince.
func (f *Flag) watchVswitchd() vswitchdSeen {
	v := vswitchdSeen{id: f.vswitchdIdentity()}
	v.running = v.id != "" && ovsconfig.PidfileLocked(f.pidfile())
	if v.id != f.vswitchdLast {
		f.vswitchdLast = v.id
		if v.id != "" {
			f.vswitchdSince = time.Now()
		}
	}
	return v
}

// releasedLocked is the vswitchd last released; f.mu must be held.
func (f *Flag) releasedLocked() string {
	if f.releasedVswitchd == "" {
		// The first look of this process: the last release may have
		// been a previous flowstated's.
		f.releasedVswitchd, _ = f.cfg.Store.Vswitchd()
	}
	return f.releasedVswitchd
}

// HeldReleased is VswitchdHeld and, read with it, the vswitchd this store
// last released ("" when none).
func (f *Flag) HeldReleased() (held, known bool, released string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held, known = f.vswitchdHeldLocked()
	return held, known, f.releasedLocked()
}

// unreleasedLocked reports whether v is a running vswitchd that may be held:
// no flowstated of this store released it, and the flag was not seen
// cleared while it ran. f.mu must be held.
func (f *Flag) unreleasedLocked(v vswitchdSeen) bool {
	return v.running && v.id != f.releasedLocked() && v.id != f.vswitchdUnheld
}

// vswitchd says whether ovs-vswitchd runs (its pidfile is locked) and, if it
// does, whether it is past the flag: released by a flowstated of this store,
// or seen with the flag cleared while it ran. A flag set under such a
// vswitchd is armed for its next start, not holding it. State calls it: it
// reads the store and atomics, never waiting for a clear in progress.
func (f *Flag) vswitchd() (running, unheld bool) {
	id := f.vswitchdIdentity()
	if id == "" || !ovsconfig.PidfileLocked(f.pidfile()) {
		return false, false
	}
	if p := f.unheldView.Load(); p != nil && *p == id {
		return true, true
	}
	rec, _ := f.cfg.Store.Vswitchd()
	return true, rec == id
}

// Pin keeps the flag as it is until unpin is called, and says whether the
// running vswitchd is held (VswitchdHeld): what is decided and written
// under it cannot race a clear, so flowstated never writes to an unmanaged
// bridge of a released vswitchd.
func (f *Flag) Pin() (held, known bool, unpin func()) {
	f.mu.Lock()
	held, known = f.vswitchdHeldLocked()
	return held, known, f.mu.Unlock
}

// VswitchdHeld reports whether the running vswitchd may still be held by
// flow-restore-wait (vswitchdHeldLocked); known is false when OVSDB cannot
// tell.
func (f *Flag) VswitchdHeld() (held, known bool) {
	held, known, unpin := f.Pin()
	unpin()
	return held, known
}

// vswitchdHeldLocked decides whether the running vswitchd may still be held
// by flow-restore-wait from what vswitchd reports, never from the flag
// alone: re-armed, the flag reads true on a vswitchd released long ago,
// which reads it only until it first sees it false.
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
// f.mu must be held.
func (f *Flag) vswitchdHeldLocked() (held, known bool) {
	c := f.ovsdb.Load()
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
	id := f.vswitchdIdentity()
	if id == "" {
		if !f.noIdentity {
			f.noIdentity = true
			f.log.Warn("no ovs-vswitchd pidfile in the run dir: vswitchd is taken as not held, and unmanaged bridges are not restored",
				"pidfile", f.pidfile())
		}
		return false, true
	}
	f.noIdentity = false
	return id != f.releasedLocked() && id != f.seenReleased, true
}

// noteReleased records the running vswitchd as released when the flag is off
// and vswitchd has caught up with OVSDB (cur_cfg reached next_cfg): it has
// read the flag false, so it is not held, whatever the flag reads later
// (vswitchdHeldLocked). f.mu must be held.
func (f *Flag) noteReleased(c *ovsconfig.Client) {
	if next, cur, err := c.Config(); err != nil || cur < next {
		return
	}
	if id := f.vswitchdIdentity(); id != "" {
		f.seenReleased = id
	}
}
