// Whether ovs-vswitchd runs, and the flag in OVSDB: what release and
// vswitchd-state (step 4 of a planned restart, restart.go) see of the switch.

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// defaultRundir is ovs-vswitchd's run directory: $OVS_RUNDIR, as OVS reads
// it, else where OVS from packages puts its pidfile and sockets.
func defaultRundir() string {
	if d := os.Getenv("OVS_RUNDIR"); d != "" {
		return d
	}
	return "/var/run/openvswitch"
}

// liveness is what vswitchd's run directory says about it.
type liveness int

const (
	livenessUnknown liveness = iota
	vswitchdRunning
	vswitchdDown
)

// probeVswitchd reads ovs-vswitchd's pidfile in rundir and dials its
// control socket (ovs-vswitchd.<pid>.ctl, or ovs-vswitchd.ctl when started
// with --unixctl so): a socket that accepts proves a live vswitchd even
// from another pid namespace. Without one, the pid itself decides. vswitchd
// removes its pidfile when it exits; a killed one leaves it, naming a pid
// that is gone. The detail says what was seen.
func probeVswitchd(ctx context.Context, rundir string) (liveness, string) {
	if fi, err := os.Stat(rundir); err != nil || !fi.IsDir() {
		return livenessUnknown, fmt.Sprintf("cannot tell: no run directory %s (--ovs-rundir)", rundir)
	}
	pidfile := filepath.Join(rundir, "ovs-vswitchd.pid")
	b, err := os.ReadFile(pidfile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return vswitchdDown, "no pidfile " + pidfile
	case err != nil:
		return livenessUnknown, "cannot tell: " + err.Error()
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return livenessUnknown, fmt.Sprintf("cannot tell: pidfile %s holds %q", pidfile, strings.TrimSpace(string(b)))
	}
	var d net.Dialer
	for _, name := range []string{fmt.Sprintf("ovs-vswitchd.%d.ctl", pid), "ovs-vswitchd.ctl"} {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, "unix", filepath.Join(rundir, name))
		cancel()
		if err == nil {
			_ = c.Close()
			return vswitchdRunning, fmt.Sprintf("pid %d; its control socket %s answers", pid, name)
		}
	}
	switch err := syscall.Kill(pid, 0); {
	case errors.Is(err, syscall.ESRCH):
		return vswitchdDown, fmt.Sprintf("pidfile %s names pid %d, which is gone, and no control socket answers", pidfile, pid)
	case err != nil && !errors.Is(err, syscall.EPERM):
		return livenessUnknown, fmt.Sprintf("cannot tell: pid %d of %s: %v", pid, pidfile, err)
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) != "ovs-vswitchd" {
		return vswitchdDown, fmt.Sprintf("pidfile %s names pid %d, which is now %s", pidfile, pid, strings.TrimSpace(string(comm)))
	}
	return vswitchdRunning, fmt.Sprintf("pid %d is alive; its control socket does not answer (yet)", pid)
}

// probeIf is probeVswitchd when do, else unknown.
func probeIf(ctx context.Context, do bool, rundir string) (liveness, string) {
	if !do {
		return livenessUnknown, ""
	}
	return probeVswitchd(ctx, rundir)
}

// flagState reads flow-restore-wait, next_cfg and cur_cfg from ovsdb-server.
func flagState(ctx context.Context, addr string) (set bool, next, cur int, err error) {
	c, err := ovsconfig.Dial(ctx, addr, ovsconfig.Options{InactivityTimeout: 2 * time.Second, ReconnectTimeout: 3 * time.Second, RequestTimeout: 5 * time.Second})
	if err != nil {
		return false, 0, 0, err
	}
	defer c.Close()
	if set, err = c.FlowRestoreWait(); err != nil {
		return false, 0, 0, err
	}
	next, cur, err = c.Config()
	return set, next, cur, err
}

// Exit statuses of vswitchd-state besides 0 (running, flag cleared and read).
const (
	stateHeld    = 1 // running, but the flag is set or not read yet, or unreadable
	stateDown    = 3 // not running
	stateUnknown = 4 // cannot tell whether it runs
)

func newVswitchdState(g *globals) *cobra.Command {
	var ovsdbAddr, rundir string
	cmd := &cobra.Command{
		Use:   "vswitchd-state [--ovsdb ADDR] [--ovs-rundir DIR]",
		Short: "Say whether ovs-vswitchd runs and whether flow-restore-wait is cleared, without flowstated",
		Long: `Say whether ovs-vswitchd runs and whether flow-restore-wait is cleared, without flowstated.

ovs-vswitchd runs when its pidfile in --ovs-rundir (default $OVS_RUNDIR, else
/var/run/openvswitch) names it and its control socket answers, or, without an
answering socket, its pid is alive. The flag, next_cfg and cur_cfg are read
from ovsdb-server (--ovsdb). ovs-restart builds its banner from this.

Prints two lines. Exit status: 0 running, the flag cleared and read by
vswitchd (it forwards, not held); 1 running, but the flag is set (a vswitchd
started with it waits for a restore), not read yet, or unreadable; 3 not
running; 4 cannot tell whether it runs.`,
		Example: `  flowctl vswitchd-state
  flowctl vswitchd-state --ovs-rundir /run/openvswitch --ovsdb unix:/run/openvswitch/db.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout(cmd))
			defer cancel()
			w := cmd.OutOrStdout()
			live, detail := probeVswitchd(ctx, rundir)
			code := 0
			switch live {
			case vswitchdRunning:
				fmt.Fprintf(w, "ovs-vswitchd is running (%s)\n", detail)
			case vswitchdDown:
				fmt.Fprintf(w, "ovs-vswitchd is NOT RUNNING (%s): no new traffic is switched\n", detail)
				code = stateDown
			default:
				fmt.Fprintf(w, "ovs-vswitchd: %s\n", detail)
				code = stateUnknown
			}
			set, next, cur, err := flagState(ctx, ovsdbAddr)
			switch {
			case err != nil:
				fmt.Fprintf(w, "flow-restore-wait: cannot read ovsdb-server at %s: %s\n", ovsdbAddr, oneKind(err))
			case set && live == vswitchdDown:
				fmt.Fprintln(w, "flow-restore-wait is set: the next start of ovs-vswitchd holds forwarding until flowstated restores it or someone clears the flag")
			case set:
				fmt.Fprintln(w, "flow-restore-wait is set: a vswitchd started with it holds forwarding until it is cleared (flowstated sets it again after each release, for the next start)")
			case live == vswitchdDown:
				fmt.Fprintln(w, "flow-restore-wait is cleared: the next start of ovs-vswitchd is not held")
			case cur < next:
				fmt.Fprintf(w, "flow-restore-wait is cleared, but ovs-vswitchd has not read it yet (cur_cfg %d, next_cfg %d)\n", cur, next)
			default:
				fmt.Fprintf(w, "flow-restore-wait is cleared, and ovs-vswitchd has read it (cur_cfg %d): it is not held\n", cur)
			}
			if code == 0 && (err != nil || set || cur < next) {
				code = stateHeld
			}
			if code != 0 {
				return exitCode{code, ""}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&ovsdbAddr, "ovsdb", defaultOVSDB, "ovsdb-server address")
	cmd.Flags().StringVar(&rundir, "ovs-rundir", defaultRundir(), "ovs-vswitchd's run directory (pidfile, control socket)")
	ownTimeout(cmd, 5*time.Second)
	return cmd
}
