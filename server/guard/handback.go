package guard

import (
	"time"

	"golang.org/x/sys/unix"
)

// The hand-back
//
// A flowstated that comes back asks the guard for the proxies' sockets
// (FetchListeners) before it renews its lease, and its first reconcile of a
// relayed bridge learns from the switch what the relayed controller
// installed meanwhile (Relayed). A session the guard still relays then could
// change the switch after that dump: a change vswitchd acknowledged to the
// controller that the store never learns, and the next replay undoes. So:
//
//  1. The hand-over ends the relaying before it sends the sockets: every
//     relayed session is closed and what unrecorded sessions installed is
//     written (stopLocked), so that what flowstated reads and dumps next is
//     final.
//  2. While the lease is still stale the guard does not relay again, for as
//     long as the flowstated that took the sockets may be starting: until it
//     renews the lease, it dies, or a grace has passed since the hand-over
//     (a flowstated that hangs before its first renewal does not leave the
//     controller without a path for longer than the guard's own grace).

// handBack is the flowstated that took the sockets over (relayer.back).
type handBack struct {
	at    time.Time
	pid   int
	pidfd int // -1: none (the peer's pid unknown, or no pidfd_open)
}

// takenBack ends the relaying for the flowstated cred describes, which is
// taking the sockets over (step 1 above).
func (r *relayer) takenBack(cred *unix.Ucred) {
	r.amu.Lock()
	defer r.amu.Unlock()
	relayed := len(r.active) > 0
	r.stopLocked()
	r.back.close()
	r.back = &handBack{at: time.Now(), pid: int(cred.Pid), pidfd: -1}
	if cred.Pid > 0 {
		if fd, err := unix.PidfdOpen(int(cred.Pid), 0); err == nil {
			r.back.pidfd = fd
		}
	}
	if relayed {
		r.log.Info("guard: a returning flowstated takes the openflow proxy sockets over: relayed controllers disconnected before it learns what they installed", "pid", cred.Pid)
	}
}

// starting reports whether the flowstated of b may still be starting: it
// took the sockets over less than grace ago and has not exited (step 2).
func (b *handBack) starting(grace time.Duration) bool {
	if b == nil || time.Since(b.at) >= grace {
		return false
	}
	if b.pidfd >= 0 {
		// A pidfd polls readable once its process has exited.
		fds := []unix.PollFd{{Fd: int32(b.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err != nil || n == 0
	}
	if b.pid > 0 {
		return unix.Kill(b.pid, 0) != unix.ESRCH
	}
	return true
}

func (b *handBack) close() {
	if b != nil && b.pidfd >= 0 {
		_ = unix.Close(b.pidfd)
		b.pidfd = -1
	}
}
