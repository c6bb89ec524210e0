package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// The commands of a planned restart of ovs-vswitchd (deploy/ovs-restart):
//
//  1. prestart arms flow-restore-wait through flowstated, which refuses
//     unless it can restore and release the switch afterwards; refused or
//     unanswered, prestart clears the flag in OVSDB instead, so vswitchd
//     never waits for a restore nobody will do.
//  2. The restart itself (systemctl restart ovs-vswitchd), which the script
//     lets finish when interrupted: a stop-then-start command stopped
//     half-way would leave vswitchd down.
//  3. wait --converged --released --since T: flowstated has restored every
//     bridge into the new vswitchd and released it.
//  4. On a failure, timeout or interrupt: release clears the flag and waits
//     until vswitchd has read it, through flowstated or, when flowstated
//     does not answer, in OVSDB directly; a vswitchd that is not running
//     is not waited for. vswitchd-state then says what is true, for the
//     banner: whether vswitchd runs, and the flag.

// defaultOVSDB is ovsdb-server's socket on a host with OVS from packages.
const defaultOVSDB = "unix:/var/run/openvswitch/db.sock"

const clearCommand = "ovs-vsctl --no-wait remove Open_vSwitch . other_config flow-restore-wait"

// loud writes lines nobody should miss between two rules.
func loud(w io.Writer, lines ...string) {
	const rule = "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
	fmt.Fprintln(w, "flowctl:", rule)
	for _, l := range lines {
		fmt.Fprintln(w, "flowctl:", l)
	}
	fmt.Fprintln(w, "flowctl:", rule)
}

// ownTimeout gives cmd a --timeout of its own with default def, shown as
// such in its --help: prestart, release and vswitchd-state must not keep a
// unit start or a failed restart waiting for the global minute.
func ownTimeout(cmd *cobra.Command, def time.Duration) {
	d := def
	cmd.Flags().Var(&timeoutValue{&d}, "timeout", "timeout of this command: a duration (10s, 1m) or seconds")
}

// commandTimeout is the --timeout of a command given ownTimeout.
func commandTimeout(cmd *cobra.Command) time.Duration {
	return *cmd.Flags().Lookup("timeout").Value.(*timeoutValue).d
}

// clearInOVSDB clears flow-restore-wait in ovsdb-server at addr without
// flowstated. With wait it returns once vswitchd has read the change, and
// how long that took.
func clearInOVSDB(ctx context.Context, addr string, wait bool) (wasSet bool, ack time.Duration, err error) {
	c, err := ovsconfig.Dial(ctx, addr, ovsconfig.Options{InactivityTimeout: 2 * time.Second, ReconnectTimeout: 3 * time.Second, RequestTimeout: 5 * time.Second})
	if err != nil {
		return false, 0, err
	}
	defer c.Close()
	if wasSet, err = c.FlowRestoreWait(); err != nil {
		return false, 0, err
	}
	start := time.Now()
	err = c.SetFlowRestoreWait(ctx, false, wait)
	return wasSet, time.Since(start), err
}

