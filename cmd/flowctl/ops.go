package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

func newReady(g *globals) *cobra.Command {
	var module string
	cmd := &cobra.Command{
		Use:   "ready --module M",
		Short: "Mark a module ready for this boot without changing its entries (a module required or declaring entries)",
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

func newForgetModule(g *globals) *cobra.Command {
	var module string
	cmd := &cobra.Command{
		Use:   "forget-module --module M",
		Short: "Remove a module that declares nothing (a name marked ready by mistake) from flowstated's records",
		Long: `Remove the record of module M, which ready left behind: status lists it no
more. Only a module that declares no flows, groups or meters, and is not
required (--require-module), can be forgotten: delete its entries first.`,
		Example: `  flowctl forget-module --module pipline`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.ForgetModule(ctx, module); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "module %s forgotten\n", module)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
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
	var output string
	cmd := &cobra.Command{
		Use:   "watch [--heartbeats] [-o text|json]",
		Short: "Print flowstated's events as they happen, across its restarts (until interrupted or --timeout; Ctrl-C exits 0)",
		Long: `Print flowstated's events as they happen.

watch rides out restarts of flowstated: while it cannot reach flowstated it
says so once ("--- flowstated unreachable ..."), keeps trying, and when
flowstated is back it resumes after the last event printed. When that cannot
be done without a gap (flowstated restarted: its events start again, so those
in between are lost), it prints "--- resync: REASON" and goes on with the new
flowstated's events: read the state again (flowctl status) after a resync.

It runs until interrupted (Ctrl-C: exit status 0) or, when --timeout is
given, for that long (then exit status 0). It fails (exit status 1) only when
flowstated cannot be reached at its start.

-o json prints one object per line: streamId, revision, time (RFC 3339),
type (replay_finished, ...), bridge, module, message, attrs; a resync or an
outage is an object of type "resync" or "unreachable" with its message.`,
		Example: `  flowctl watch
  flowctl watch --heartbeats | grep -v heartbeat
  flowctl watch -o json --timeout 5m | jq -c 'select(.type == "replay_finished")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ctx := cmd.Context()
			if cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, g.timeout)
				defer cancel()
			}
			return watch(ctx, cmd, g, output == "json", heartbeats)
		},
	}
	cmd.Flags().BoolVar(&heartbeats, "heartbeats", false, "also print heartbeat events")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, or json (one object per line)")
	return cmd
}

// watchReconnect is how long one Watch call tries to reach flowstated
// before watch says it is unreachable (and goes on trying).
const watchReconnect = 5 * time.Second

// watch prints events until ctx ends. The first call must reach flowstated
// (within watchReconnect); later outages and restarts, however soon after
// the start, are announced with a marker line and ridden out.
func watch(ctx context.Context, cmd *cobra.Command, g *globals, asJSON, heartbeats bool) error {
	c, err := client.New(target(g.server), client.WithWatchReconnect(watchReconnect))
	if err != nil {
		return usagef("--server %q: %w", g.server, err)
	}
	defer c.Close()
	p := eventPrinter{w: cmd.OutOrStdout(), json: asJSON}
	var cur client.Cursor
	connected, down := false, false
	for {
		err := c.Watch(ctx, cur, func(ev client.Event) error {
			cur, connected = ev.Cursor(), true
			if down {
				down = false
				if err := p.marker("reconnected", "--- flowstated reachable again (stream "+ev.StreamID+")"); err != nil {
					return err
				}
			}
			if ev.Type == client.EventHeartbeat && !heartbeats {
				return nil
			}
			return p.event(ev)
		})
		switch {
		case ctx.Err() != nil || deadlineReached(ctx, err):
			return nil // interrupted, or --timeout: the way a watch ends
		case errors.Is(err, client.ErrResync):
			// flowstated restarted (or the connection broke before the
			// first event): start again from now, saying what was lost.
			// Either way flowstated was reached: later outages are ridden out.
			cur, down, connected = client.Cursor{}, false, true
			if err := p.marker("resync", "--- resync: "+resyncReason(err)+"; events in between are lost: read the state again (flowctl status)"); err != nil {
				return err
			}
		case errors.Is(err, errdefs.ErrUnavailable) && connected:
			if !down {
				down = true
				if err := p.marker("unreachable", "--- flowstated unreachable ("+oneKind(err)+"); still trying"); err != nil {
					return err
				}
			}
		default:
			return g.explain(ctx, err)
		}
		// Between Watch calls after a failure: not a busy loop.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// resyncReason is the why of a resync, without the sentinel's words.
func resyncReason(err error) string {
	s := strings.ReplaceAll(oneKind(err), client.ErrResync.Error()+": ", "")
	return strings.ReplaceAll(s, client.ErrResync.Error(), "position lost")
}

// eventPrinter prints events and markers as text lines or JSON lines.
type eventPrinter struct {
	w    io.Writer
	json bool
}

// jsonEvent is one line of watch -o json.
type jsonEvent struct {
	StreamID string            `json:"streamId,omitempty"`
	Revision uint64            `json:"revision,omitempty"`
	Time     string            `json:"time"`
	Type     string            `json:"type"`
	Bridge   string            `json:"bridge,omitempty"`
	Module   string            `json:"module,omitempty"`
	Message  string            `json:"message,omitempty"`
	Attrs    map[string]string `json:"attrs,omitempty"`
}

func (p eventPrinter) event(ev client.Event) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(jsonEvent{StreamID: ev.StreamID, Revision: ev.Revision, Time: ev.Time.UTC().Format(time.RFC3339Nano),
			Type: ev.TypeName, Bridge: ev.Bridge, Module: ev.Module, Message: ev.Message, Attrs: ev.Attrs})
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
	_, err := fmt.Fprintln(p.w, b.String())
	return err
}

// marker prints a line of watch's own (typ: resync, unreachable,
// reconnected).
func (p eventPrinter) marker(typ, msg string) error {
	now := time.Now()
	if p.json {
		return json.NewEncoder(p.w).Encode(jsonEvent{Time: now.UTC().Format(time.RFC3339Nano), Type: typ, Message: msg})
	}
	_, err := fmt.Fprintf(p.w, "%s %s\n", now.Local().Format(time.RFC3339Nano), msg)
	return err
}

// deadlineReached reports whether err is the server's DEADLINE_EXCEEDED for
// ctx's own deadline: the server's timer, set from the deadline the call
// carried (rounded down), may fire just before the client's, so the answer
// can arrive while ctx.Err() is still nil. It waits for ctx to end then.
func deadlineReached(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	if !ok || !errors.Is(err, context.DeadlineExceeded) || time.Until(dl) > time.Second {
		return false
	}
	<-ctx.Done()
	return true
}
