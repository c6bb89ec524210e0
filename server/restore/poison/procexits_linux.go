package poison

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"syscall"
	"time"
)

// procExits hears the exits of processes from the kernel's proc connector
// (CN_PROC), with their wait status (evidence.go), and keeps those of the
// last exitsKept. The zero value hears nothing; run listens until ctx ends.
type procExits struct {
	mu        sync.Mutex
	listening bool
	exits     map[int]procExit
	limit     int           // prune exits older than exitsKept beyond this many
	heard     chan struct{} // closed and replaced at each exit heard
}

type procExit struct {
	ws syscall.WaitStatus
	at time.Time
}

// Constants of linux/connector.h and linux/cn_proc.h.
const (
	netlinkConnector  = 11
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventExit     = 0x80000000
	nlHdrLen          = 16
	cnMsgLen          = 20
)

// exitsKept is how long an exit is kept: the death of vswitchd is looked
// up within seconds of it (Tracker.Death).
const exitsKept = 30 * time.Second

// wait returns the wait status of pid's exit, waiting at most d for the
// kernel's report; ok is false when none is heard.
func (p *procExits) wait(ctx context.Context, pid int, d time.Duration) (syscall.WaitStatus, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		x, ok := p.exits[pid]
		listening, heard := p.listening, p.heard
		p.mu.Unlock()
		if ok || !listening || pid <= 0 {
			return x.ws, ok
		}
		select {
		case <-heard:
		case <-deadline.C:
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}

// run listens to the proc connector until ctx ends; without the privilege
// to (root in the host's namespaces) it logs why and returns.
func (p *procExits) run(ctx context.Context, log *slog.Logger) {
	fd, err := listenProcConnector()
	if err != nil {
		log.Info("proc connector unavailable: a death of ovs-vswitchd is told from a kill from outside by its log alone", "err", err)
		return
	}
	defer syscall.Close(fd)
	p.mu.Lock()
	p.listening, p.exits, p.heard = true, map[int]procExit{}, make(chan struct{})
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.listening = false
		p.mu.Unlock()
	}()
	buf := make([]byte, 1<<16)
	for ctx.Err() == nil {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				continue
			}
			if errors.Is(err, syscall.ENOBUFS) {
				log.Warn("proc connector overrun: exits of ovs-vswitchd may go unheard (counted as crashes)")
				continue
			}
			log.Warn("proc connector failed: a death of ovs-vswitchd is told from a kill from outside by its log alone", "err", err)
			return
		}
		p.read(buf[:n])
	}
}

// read records the process exits in the netlink messages b.
func (p *procExits) read(b []byte) {
	now := time.Now()
	for len(b) >= nlHdrLen {
		l := int(binary.NativeEndian.Uint32(b))
		if l < nlHdrLen || l > len(b) {
			return
		}
		ev := b[nlHdrLen:l]
		b = b[min((l+3)&^3, len(b)):]
		// proc_event after the cn_msg: what, cpu, timestamp, then for an
		// exit: pid, tgid, exit_code, exit_signal.
		if len(ev) < cnMsgLen+32 || binary.NativeEndian.Uint32(ev[cnMsgLen:]) != procEventExit {
			continue
		}
		ev = ev[cnMsgLen+16:]
		pid, tgid := int(int32(binary.NativeEndian.Uint32(ev))), int(int32(binary.NativeEndian.Uint32(ev[4:])))
		if pid != tgid {
			continue // a thread, not the process
		}
		p.mu.Lock()
		if len(p.exits) >= p.limit {
			maps.DeleteFunc(p.exits, func(_ int, x procExit) bool { return now.Sub(x.at) > exitsKept })
			if len(p.exits) > 8192 {
				clear(p.exits) // a storm of exits: keep memory bounded
			}
			p.limit = max(1024, 2*len(p.exits))
		}
		p.exits[pid] = procExit{ws: syscall.WaitStatus(binary.NativeEndian.Uint32(ev[8:])), at: now}
		close(p.heard)
		p.heard = make(chan struct{})
		p.mu.Unlock()
	}
}

// listenProcConnector opens a netlink socket on the proc connector and
// subscribes to its events; reads time out every half second.
func listenProcConnector() (int, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkConnector)
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int, error) {
		_ = syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fail(err)
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1<<20)
	tv := syscall.NsecToTimeval(int64(500 * time.Millisecond))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return fail(err)
	}
	msg := make([]byte, nlHdrLen+cnMsgLen+4)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], syscall.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[nlHdrLen:], cnIdxProc)
	binary.NativeEndian.PutUint32(msg[nlHdrLen+4:], cnValProc)
	binary.NativeEndian.PutUint16(msg[nlHdrLen+16:], 4)
	binary.NativeEndian.PutUint32(msg[nlHdrLen+cnMsgLen:], procCnMcastListen)
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fail(err)
	}
	return fd, nil
}