func newPrestart(g *globals) *cobra.Command {
	var ovsdbAddr string
	var strict bool
	cmd := &cobra.Command{
		Use:   "prestart [--ovsdb ADDR] [--strict]",
		Short: "Before ovs-vswitchd starts: arm flow-restore-wait if flowstated can restore, else clear it",
		Long: `Before ovs-vswitchd starts: arm flow-restore-wait if flowstated can restore, else clear it.

For ExecStartPre= of ovs-vswitchd.service and for container start scripts.
flowstated arms the flag only if it can restore and release the switch
afterwards (its engine is responsive, OVSDB is connected, a proven guard
runs). A flowstated that is starting gets time: prestart asks again until
--timeout (10 s) while flowstated waits for its guard, and for 3 s while it
does not answer. If flowstated refuses or does not answer, prestart clears the flag in
ovsdb-server directly (--ovsdb), so ovs-vswitchd starts as plain Open vSwitch
would instead of waiting for a restore nobody will do, and says so loudly.

It never fails a unit start: the exit status is 0 whatever happened, unless
--strict, where it is 1 when the flag could not be armed.`,
		Example: `  # systemd drop-in for ovs-vswitchd.service:
  ExecStartPre=-/usr/local/bin/flowctl prestart

  # a script that restarts vswitchd only if the restart will be gated:
  flowctl prestart --strict && systemctl restart ovs-vswitchd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := commandTimeout(cmd)
			var wasSet bool
			err := armWhenReady(cmd, g, d, &wasSet)
			if err == nil {
				msg := "flow-restore-wait armed"
				if wasSet {
					msg = "flow-restore-wait was armed already"
				}
				fmt.Fprintln(cmd.OutOrStdout(), msg+": ovs-vswitchd holds forwarding at its next start until flowstated has restored every bridge")
				return nil
			}
			if cmd.Context().Err() != nil {
				return err
			}
			why := oneKind(err)
			ctx, cancel := context.WithTimeout(cmd.Context(), min(d, 5*time.Second))
			defer cancel()
			lines := []string{"flow-restore-wait NOT ARMED: " + why}
			if _, _, cerr := clearInOVSDB(ctx, ovsdbAddr, false); cerr != nil {
				lines = append(lines, "clearing it in ovsdb-server at "+ovsdbAddr+" FAILED too: "+oneKind(cerr),
					"if it is set, ovs-vswitchd will hold forwarding until someone clears it: "+clearCommand)
			} else {
				lines = append(lines, "cleared it in ovsdb-server at "+ovsdbAddr+": the next start of ovs-vswitchd is ungated, as with plain",
					"Open vSwitch: it forwards with whatever flows it has until flowstated restores them")
			}
			loud(cmd.ErrOrStderr(), lines...)
			if strict {
				return exitCode{exitFailure, ""}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&ovsdbAddr, "ovsdb", defaultOVSDB, "ovsdb-server address, to clear the flag when flowstated does not")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 1 when the flag could not be armed")
	ownTimeout(cmd, 10*time.Second)
	return cmd
}

// armWhenReady asks flowstated to arm the flag within d. A flowstated that
// is starting refuses for a moment: its socket is not there or not accepting
// yet, or it answers but its guard is not proven yet. Ask again, each time
// on a new connection (a client's reconnect backoff would outlast the
// start), rather than refuse a restart that follows flowstated's start. Any
// other refusal (wedged, nothing to restore) is final at once.
func armWhenReady(cmd *cobra.Command, g *globals, d time.Duration, wasSet *bool) error {
	deadline := time.Now().Add(d)
	start := time.Now()
	for {
		attempt := min(time.Until(deadline), time.Second)
		retry := false
		err := g.runFor(cmd, attempt, func(ctx context.Context, c *client.Client) error {
			var err error
			*wasSet, err = c.Arm(ctx)
			switch {
			case err == nil:
			case errors.Is(err, errdefs.ErrFailedPrecondition):
				retry = guardComing(ctx, c)
			case errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
				retry = time.Since(start) < unservedWait
			}
			return err
		})
		if err == nil || !retry || time.Until(deadline) <= 0 || cmd.Context().Err() != nil {
			return err
		}
		select {
		case <-cmd.Context().Done():
			return err
		case <-time.After(min(100*time.Millisecond, time.Until(deadline))):
		}
	}
}

// unservedWait bounds how long prestart waits for a flowstated that does not
// answer at all: one that starts serves within a second, and a host without
// a running flowstated must not have every vswitchd start delayed.
const unservedWait = 3 * time.Second

// guardComing reports whether flowstated refused only because its guard is
// not proven (yet), with an engine that is not wedged.
func guardComing(ctx context.Context, c *client.Client) bool {
	st, err := c.Status(ctx)
	return err == nil && st.Wedged == "" && st.Guard.Mode != "off" && !st.Guard.Proven
}

func newRelease(g *globals) *cobra.Command {
	var ovsdbAddr, rundir string
	cmd := &cobra.Command{
		Use:   "release [--ovsdb ADDR] [--ovs-rundir DIR]",
		Short: "Clear flow-restore-wait now and wait until ovs-vswitchd has read it",
		Long: `Clear flow-restore-wait now and wait until ovs-vswitchd has read it.

A vswitchd holding forwarding for its restore then forwards with whatever
flows it has. flowctl asks flowstated first; when flowstated does not answer
or cannot, it clears the flag in ovsdb-server directly (--ovsdb) and says so.
Exit status 0 once vswitchd has read the change (cur_cfg caught up), 1 if
the flag could not be cleared or vswitchd did not read it within --timeout
(30s for release). Given --ovs-rundir (or $OVS_RUNDIR), when ovs-vswitchd
is not running (its pidfile there is gone, or names a pid that is gone),
nobody would read the change: the flag is cleared in ovsdb-server at once,
without waiting, so its next start is not held, and the exit status is 0.`,
		Example: `  flowctl release
  flowctl release --ovsdb unix:/var/run/openvswitch/db.sock --timeout 10s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := commandTimeout(cmd)
			deadline := time.Now().Add(d)
			w := cmd.OutOrStdout()
			// Only with a run directory named: the default one may not be
			// this vswitchd's (OVS in a container), and a vswitchd wrongly
			// taken for down would not be waited for.
			named := cmd.Flags().Changed("ovs-rundir") || os.Getenv("OVS_RUNDIR") != ""
			if live, detail := probeIf(cmd.Context(), named, rundir); live == vswitchdDown {
				ctx, cancel := context.WithDeadline(cmd.Context(), deadline)
				defer cancel()
				wasSet, _, err := clearInOVSDB(ctx, ovsdbAddr, false)
				if err != nil {
					return fmt.Errorf("ovs-vswitchd is not running (%s), and flow-restore-wait cannot be cleared in ovsdb-server at %s: %w; clear it by hand: %s",
						detail, ovsdbAddr, err, clearCommand)
				}
				fmt.Fprintf(w, "ovs-vswitchd is not running (%s): flow-restore-wait cleared in ovsdb-server%s; its next start is not held\n", detail, notSet(wasSet))
				return nil
			}
			// Half the time for flowstated, the rest for OVSDB directly; a
			// quick Status first, so a frozen flowstated costs seconds.
			var wasSet bool
			var ack time.Duration
			err := g.runFor(cmd, d/2, func(ctx context.Context, c *client.Client) error {
				pctx, cancel := context.WithTimeout(ctx, min(3*time.Second, d/2))
				defer cancel()
				if _, err := c.Status(pctx); err != nil {
					return err
				}
				var err error
				wasSet, ack, err = c.Release(ctx)
				return err
			})
			if err == nil {
				fmt.Fprintf(w, "flow-restore-wait cleared by flowstated%s; ovs-vswitchd read it after %v\n", notSet(wasSet), ack.Round(time.Millisecond))
				return nil
			}
			if cmd.Context().Err() != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "flowctl: flowstated did not release the node (%s); clearing flow-restore-wait in ovsdb-server at %s directly\n",
				oneKind(err), ovsdbAddr)
			ctx, cancel := context.WithDeadline(cmd.Context(), deadline)
			defer cancel()
			wasSet, ack, err = clearInOVSDB(ctx, ovsdbAddr, true)
			switch {
			case errors.Is(err, ovsconfig.ErrNotAcknowledged):
				return fmt.Errorf("flow-restore-wait cleared in ovsdb-server, but ovs-vswitchd did not read it within %v "+
					"(is it running? a starting vswitchd reads it at once): %w", d, err)
			case err != nil:
				return fmt.Errorf("cannot clear flow-restore-wait in ovsdb-server at %s: %w; clear it by hand: %s", ovsdbAddr, err, clearCommand)
			}
			fmt.Fprintf(w, "flow-restore-wait cleared in ovsdb-server directly%s; ovs-vswitchd read it after %v\n", notSet(wasSet), ack.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&ovsdbAddr, "ovsdb", defaultOVSDB, "ovsdb-server address, used when flowstated does not answer")
	cmd.Flags().StringVar(&rundir, "ovs-rundir", defaultRundir(), "ovs-vswitchd's run directory (pidfile, control socket); given, a vswitchd that is not running is not waited for")
	ownTimeout(cmd, 30*time.Second)
	return cmd
}

