package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/flowstate-io/flowstate/server/guard"
)

// watchExit sends pid on exited once that process has exited, or returns
// when ctx ends. A guard an earlier flowstated spawned is no child of this
// one, so no Wait tells of its exit: a pidfd does (Linux 5.3), readable
// once the process is gone. Without one, the next renewal notices instead.
// A pid reused by another process costs one extra check, nothing more: the
// exit only makes run judge the guard again.
func (k *keeper) watchExit(ctx context.Context, pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			k.noteExit(pid) // gone between the check and the open
		}
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for ctx.Err() == nil {
		// The timeout only bounds how long a stop waits.
		n, err := unix.Poll(fds, 200)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			k.log.Warn("guard: watching the adopted guard's exit failed; the renewals still check it", "pid", pid, "err", err)
			return
		case n > 0:
			k.noteExit(pid)
			return
		}
	}
}

// noteExit tells run that guard pid exited; a full channel already has run
// judging the guard again.
func (k *keeper) noteExit(pid int) {
	select {
	case k.exited <- pid:
	default:
	}
}

// spawn starts a guard in its own session, so that it outlives flowstated
// however flowstated ends; it exits by itself once it is not needed.
func (k *keeper) spawn() error {
	argv := k.cfg.Command
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("server: spawning a guard: %w", err)
		}
		argv = []string{exe, "guard"}
	}
	logf, err := os.OpenFile(k.cfg.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("server: spawning a guard: %w", err)
	}
	defer logf.Close()
	args := append(argv[1:len(argv):len(argv)], "--lease", k.cfg.Lease, "--ovsdb", k.ovsdb,
		"--grace", k.cfg.Grace.String(), "--exit-when-idle")
	cmd := exec.Command(argv[0], args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The proxies' sockets, shared: the guard relays them while this
	// flowstated is away (descriptors 3, 4, ... in flag order).
	for _, r := range k.relays {
		f, err := guard.ListenerFile(r.Listener)
		if err != nil {
			closeFiles(cmd.ExtraFiles)
			return fmt.Errorf("server: spawning a guard: %w", err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		cmd.Args = append(cmd.Args, "--openflow-relay", r.Module+"="+r.Bridge)
	}
	if len(k.relays) > 0 {
		cmd.Args = append(cmd.Args, "--openflow-relay-inherit",
			"--openflow-proxy-dir", filepath.Dir(k.relays[0].Listen), "--ovs-rundir", filepath.Dir(k.relays[0].Upstream))
		cmd.Args = append(cmd.Args, k.writers.Args()...)
	}
	err = cmd.Start()
	closeFiles(cmd.ExtraFiles)
	if err != nil {
		return fmt.Errorf("server: spawning a guard: %w", err)
	}
	pid := cmd.Process.Pid
	k.child = pid
	k.log.Info("guard spawned", "pid", pid, "log", k.cfg.Log)
	// Reaps the guard and tells run at once; ends when the guard exits
	// (a guard outlives flowstated by design, and this goroutine with it
	// only until the process ends).
	go func() {
		_ = cmd.Wait()
		k.noteExit(pid)
	}()
	return nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
