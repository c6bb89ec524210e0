// del-flows, del-groups and del-meters: by identity (--strict, groups and
// meters), or every flow of the module that a match covers.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
)

// newDel is del-flows, del-groups and del-meters. Groups and meters are
// named by id; flows, as ovs-ofctl del-flows takes them, by a match that
// selects every flow of the module it covers, or with --strict by table,
// priority and match.
func newDel(g *globals, kind entry.Kind) *cobra.Command {
	var module string
	var strict bool
	noun := kind.String() + "s"
	ident := map[entry.Kind]string{entry.KindFlow: "table, priority and match", entry.KindGroup: "group_id=N", entry.KindMeter: "meter=N"}[kind]
	cmd := &cobra.Command{
		Use:   "del-" + noun + " --module M FILE|-",
		Short: "Delete " + noun + " of a module, named by " + ident,
		Example: map[entry.Kind]string{
			entry.KindGroup: "  echo 'group_id=5' | flowctl del-groups --module lb -",
			entry.KindMeter: "  echo 'meter=1' | flowctl del-meters --module qos -",
		}[kind],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if kind == entry.KindFlow && !strict {
				return delMatching(cmd, g, module, args)
			}
			if len(args) == 0 {
				return usagef("--strict needs the flows to delete: FLOW, FILE or -")
			}
			name := args[0]
			var lines []line
			if kind == entry.KindFlow && isInline(name) {
				lines = []line{{n: 1, text: strings.TrimSpace(name)}}
			} else {
				// Not add syntax (no actions): the server parses identities.
				var err error
				if lines, err = readInput(cmd, name, 0); err != nil {
					return err
				}
			}
			if len(lines) == 0 {
				return fmt.Errorf("%s: no %s", name, noun)
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				n, err := deletePresent(ctx, c, client.Module{Bridge: g.bridge, Name: module}, kind, lines)
				if err != nil {
					return lineError(name, lines, err)
				}
				if n > 0 { // as ovs-ofctl, an absent one is no error and no output
					fmt.Fprintf(cmd.OutOrStdout(), "%d %s deleted\n", n, noun)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns them (required)")
	_ = cmd.MarkFlagRequired("module")
	if kind == entry.KindFlow {
		cmd.Use = "del-flows --module M [--strict] [BRIDGE] [MATCH|FILE|-]"
		cmd.Short = "Delete the flows of a module that a match covers (as ovs-ofctl del-flows), or with --strict those named by table, priority and match"
		cmd.Long = `Delete flows of module M, and of no other module.

As 'ovs-ofctl del-flows BRIDGE [FLOW]': without --strict, MATCH deletes every
flow of the module that it covers, as dump-flows MATCH selects them (each
field MATCH gives, with the same value; table=N, cookie=V/M and out_port=P
restrict further; priority is refused, as a non-strict match has none). Without
MATCH, every flow of the module goes. With --strict, each flow is named by
table, priority and match (actions ignored), as ovs-ofctl del-flows --strict
takes it: one the module does not hold is skipped, as ovs-ofctl does, and a
flow of another module is refused.

The argument is a flow given inline, "-" for lines of standard input, or a
FILE of lines: a name that starts with / or . is a file, as is one that
exists; anything else is a flow (the rule of ovs-ofctl diff-flows). Lines of
a FILE or "-" are matches, or with --strict flows. BRIDGE, as ovs-ofctl takes
it, is the same as --bridge.

A non-strict delete reads the module's flows, then deletes those selected by
identity, in requests of up to 10,000 flows: each request is all or nothing,
and a flow the module changes meanwhile is deleted as it was read.`
		cmd.Example = `  flowctl del-flows --module pipeline 'table=0,ip'        # every ip flow of table 0
  flowctl del-flows --module pipeline 'cookie=0x10/0xff'
  flowctl del-flows --module pipeline out_port=2          # the flows that output to port 2
  flowctl del-flows --module pipeline --strict 'table=0,priority=100,ip'
  flowctl del-flows --module pipeline                    # all of the module's flows
  echo 'table=0,priority=100,ip' | flowctl del-flows --module pipeline --strict -`
		cmd.Args = cobra.MaximumNArgs(2)
		cmd.Flags().BoolVar(&strict, "strict", false, "name each flow by table, priority and match, as ovs-ofctl del-flows --strict")
		run := cmd.RunE
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && !isInline(args[0]) {
				return run(cmd, args) // FILE or -: not a bridge
			}
			args, err := bridgeArg(cmd, g, args, true)
			if err != nil {
				return err
			}
			if len(args) > 1 {
				return usagef("want [BRIDGE] [MATCH|FILE|-], got %d arguments", len(args)+1)
			}
			return run(cmd, args)
		}
	}
	return cmd
}

// deletePresent deletes lines of m by identity and returns how many it
// deleted. As ovs-ofctl del-flows --strict (and del-groups, del-meters), an
// entry the module does not hold is skipped, not an error: a delete that
// fails NOT_FOUND for one entry (all or nothing) is sent again without it.
// Any other refusal fails with the index of lines it names.
func deletePresent(ctx context.Context, c *client.Client, m client.Module, kind entry.Kind, lines []line) (int, error) {
	idx := make([]int, len(lines)) // position in lines of each entry sent
	for i := range idx {
		idx[i] = i
	}
	for len(idx) > 0 {
		sent := make([]line, len(idx))
		for i, j := range idx {
			sent[i] = lines[j]
		}
		_, err := c.Delete(ctx, m, toEntries(kind, sent)...)
		var ee *errdefs.EntryError
		if err == nil {
			return len(idx), nil
		}
		if !errors.As(err, &ee) || ee.Index < 0 || ee.Index >= len(idx) {
			return 0, err
		}
		at := idx[ee.Index]
		if !errors.Is(err, errdefs.ErrNotFound) {
			return 0, &errdefs.EntryError{Index: at, Err: ee.Err}
		}
		idx = slices.Delete(idx, ee.Index, ee.Index+1)
	}
	return 0, nil
}

// isInline reports whether the argument of del-flows is a flow rather than
// a FILE: not "-", not starting with / or ., and no such file.
func isInline(arg string) bool {
	if arg == "-" || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") {
		return false
	}
	_, err := os.Stat(arg)
	return err != nil
}

// delBatch is how many flows one request of a non-strict delete names.
const delBatch = 10_000

// delMatching deletes the flows of module that the matches of args (none:
// every flow) cover.
func delMatching(cmd *cobra.Command, g *globals, module string, args []string) error {
	var filters []*ofctl.FlowFilter
	var where []string
	switch {
	case len(args) == 0:
		filters = []*ofctl.FlowFilter{nil}
	case isInline(args[0]):
		ff, err := ofctl.ParseFlowFilter(args[0])
		if err != nil {
			return usagef("match %q: %w%s", args[0], err, strictHint(err))
		}
		filters, where = append(filters, ff), append(where, args[0])
	default:
		lines, err := readInput(cmd, args[0], 0)
		if err != nil {
			return err
		}
		var errs []error
		for _, l := range lines {
			ff, err := ofctl.ParseFlowFilter(l.text)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w%s", args[0], l.n, err, strictHint(err)))
				continue
			}
			filters, where = append(filters, ff), append(where, fmt.Sprintf("%s:%d", args[0], l.n))
		}
		if len(errs) > 0 {
			return usageError{errors.Join(errs...)}
		}
		if len(filters) == 0 {
			return fmt.Errorf("%s: no matches", args[0])
		}
	}
	return g.run(cmd, func(ctx context.Context, c *client.Client) error {
		if err := managedModule(ctx, c, g.bridge, module); err != nil {
			return err
		}
		es, err := c.List(ctx, client.Filter{Bridge: g.bridge, Module: module, Kind: entry.KindFlow})
		if err != nil {
			return err
		}
		var del []client.Entry
		for _, e := range es {
			for i, ff := range filters {
				ok := ff == nil
				if !ok {
					if ok, err = ff.Match(e.OpenFlow); err != nil {
						return fmt.Errorf("%s: %s: %w", where[i], e.Text, err)
					}
				}
				if ok {
					del = append(del, client.Entry{Kind: entry.KindFlow, OpenFlow: e.OpenFlow})
					break
				}
			}
		}
		for lo := 0; lo < len(del); lo += delBatch {
			if _, err := c.Delete(ctx, client.Module{Bridge: g.bridge, Name: module}, del[lo:min(lo+delBatch, len(del))]...); err != nil {
				if lo > 0 {
					return fmt.Errorf("%d of the %d flows deleted, then: %w", lo, len(del), err)
				}
				return err
			}
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%d flows of module %s deleted (of %d)\n", len(del), module, len(es))
		return nil
	})
}

// strictHint points a match refused for its priority to --strict.
func strictHint(err error) string {
	if strings.Contains(err.Error(), "priority") {
		return "; to delete one flow by table, priority and match, give --strict"
	}
	return ""
}