func notSet(wasSet bool) string {
	if wasSet {
		return ""
	}
	return " (it was not set)"
}

// parseSince reads --since: RFC 3339, a duration ago ("90s") or "now".
func parseSince(s string, now time.Time) (time.Time, error) {
	switch s {
	case "":
		return time.Time{}, nil
	case "now":
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time, a duration ago (90s, 5m) or now", s)
}

// conditions is what wait waits for.
type conditions struct {
	converged, released bool
	since               time.Time
}

func (c conditions) String() string {
	switch {
	case c.converged && c.released:
		return "converged and released"
	case c.released:
		return "released"
	}
	return "converged"
}

// missing says what keeps st from meeting c; empty when it does. held is
// whether the flag holds the running vswitchd (Status.vswitchd_held).
func (c conditions) missing(st *client.Status, held bool) []string {
	var out []string
	if c.converged {
		out = append(out, notConverged(st)...)
	}
	if c.released {
		if why := c.notReleased(st, held); why != "" {
			out = append(out, why)
		}
	}
	return out
}

// holds reports whether the flag holds the running vswitchd, asked only when
// notReleased needs it (--released without --since, the flag set): the
// client's Status does not carry it yet. Unanswered, it counts as held.
func (c conditions) holds(ctx context.Context, cl *client.Client, st *client.Status) bool {
	if !c.released || !c.since.IsZero() || !st.FlowRestoreWait {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	raw, err := flowstatev1.NewFlowStateServiceClient(cl.Conn()).Status(pctx, &flowstatev1.StatusRequest{})
	return err != nil || raw.GetVswitchdHeld()
}

// gatePending begins client.Status.Pending's line for a closed gate.
const gatePending = "gate closed, waiting for modules "

// notConverged: the gate is open and every bridge is converged or excused
// (missing from OVSDB, or given up on after --max-hold; warned about apart).
func notConverged(st *client.Status) []string {
	var out []string
	for _, p := range st.Pending() {
		// Pending counts the gate's timeout down, which is no change
		// worth a line every poll: name the deadline instead.
		if g := st.Gate; !g.Open && strings.HasPrefix(p, gatePending) {
			p = gatePending + strings.Join(g.WaitingFor, ", ")
			if !g.Deadline.IsZero() {
				p += " (readiness timeout at " + g.Deadline.Local().Format(time.RFC3339) + ")"
			}
		}
		out = append(out, p)
	}
	if st.Wedged != "" && len(out) > 0 {
		out = append(out, "engine wedged: "+st.Wedged)
	}
	return out
}

// notReleased: vswitchd is not held by the flag. Either the flag is not set
// and vswitchd has read that, or flowstated released it (last_release) at or
// after since. Without since, the store's last release (perhaps a previous
// flowstated's, long ago) counts only if the flag does not hold the running
// vswitchd now.
func (c conditions) notReleased(st *client.Status, held bool) string {
	last := st.LastRelease
	if !last.IsZero() && !last.Before(c.since) && (!c.since.IsZero() || !held) {
		return ""
	}
	if !st.OVSDBConnected {
		return "flowstated is not connected to ovsdb-server, so it cannot release ovs-vswitchd"
	}
	if !st.FlowRestoreWait {
		if st.VswitchdAcknowledged {
			return ""
		}
		return "flow-restore-wait is cleared, but ovs-vswitchd has not read it yet (is it running?)"
	}
	msg := "flow-restore-wait is set"
	switch {
	case last.IsZero():
		msg += ", and flowstated (with this store) has never released ovs-vswitchd"
	case !c.since.IsZero():
		msg += ", and flowstated last released ovs-vswitchd at " + last.Local().Format(time.RFC3339Nano) + ", before --since"
	default:
		msg += " and holds the running ovs-vswitchd (flowstated last released one at " + last.Local().Format(time.RFC3339) + ")"
	}
	return msg
}

func newWait(g *globals) *cobra.Command {
	var cond conditions
	var since string
	cmd := &cobra.Command{
		Use:   "wait [--converged] [--released [--since T]]",
		Short: "Wait until every bridge is restored and/or ovs-vswitchd is released (bounded by --timeout)",
		Long: `Wait until every bridge is restored and/or ovs-vswitchd is released (bounded by --timeout).

--converged (the default): the boot gate is open and every bridge is
connected and holds exactly its desired state, or was excused (missing from
OVSDB, or not restorable within flowstated's --max-hold; printed as a warning).
--released: ovs-vswitchd is not held by flow-restore-wait: the flag is not set
and vswitchd has read that, or flowstated released it at or after --since.
Without --since, flowstated's last release (kept in its store across
restarts) counts unless the flag holds the running vswitchd now.

The answer comes from flowstated's Status. While waiting, each change of what
is missing is printed to stderr. Exit status 0 when met, 1 with what is still
missing when --timeout passes.`,
		Example: `  flowctl wait
  flowctl wait --converged --released --since 2m --timeout 90s
  flowctl wait --released --since 2026-12-01T03:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			var err error
			if cond.since, err = parseSince(since, start); err != nil {
				return usageError{err}
			}
			if cmd.Flags().Changed("since") && !cond.released {
				return usagef("--since needs --released")
			}
			if !cond.converged && !cond.released {
				cond.converged = true
			}
			c, err := newClient(g)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			return waitFor(ctx, cmd, g, c, cond, start)
		},
	}
	cmd.Flags().BoolVar(&cond.converged, "converged", false, "wait until every bridge is restored (default when neither is given)")
	cmd.Flags().BoolVar(&cond.released, "released", false, "wait until ovs-vswitchd is not held by flow-restore-wait")
	cmd.Flags().StringVar(&since, "since", "", "with --released: a release by flowstated counts only from this time (RFC 3339, a duration ago, or now)")
	return cmd
}

// ended reports whether ctx is done or its deadline has passed: a call
// bounded by it may return before ctx's own timer has fired.
func ended(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}

// waitFor polls Status until cond holds or ctx ends.
func waitFor(ctx context.Context, cmd *cobra.Command, g *globals, c *client.Client, cond conditions, start time.Time) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var why string
	for {
		// Each poll is bounded on its own: a frozen flowstated must not
		// swallow the whole wait in one call and leave no reason.
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := c.Status(pctx)
		cancel()
		now := why
		switch {
		case err == nil:
			missing := cond.missing(st, cond.holds(ctx, c, st))
			if len(missing) == 0 {
				for _, b := range st.Bridges {
					if b.Excused != "" && cond.converged {
						why := b.Excused
						if b.Reason != "" && !strings.Contains(why, b.Reason) {
							why += ": " + b.Reason
						}
						fmt.Fprintf(cmd.ErrOrStderr(), "flowctl: warning: %s NOT RESTORED, node released without it: %s\n", b.Name, why)
					}
				}
				fmt.Fprintln(cmd.OutOrStdout(), cond)
				return nil
			}
			now = strings.Join(missing, "; ")
		case cmd.Context().Err() != nil:
			return fmt.Errorf("interrupted while waiting to be %s: %s", cond, why)
		case why == "" || !ended(ctx):
			// The last call usually fails on the deadline itself: keep
			// the state seen before over that.
			now = oneKind(g.explain(cmd.Context(), err))
		}
		if now != why {
			fmt.Fprintf(cmd.ErrOrStderr(), "flowctl: %5.1fs waiting: %s\n", time.Since(start).Seconds(), now)
			why = now
		}
		select {
		case <-ctx.Done():
			if cmd.Context().Err() != nil {
				return fmt.Errorf("interrupted while waiting to be %s: %s", cond, why)
			}
			return fmt.Errorf("not %s after %v: %s", cond, g.timeout, why)
		case <-tick.C:
		}
	}
}

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
