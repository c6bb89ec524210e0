package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
)

// dumpOptions are the flags of dump-flows, dump-groups and dump-meters.
type dumpOptions struct {
	module     string
	table      int
	showModule bool
	stats      bool
	output     string
}

// newDump is dump-flows, dump-groups and dump-meters: the desired state.
func newDump(g *globals, kind entry.Kind) *cobra.Command {
	o := dumpOptions{table: -1}
	noun := kind.String() + "s"
	flows := kind == entry.KindFlow
	cmd := &cobra.Command{
		Use:   "dump-" + noun + " [--module M] [--show-module] [-o text|json] [BRIDGE]",
		Short: "Print the desired " + noun + " of the bridge in ovs-ofctl syntax",
		Example: "  flowctl dump-" + noun + "\n  flowctl dump-" + noun + " br-ex --module pipeline --show-module\n" +
			"  flowctl dump-" + noun + " -o json | jq -r .entry",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			args, err := bridgeArg(cmd, g, args, flows)
			if err != nil {
				return err
			}
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
				if filter, err = ofctl.ParseFlowFilter(args[0]); err != nil {
					return usagef("match %q: %w", args[0], err)
				}
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				if err := managedModule(ctx, c, g.bridge, o.module); err != nil {
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
	fl.StringVar(&o.module, "module", "", "only those of this module (one flowstated knows on the bridge)")
	fl.BoolVar(&o.showModule, "show-module", false, "print the owning module before each entry")
	fl.StringVarP(&o.output, "output", "o", "text", "output format: text, or json (one object per line)")
	if flows {
		cmd.Use = "dump-flows [--module M] [--table N] [--show-module] [--stats] [-o text|json] [BRIDGE] [MATCH]"
		cmd.Short = "Print the desired flows of the bridge in ovs-ofctl syntax, optionally those matching MATCH"
		cmd.Long = `Print the desired flows of the bridge in ovs-ofctl syntax.

BRIDGE, as ovs-ofctl takes it, is the same as --bridge. MATCH selects flows as
'ovs-ofctl dump-flows BRIDGE MATCH' does (not --strict): a flow is printed
when it matches every field MATCH gives, with the same value; it may match
more. table=N, cookie=V/M and out_port=P are allowed; priority is not (as
in ovs-ofctl).

Flows are printed by table, and within a table from the highest priority
down, as an ovs-ofctl user reads a dump ('ovs-ofctl --rsort'); flows of one
priority in flowstated's identity order.

--stats adds the counters the switch holds for each flow now (duration,
n_packets, n_bytes), read from the switch; a desired flow the switch lacks is
marked NOT ON SWITCH. It needs the bridge connected.

-o json prints one JSON object per entry, one per line: bridge, module,
kind, entry (the ovs-ofctl text), and for flows table and priority; with
--stats also onSwitch, durationSeconds, nPackets, nBytes.`
		cmd.Example = `  flowctl dump-flows
  flowctl dump-flows br-int table=0,ip
  flowctl dump-flows --module pipeline --show-module 'tcp,tp_dst=80'
  flowctl dump-flows --stats table=1
  flowctl dump-flows -o json | jq -r 'select(.priority > 100) | .entry'`
		cmd.Args = cobra.MaximumNArgs(2)
		fl.IntVar(&o.table, "table", -1, "only flows of this table")
		fl.BoolVar(&o.stats, "stats", false, "add the switch's counters of each flow")
	}
	return cmd
}

// checkOutput checks an -o value of the commands that print entries.
func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return usagef("-o %q: want text or json", o)
	}
	return nil
}

// bridgeArg takes a leading BRIDGE argument, as ovs-ofctl takes its SWITCH,
// into g.bridge, and returns the arguments left. With matches (the command
// also takes a MATCH), a single argument is a bridge only when it does not
// parse as a match.
func bridgeArg(cmd *cobra.Command, g *globals, args []string, matches bool) ([]string, error) {
	if len(args) == 0 {
		return args, nil
	}
	if matches && len(args) == 1 {
		if _, err := ofctl.ParseFlowFilter(args[0]); err == nil || strings.ContainsAny(args[0], "=,") {
			return args, nil
		}
	}
	br := args[0]
	if err := entry.ValidateName("bridge", br); err != nil {
		return nil, usagef("%w", err)
	}
	if cmd.Flags().Changed("bridge") && g.bridge != br {
		return nil, usagef("bridge %q given twice: --bridge %s and %s", br, g.bridge, br)
	}
	g.bridge = br
	return args[1:], nil
}

// managedIn fails unless st lists bridge: List of any other bridge is empty,
// which would read as "no flows".
func managedIn(st *client.Status, bridge string) error {
	var names []string
	for _, b := range st.Bridges {
		if b.Name == bridge {
			return nil
		}
		names = append(names, b.Name)
	}
	return fmt.Errorf("%w: bridge %q is not managed by flowstated (it manages %s); pick one with --bridge",
		errdefs.ErrNotFound, bridge, strings.Join(names, ", "))
}

