package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runningVswitchd returns vswitchd's proc if it has not exited.
func (s *Sandbox) runningVswitchd() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vswitchd == nil || s.vswitchd.exited() {
		return nil
	}
	return s.vswitchd
}

// VswitchdPID is the pid of the running vswitchd, or 0.
func (s *Sandbox) VswitchdPID() int {
	if p := s.runningVswitchd(); p != nil {
		return p.pid()
	}
	return 0
}

// StartVswitchd starts vswitchd and waits until its control socket and the
// management socket of every bridge in the database accept connections.
func (s *Sandbox) StartVswitchd(ctx context.Context) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.startVswitchd(ctx)
}

// startVswitchd needs lifeMu.
//
//  1. Refuse if closed or already running.
//  2. Remove what a killed vswitchd left behind (pidfile, sockets).
//  3. Read the bridges from the database (--no-wait: nobody to wait for).
//  4. Start vswitchd with the dummy datapath and OVS_RUNDIR = the sandbox.
//  5. Wait for its control socket, then for each bridge's .mgmt socket:
//     vswitchd creates the management listener after it has added the
//     bridge's ports, so a socket that accepts means the bridge is complete.
func (s *Sandbox) startVswitchd(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.vswitchd != nil && !s.vswitchd.exited() {
		pid := s.vswitchd.pid()
		s.mu.Unlock()
		return fmt.Errorf("sandbox: ovs-vswitchd already running (pid %d)", pid)
	}
	s.vswitchd, s.frozen = nil, false
	s.mu.Unlock()

	if err := s.removeStale(); err != nil {
		return err
	}
	out, err := s.Vsctl(ctx, "--no-wait", "list-br")
	if err != nil {
		return err
	}
	bridges := strings.Fields(out)

	p, err := startProc(s.log, vswitchdName, s.bin.vswitchd, []string{
		s.DBAddr(),
		// override: every datapath type, "system" included, becomes a
		// userspace dummy; --disable-system keeps vswitchd away from the
		// kernel datapath (netlink) altogether, so no privileges are needed.
		"--enable-dummy=override",
		"--disable-system",
		"--no-chdir",
		"--pidfile=" + s.path(vswitchdPidfile),
		"--log-file=" + s.path(vswitchdLog),
		"--unixctl=" + s.path(vswitchdCtl),
		"-vconsole:off",
	}, s.env, s.path(vswitchdOut))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.vswitchd = p
	s.mu.Unlock()

	fail := func(err error) error {
		_ = p.terminate(stopGrace)
		s.mu.Lock()
		s.vswitchd = nil
		s.mu.Unlock()
		return fmt.Errorf("sandbox: ovs-vswitchd not ready: %w\n%s", err, s.tails(vswitchdName))
	}
	if err := waitSocket(ctx, s.path(vswitchdCtl), p); err != nil {
		return fail(err)
	}
	for _, br := range bridges {
		if err := waitSocket(ctx, s.MgmtPath(br), p); err != nil {
			return fail(err)
		}
	}
	s.log.Info("ovs-vswitchd started", "pid", p.pid(), "bridges", bridges)
	return nil
}

// StopVswitchd stops vswitchd the way ovs-ctl does: `ovs-appctl exit`, then
// SIGTERM if that fails, and waits for it to exit. A frozen vswitchd is
// thawed first. If ctx ends first, vswitchd is killed and the error says so.
func (s *Sandbox) StopVswitchd(ctx context.Context) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.stopVswitchd(ctx)
}

func (s *Sandbox) stopVswitchd(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	p, frozen := s.vswitchd, s.frozen
	s.mu.Unlock()
	if p == nil || p.exited() {
		return s.forgetVswitchd()
	}
	if frozen {
		if err := p.signal(sigCont); err != nil {
			return err
		}
	}

	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := s.Appctl(actx, "exit")
	cancel()
	if err != nil {
		s.log.Warn("ovs-appctl exit failed; sending SIGTERM", "error", err)
		if err := p.signal(sigTerm); err != nil {
			return err
		}
	}
	if err := p.waitExit(ctx); err != nil {
		_ = p.kill(stopGrace)
		_ = s.forgetVswitchd()
		return fmt.Errorf("%w; killed it", err)
	}
	s.log.Info("ovs-vswitchd stopped", "pid", p.pid())
	return s.forgetVswitchd()
}

// forgetVswitchd clears the exited vswitchd and removes anything it left.
func (s *Sandbox) forgetVswitchd() error {
	s.mu.Lock()
	s.vswitchd, s.frozen = nil, false
	s.mu.Unlock()
	return s.removeStale()
}

// RestartVswitchd stops vswitchd, sets (or clears) flow-restore-wait with
// --no-wait while it is down, and starts it again, like an upgrade or
// `systemctl restart` driven by ovs-ctl.
func (s *Sandbox) RestartVswitchd(ctx context.Context, flowRestoreWait bool) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if err := s.stopVswitchd(ctx); err != nil {
		return err
	}
	if err := s.SetFlowRestoreWait(ctx, flowRestoreWait); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.startVswitchd(ctx)
}

// KillVswitchd sends SIGKILL, a crash, and waits for the exit. Like a real
// crash it leaves the pidfile and sockets behind (a dial of <bridge>.mgmt
// is refused); StartVswitchd removes them.
func (s *Sandbox) KillVswitchd(ctx context.Context) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	p := s.vswitchd
	s.mu.Unlock()
	if p == nil || p.exited() {
		return errors.New("sandbox: ovs-vswitchd is not running")
	}
	if err := p.signal(os.Kill); err != nil {
		return err
	}
	if err := p.waitExit(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.vswitchd, s.frozen = nil, false
	s.mu.Unlock()
	s.log.Info("ovs-vswitchd killed", "pid", p.pid())
	return nil
}

// FreezeVswitchd stops vswitchd with SIGSTOP: its sockets still accept
// connections but nothing answers, like a hung switch.
func (s *Sandbox) FreezeVswitchd() error { return s.setFrozen(true) }

// ThawVswitchd resumes a frozen vswitchd with SIGCONT.
func (s *Sandbox) ThawVswitchd() error { return s.setFrozen(false) }

func (s *Sandbox) setFrozen(frozen bool) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	p := s.vswitchd
	if p == nil || p.exited() {
		return errors.New("sandbox: ovs-vswitchd is not running")
	}
	sig := sigCont
	if frozen {
		sig = sigStop
	}
	if err := p.signal(sig); err != nil {
		return err
	}
	s.frozen = frozen
	return nil
}

// removeStale deletes vswitchd's pidfile and sockets. Called only while no
// vswitchd runs. ovsdb-server's files have other names and stay.
func (s *Sandbox) removeStale() error {
	paths := []string{s.path(vswitchdPidfile), s.path(vswitchdCtl)}
	for _, pattern := range []string{"*.mgmt", "*.snoop"} {
		m, err := filepath.Glob(filepath.Join(s.dir, pattern))
		if err != nil {
			return fmt.Errorf("sandbox: remove stale files: %w", err)
		}
		paths = append(paths, m...)
	}
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sandbox: remove stale %s: %w", filepath.Base(p), err))
		}
	}
	return errors.Join(errs...)
}
