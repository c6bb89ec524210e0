// flowctl wait, step 3 of a planned restart (restart.go): until flowstated
// has restored every bridge into the new vswitchd and released it.

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
)

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
