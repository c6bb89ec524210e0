package main

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// managed fails unless flowstated manages bridge (managedIn).
func managed(ctx context.Context, c *client.Client, bridge string) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	return managedIn(st, bridge)
}

func appliedText(n int, noun string, applied bool) string {
	if applied {
		return fmt.Sprintf("%d %s applied", n, noun)
	}
	return fmt.Sprintf("%d %s stored; the bridge is not forwarding through flowstate yet, the next replay applies them", n, noun)
}

// newAdd is add-flows, add-groups and add-meters.
func newAdd(g *globals, kind entry.Kind) *cobra.Command {
	var module string
	noun := kind.String() + "s"
	cmd := &cobra.Command{
		Use:   "add-" + noun + " --module M FILE|-",
		Short: "Add or replace " + noun + " of a module, one per line in ovs-ofctl syntax (all or nothing)",
		Example: map[entry.Kind]string{
			entry.KindFlow:  "  flowctl add-flows --module pipeline pipeline.flows\n  echo 'table=0,priority=100,ip,actions=ct(table=1)' | flowctl add-flows --module pipeline -",
			entry.KindGroup: "  echo 'group_id=5,type=select,bucket=weight:10,actions=output:1' | flowctl add-groups --module lb -",
			entry.KindMeter: "  echo 'meter=1,kbps,band=type=drop,rate=1000' | flowctl add-meters --module qos -",
		}[kind],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return addFrom(cmd, g, kind, module, args[0])
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns them (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

// newAddOne is add-flow, add-group and add-meter: one entry inline, as
// ovs-ofctl's add-flow takes it, or "-" for the lines of standard input.
func newAddOne(g *globals, kind entry.Kind) *cobra.Command {
	var module string
	noun := kind.String()
	cmd := &cobra.Command{
		Use:   "add-" + noun + " --module M " + strings.ToUpper(noun) + "|-",
		Short: "Add or replace one " + noun + " of a module, given inline in ovs-ofctl syntax (-: the lines of standard input)",
		Example: map[entry.Kind]string{
			entry.KindFlow:  "  flowctl add-flow --module pipeline 'table=0,priority=100,ip,actions=ct(table=1)'\n  flowctl add-flow --module pipeline - < pipeline.flows",
			entry.KindGroup: "  flowctl add-group --module lb 'group_id=5,type=select,bucket=weight:10,actions=output:1'",
			entry.KindMeter: "  flowctl add-meter --module qos 'meter=1,kbps,band=type=drop,rate=1000'",
		}[kind],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "-" {
				return addFrom(cmd, g, kind, module, "-")
			}
			text := strings.TrimSpace(args[0])
			if kind == entry.KindFlow {
				if err := checkFlow(text); err != nil {
					return usagef("%s %q: %w", noun, text, err)
				}
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				applied, err := c.Put(ctx, client.Module{Bridge: g.bridge, Name: module}, client.Entry{Kind: kind, Text: text})
				if err != nil {
					var ee *errdefs.EntryError
					if errors.As(err, &ee) {
						return fmt.Errorf("%s %q: %w", noun, text, ee.Err)
					}
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), appliedText(1, noun, applied))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns it (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

// addFrom adds the entries of FILE or "-" (name) to module.
func addFrom(cmd *cobra.Command, g *globals, kind entry.Kind, module, name string) error {
	noun := kind.String() + "s"
	if kind == entry.KindFlow {
		return g.run(cmd, func(ctx context.Context, c *client.Client) error {
			var applied bool
			n, err := sendFlowFile(cmd, name, func(seq iter.Seq2[client.Entry, error]) (n int, err error) {
				applied, n, err = c.PutSeq(ctx, client.Module{Bridge: g.bridge, Name: module}, seq)
				return n, err
			})
			if n == 0 && (err == nil || errors.Is(err, errdefs.ErrInvalidArgument)) {
				return fmt.Errorf("%s: no %s", name, noun)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), appliedText(n, noun, applied))
			return nil
		})
	}
	lines, err := readInput(cmd, name, kind)
	if err != nil {
		return err
	}
	if len(lines) == 0 {
		return fmt.Errorf("%s: no %s", name, noun)
	}
	return g.run(cmd, func(ctx context.Context, c *client.Client) error {
		applied, err := c.Put(ctx, client.Module{Bridge: g.bridge, Name: module}, toEntries(kind, lines)...)
		if err != nil {
			return lineError(name, lines, err)
		}
		fmt.Fprintln(cmd.OutOrStdout(), appliedText(len(lines), noun, applied))
		return nil
	})
}

func newReplaceFlows(g *globals) *cobra.Command {
	var module, output string
	var ready, dry bool
	cmd := &cobra.Command{
		Use:   "replace-flows --module M [--ready] [--dry-run [-o text|json]] FILE|-",
		Short: "Make FILE the complete set of a module's flows; the others are removed in the same bundle",
		Example: `  flowctl replace-flows --module pipeline pipeline.flows
  # the module's first complete set after a reboot:
  flowctl replace-flows --module pipeline --ready pipeline.flows
  # see first what it would do:
  flowctl replace-flows --module pipeline --dry-run pipeline.flows
  # remove every flow of a module:
  flowctl replace-flows --module old /dev/null`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dry {
				if ready {
					return usagef("--dry-run changes nothing: it cannot mark the module --ready")
				}
				if err := checkOutput(output); err != nil {
					return err
				}
				return dryRun(cmd, g, module, args[0], output, false)
			}
			if cmd.Flags().Changed("output") {
				return usagef("-o goes with --dry-run")
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				var res client.SyncResult
				_, err := sendFlowFile(cmd, args[0], func(seq iter.Seq2[client.Entry, error]) (int, error) {
					var err error
					res, err = c.SyncSeq(ctx, client.Module{Bridge: g.bridge, Name: module}, ready, seq)
					return res.Stored, err
				})
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "%s: %d flows: %d added, %d changed, %d removed, %d unchanged\n", module,
					res.Stored, res.Added, res.Changed, res.Removed, res.Stored-res.Added-res.Changed)
				if res.Applied {
					fmt.Fprintln(w, "applied")
				} else {
					fmt.Fprintln(w, "stored; the bridge is not forwarding through flowstate yet, the next replay applies them")
				}
				if ready {
					fmt.Fprintf(w, "module %s ready\n", module)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns the flows (required)")
	cmd.Flags().BoolVar(&ready, "ready", false, "also mark the module ready for this boot")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "print what the replace would add, change and remove (as diff --file), changing nothing")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "with --dry-run: text, or json (one object per line, as diff -o json)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}
