package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
)

func newReady(g *globals) *cobra.Command {
	var module string
	cmd := &cobra.Command{
		Use:   "ready --module M",
		Short: "Mark a module ready for this boot without changing its entries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.MarkReady(ctx, module); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "module %s ready\n", module)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

func newDiff(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "diff",
		Short: "Print how the switch differs from the desired state (changes nothing); exit status 2 if it differs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				changes, err := c.Diff(ctx, g.bridge)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				for _, ch := range changes {
					switch ch.GetOp() {
					case flowstatev1.Change_OP_ADD:
						fmt.Fprintf(w, "+ %s\n", ch.GetDesired())
					case flowstatev1.Change_OP_DELETE:
						fmt.Fprintf(w, "- %s\n", ch.GetActual())
					default:
						fmt.Fprintf(w, "- %s\n+ %s\n", ch.GetActual(), ch.GetDesired())
					}
				}
				if len(changes) > 0 {
					return exitCode{2, fmt.Sprintf("%d differences", len(changes))}
				}
				return nil
			})
		},
	}
}

func newReconcile(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "reconcile [--all]",
		Short: "Make the bridge (or every bridge) hold exactly its desired state now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				br := g.bridge
				if all {
					br = ""
				}
				resp, err := c.Reconcile(ctx, br)
				if err != nil {
					return err
				}
				for _, b := range resp.GetBridges() {
					r := b.GetLastReplay()
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d messages, %d bytes, %v\n", b.GetName(), r.GetMessages(), r.GetBytes(), r.GetDuration().AsDuration())
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every managed bridge")
	return cmd
}

func newWatch(g *globals) *cobra.Command {
	var heartbeats bool
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print flowstated's events as they happen (until interrupted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(g)
			if err != nil {
				return err
			}
			defer c.Close()
			w := cmd.OutOrStdout()
			return c.Watch(cmd.Context(), "", 0, func(ev *flowstatev1.Event) error {
				if ev.GetType() == "heartbeat" && !heartbeats {
					return nil
				}
				var b strings.Builder
				fmt.Fprintf(&b, "%s #%d %s", ev.GetTime().AsTime().Local().Format(time.RFC3339Nano), ev.GetRevision(), ev.GetType())
				if ev.GetBridge() != "" {
					fmt.Fprintf(&b, " bridge=%s", ev.GetBridge())
				}
				if ev.GetModule() != "" {
					fmt.Fprintf(&b, " module=%s", ev.GetModule())
				}
				if ev.GetMessage() != "" {
					fmt.Fprintf(&b, " %q", ev.GetMessage())
				}
				keys := make([]string, 0, len(ev.GetAttrs()))
				for k := range ev.GetAttrs() {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(&b, " %s=%q", k, ev.GetAttrs()[k])
				}
				_, err := fmt.Fprintln(w, b.String())
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&heartbeats, "heartbeats", false, "also print heartbeat events")
	return cmd
}

// exitCode is an error that sets the exit status.
type exitCode struct {
	code int
	msg  string
}

func (e exitCode) Error() string { return e.msg }

func newWait(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the boot gate is open and every bridge is connected and converged (bounded by --timeout)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				var why string
				for {
					st, err := c.Status(ctx)
					switch {
					case err == nil && len(pendingBridges(st)) == 0:
						fmt.Fprintln(cmd.OutOrStdout(), "converged")
						return nil
					case err == nil:
						why = strings.Join(pendingBridges(st), "; ")
					case why == "":
						// Keep the last state seen over a later error: the
						// last call usually fails on the deadline itself.
						why = err.Error()
					}
					select {
					case <-ctx.Done():
						return fmt.Errorf("not converged after %v: %s", g.timeout, why)
					case <-tick.C:
					}
				}
			})
		},
	}
	return cmd
}

// pendingBridges says what keeps flowstated from being converged.
func pendingBridges(st *flowstatev1.StatusResponse) []string {
	var out []string
	if g := st.GetGate(); !g.GetOpen() {
		out = append(out, "gate closed, waiting for modules "+strings.Join(g.GetWaitingFor(), ", "))
	}
	for _, b := range st.GetBridges() {
		switch {
		case !b.GetConnected():
			out = append(out, b.GetName()+" not connected")
		case !b.GetConverged():
			msg := b.GetName() + " not converged"
			if e := b.GetLastReplay().GetError(); e != "" {
				msg += ": " + e
			}
			out = append(out, msg)
		}
	}
	return out
}
