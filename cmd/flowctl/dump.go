package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// dumpOptions are the flags of dump-flows, dump-groups and dump-meters.
type dumpOptions struct {
	module     string
	table      int
	showModule bool
	stats      bool
}

// newDump is dump-flows, dump-groups and dump-meters: the desired state.
func newDump(g *globals, kind entry.Kind) *cobra.Command {
	o := dumpOptions{table: -1}
	noun := kind.String() + "s"
	flows := kind == entry.KindFlow
	cmd := &cobra.Command{
		Use:     "dump-" + noun + " [--module M] [--show-module]",
		Short:   "Print the desired " + noun + " of the bridge in ovs-ofctl syntax",
		Example: "  flowctl dump-" + noun + "\n  flowctl --bridge br-ex dump-" + noun + " --module pipeline --show-module",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := client.Filter{Bridge: g.bridge, Module: o.module, Kind: kind}
			if o.table >= 0 {
				if o.table > 254 {
					return usagef("--table %d: want 0-254", o.table)
				}
				t := uint8(o.table)
				f.Table = &t
			}
			var filter *ofctl.FlowFilter
			if len(args) == 1 {
				var err error
				if filter, err = ofctl.ParseFlowFilter(args[0]); err != nil {
					return usagef("match %q: %w", args[0], err)
				}
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				if err := managed(ctx, c, g.bridge); err != nil {
					return err
				}
				rows, err := dumpRows(ctx, c, f, o.stats)
				if err != nil {
					return err
				}
				return printDump(cmd.OutOrStdout(), rows, filter, o)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.module, "module", "", "only those of this module")
	fl.BoolVar(&o.showModule, "show-module", false, "print the owning module before each entry")
	if flows {
		cmd.Use = "dump-flows [--module M] [--table N] [--show-module] [--stats] [MATCH]"
		cmd.Short = "Print the desired flows of the bridge in ovs-ofctl syntax, optionally those matching MATCH"
		cmd.Long = `Print the desired flows of the bridge in ovs-ofctl syntax.

MATCH selects flows as 'ovs-ofctl dump-flows BRIDGE MATCH' does (not
--strict): a flow is printed when it matches every field MATCH gives, with the
same value; it may match more. table=N and cookie=V/M are allowed; priority is
not (as in ovs-ofctl).

--stats adds the counters the switch holds for each flow now (duration,
n_packets, n_bytes), read from the switch; a desired flow the switch lacks is
marked NOT ON SWITCH. It needs the bridge connected.`
		cmd.Example = `  flowctl dump-flows
  flowctl dump-flows table=0,ip
  flowctl dump-flows --module pipeline --show-module 'tcp,tp_dst=80'
  flowctl dump-flows --stats table=1`
		cmd.Args = cobra.MaximumNArgs(1)
		fl.IntVar(&o.table, "table", -1, "only flows of this table")
		fl.BoolVar(&o.stats, "stats", false, "add the switch's counters of each flow")
	}
	return cmd
}

// dumpRows returns the entries of f; with stats, with the switch's counters
// (flows only).
func dumpRows(ctx context.Context, c *client.Client, f client.Filter, stats bool) ([]client.FlowStats, error) {
	if stats {
		return c.FlowStats(ctx, f)
	}
	es, err := c.List(ctx, f)
	if err != nil {
		return nil, err
	}
	rows := make([]client.FlowStats, len(es))
	for i, e := range es {
		rows[i] = client.FlowStats{Entry: e}
	}
	return rows, nil
}

func printDump(w io.Writer, rows []client.FlowStats, filter *ofctl.FlowFilter, o dumpOptions) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if o.showModule {
		fmt.Fprintln(tw, "MODULE\tENTRY")
	}
	for _, r := range rows {
		if filter != nil {
			ok, err := filter.Match(r.Entry.OpenFlow)
			if err != nil {
				return fmt.Errorf("%s: %w", r.Entry.Text, err)
			}
			if !ok {
				continue
			}
		}
		text := r.Entry.Text
		switch {
		case o.stats && r.Installed:
			// Where ovs-ofctl dump-flows prints them, before the match.
			text = fmt.Sprintf("duration=%.3fs, n_packets=%d, n_bytes=%d, %s", r.Duration.Seconds(), r.Packets, r.Bytes, text)
		case o.stats:
			text = "NOT ON SWITCH, " + text
		}
		if o.showModule {
			fmt.Fprintf(tw, "%s\t%s\n", r.Entry.Module, text)
		} else {
			fmt.Fprintln(tw, text)
		}
	}
	return tw.Flush()
}
