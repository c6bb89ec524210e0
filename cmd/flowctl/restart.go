package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

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