// managedModule fails unless flowstated manages bridge and module (if
// given) declares something there.
func managedModule(ctx context.Context, c *client.Client, bridge, module string) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if err := managedIn(st, bridge); err != nil {
		return err
	}
	return knownModule(st, bridge, module)
}

// knownModule fails when module (if given) declares nothing on bridge: a
// mistyped module would print nothing and exit 0.
func knownModule(st *client.Status, bridge, module string) error {
	if module == "" {
		return nil
	}
	var names []string
	for _, m := range st.Modules {
		if m.Bridge != bridge {
			continue
		}
		if m.Name == module {
			return nil
		}
		names = append(names, m.Name)
	}
	known := "none"
	if len(names) > 0 {
		slices.Sort(names)
		known = strings.Join(names, ", ")
	}
	return fmt.Errorf("%w: module %q declares nothing on bridge %s (its modules: %s)", errdefs.ErrNotFound, module, bridge, known)
}

// dumpRows returns the entries of f; with stats, with the switch's counters
// (flows only). Flows come in dump order (dumpOrder).
func dumpRows(ctx context.Context, c *client.Client, f client.Filter, stats bool) ([]client.FlowStats, error) {
	var rows []client.FlowStats
	if stats {
		var err error
		if rows, err = c.FlowStats(ctx, f); err != nil {
			return nil, err
		}
	} else {
		es, err := c.List(ctx, f)
		if err != nil {
			return nil, err
		}
		rows = make([]client.FlowStats, len(es))
		for i, e := range es {
			rows[i] = client.FlowStats{Entry: e}
		}
	}
	if f.Kind == entry.KindFlow {
		slices.SortStableFunc(rows, func(a, b client.FlowStats) int { return dumpOrder(a.Entry.OpenFlow, b.Entry.OpenFlow) })
	}
	return rows, nil
}

// dumpOrder orders canonical FLOW_MODs as an ovs-ofctl user reads a dump:
// by table, then from the highest priority down. flowstated lists them in
// identity order, which has priorities ascending.
func dumpOrder(a, b []byte) int {
	ta, pa, oka := flowTablePriority(a)
	tb, pb, okb := flowTablePriority(b)
	if !oka || !okb {
		return 0
	}
	return cmp.Or(cmp.Compare(ta, tb), cmp.Compare(pb, pa))
}

// flowTablePriority reads the table and priority of an OpenFlow 1.5
// FLOW_MOD.
func flowTablePriority(m []byte) (table uint8, priority uint16, ok bool) {
	if len(m) < 32 {
		return 0, 0, false
	}
	return entry.FlowModTable(m), entry.FlowModPriority(m), true
}

// dumpEntry is one line of dump-flows -o json.
type dumpEntry struct {
	Bridge   string `json:"bridge"`
	Module   string `json:"module"`
	Kind     string `json:"kind"`
	Table    *uint8 `json:"table,omitempty"`
	Priority *int   `json:"priority,omitempty"`
	Entry    string `json:"entry"`
	// With --stats.
	OnSwitch        *bool    `json:"onSwitch,omitempty"`
	DurationSeconds *float64 `json:"durationSeconds,omitempty"`
	NPackets        *uint64  `json:"nPackets,omitempty"`
	NBytes          *uint64  `json:"nBytes,omitempty"`
}

func newDumpEntry(r client.FlowStats, stats bool) dumpEntry {
	e := r.Entry
	d := dumpEntry{Bridge: e.Bridge, Module: e.Module, Kind: e.Kind.String(), Entry: e.Text}
	if e.Kind == entry.KindFlow {
		if t, p, ok := flowTablePriority(e.OpenFlow); ok {
			pr := int(p)
			d.Table, d.Priority = &t, &pr
		}
	}
	if stats {
		on, secs, pk, by := r.Installed, r.Duration.Seconds(), r.Packets, r.Bytes
		d.OnSwitch = &on
		if on {
			d.DurationSeconds, d.NPackets, d.NBytes = &secs, &pk, &by
		}
	}
	return d
}

func printDump(w io.Writer, rows []client.FlowStats, filter *ofctl.FlowFilter, o dumpOptions) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	enc := json.NewEncoder(w)
	text := o.output != "json"
	if o.showModule && text {
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
		if !text {
			if err := enc.Encode(newDumpEntry(r, o.stats)); err != nil {
				return err
			}
			continue
		}
		line := r.Entry.Text
		switch {
		case o.stats && r.Installed:
			// Where ovs-ofctl dump-flows prints them, before the match.
			line = fmt.Sprintf("duration=%.3fs, n_packets=%d, n_bytes=%d, %s", r.Duration.Seconds(), r.Packets, r.Bytes, line)
		case o.stats:
			line = "NOT ON SWITCH, " + line
		}
		if o.showModule {
			fmt.Fprintf(tw, "%s\t%s\n", r.Entry.Module, line)
		} else {
			fmt.Fprintln(tw, line)
		}
	}
	return tw.Flush()
}
