package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
)

func newReady(g *globals) *cobra.Command {
	var module string
	cmd := &cobra.Command{
		Use:   "ready --module M",
		Short: "Mark a module ready for this boot without changing its entries",
		Example: `  # release a cold-start gate held for a module that will not sync:
  flowctl ready --module pipeline`,
		Args: cobra.NoArgs,
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
		Example: `  flowctl diff
  flowctl --bridge br-ex diff || echo "br-ex drifted (exit 2) or flowctl failed (exit 1)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				changes, err := c.Diff(ctx, g.bridge)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				for _, ch := range changes {
					switch ch.Op {
					case client.ChangeAdd:
						fmt.Fprintf(w, "+ %s\n", ch.Desired)
					case client.ChangeDelete:
						fmt.Fprintf(w, "- %s\n", ch.Actual)
					default:
						fmt.Fprintf(w, "- %s\n+ %s\n", ch.Actual, ch.Desired)
					}
				}
				if len(changes) > 0 {
					return exitCode{exitUsage, fmt.Sprintf("%d differences", len(changes))}
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
		Example: `  flowctl reconcile
  flowctl reconcile --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				br := g.bridge
				if all {
					br = ""
				}
				bridges, err := c.Reconcile(ctx, br)
				if err != nil {
					return err
				}
				for _, b := range bridges {
					r := b.LastReplay
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d messages, %d bytes, %v\n", b.Name, r.Messages, r.Bytes, r.Duration)
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
		Short: "Print flowstated's events as they happen (until interrupted; Ctrl-C exits 0)",
		Example: `  flowctl watch
  flowctl watch --heartbeats | grep -v heartbeat`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(g)
			if err != nil {
				return err
			}
			defer c.Close()
			w := cmd.OutOrStdout()
			err = c.Watch(cmd.Context(), client.Cursor{}, func(ev client.Event) error {
				if ev.Type == client.EventHeartbeat && !heartbeats {
					return nil
				}
				var b strings.Builder
				fmt.Fprintf(&b, "%s #%d %s", ev.Time.Local().Format(time.RFC3339Nano), ev.Revision, ev.TypeName)
				if ev.Bridge != "" {
					fmt.Fprintf(&b, " bridge=%s", ev.Bridge)
				}
				if ev.Module != "" {
					fmt.Fprintf(&b, " module=%s", ev.Module)
				}
				if ev.Message != "" {
					fmt.Fprintf(&b, " %q", ev.Message)
				}
				keys := make([]string, 0, len(ev.Attrs))
				for k := range ev.Attrs {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(&b, " %s=%q", k, ev.Attrs[k])
				}
				_, err := fmt.Fprintln(w, b.String())
				return err
			})
			if cmd.Context().Err() != nil {
				return nil // interrupted: the way a watch ends
			}
			return g.explain(cmd.Context(), err)
		},
	}
	cmd.Flags().BoolVar(&heartbeats, "heartbeats", false, "also print heartbeat events")
	return cmd
}
