package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
)

func newDiff(g *globals) *cobra.Command {
	var file, module, output string
	cmd := &cobra.Command{
		Use:   "diff [-o text|json] [--file FILE|- --module M] [BRIDGE]",
		Short: "Print how the switch differs from the desired state, or a module from FILE (changes nothing); exit status 2 if it differs",
		Long: `Print how the switch differs from the desired state (changes nothing).

Each difference is what a replay would do, in the syntax of ovs-ofctl
diff-flows: "+ ENTRY" a desired entry the switch lacks (added), "- ENTRY" an
entry of the owned space nobody declared (deleted), and for an entry the
switch holds with other content, "- " the switch's version then "+ " the
desired one (replaced).

With --file FILE and --module M, print instead what 'replace-flows --module
M FILE' would do to the module's flows: the same lines, "+" added, "-"
removed, "-"/"+" changed, and the counts replace-flows prints. FILE is parsed
here with flowstated's parser; a flow of FILE another module owns, or two
lines of one identity, make the replace fail, and are reported as such.

-o json prints one object per line: op (add, modify, delete), kind, module,
desired and actual (each the entry's ovs-ofctl text; empty when absent).

Exit status 0 when there is no difference, 2 when there is, 1 on failure.`,
		Example: `  flowctl diff
  flowctl diff br-ex || echo "br-ex drifted (exit 2) or flowctl failed (exit 1)"
  flowctl diff --module pipeline --file pipeline.flows
  flowctl diff -o json | jq -r 'select(.op == "modify") | .actual'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if _, err := bridgeArg(cmd, g, args, false); err != nil {
				return err
			}
			if (file == "") != (module == "") {
				return usagef("--file and --module go together: what replace-flows --module M FILE would do")
			}
			if file != "" {
				return dryRun(cmd, g, module, file, output, true)
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				changes, err := c.Diff(ctx, g.bridge)
				if err != nil {
					return err
				}
				if err := printChanges(cmd.OutOrStdout(), changes, output); err != nil {
					return err
				}
				if len(changes) > 0 {
					return exitCode{exitUsage, countChanges(changes)}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, or json (one object per line)")
	cmd.Flags().StringVar(&file, "file", "", "compare module --module with FILE (- for standard input) as replace-flows would")
	cmd.Flags().StringVar(&module, "module", "", "with --file: the module FILE would replace")
	return cmd
}

// countChanges says how many differences there are, and of which kind.
func countChanges(changes []client.Change) string {
	var add, mod, del int
	for _, c := range changes {
		switch c.Op {
		case client.ChangeAdd:
			add++
		case client.ChangeDelete:
			del++
		default:
			mod++
		}
	}
	return fmt.Sprintf("%d differences: %d to add, %d to change, %d to delete", len(changes), add, mod, del)
}

// jsonChange is one line of diff -o json.
type jsonChange struct {
	Op      string `json:"op"`
	Kind    string `json:"kind"`
	Module  string `json:"module"`
	Desired string `json:"desired"`
	Actual  string `json:"actual"`
}

// printChanges prints changes as ovs-ofctl diff-flows does ("-" then "+"
// for a changed entry), or as JSON lines.
func printChanges(w io.Writer, changes []client.Change, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		for _, ch := range changes {
			if err := enc.Encode(jsonChange{Op: ch.Op.String(), Kind: ch.Kind.String(), Module: ch.Module, Desired: ch.Desired, Actual: ch.Actual}); err != nil {
				return err
			}
		}
		return nil
	}
	var b strings.Builder
	for _, ch := range changes {
		switch ch.Op {
		case client.ChangeAdd:
			fmt.Fprintf(&b, "+ %s\n", ch.Desired)
		case client.ChangeDelete:
			fmt.Fprintf(&b, "- %s\n", ch.Actual)
		default:
			fmt.Fprintf(&b, "- %s\n+ %s\n", ch.Actual, ch.Desired)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// replacePlan is what replace-flows of a FILE would do to a module's flows.
type replacePlan struct {
	changes                     []client.Change
	stored, added, changed, del int
	// refusals would fail the replace (ownership, duplicates).
	refusals []string
}

// planReplace compares the flows of FILE (lines) with those module declares
// on the bridge (es: every flow of the bridge), as flowstated's Sync would.
func planReplace(name, module string, lines []line, es []client.StoredEntry) (replacePlan, error) {
	type have struct {
		e       client.StoredEntry
		payload []byte
	}
	declared := make(map[string]have, len(es))
	for _, e := range es {
		_, id, err := entry.Identify(entry.KindFlow, e.OpenFlow)
		if err != nil {
			return replacePlan{}, fmt.Errorf("flow %q of module %s: %w", e.Text, e.Module, err)
		}
		declared[string(id)] = have{e: e, payload: e.OpenFlow}
	}
	var p replacePlan
	seen := make(map[string]int, len(lines))
	for _, l := range lines {
		payload, id, err := canon.Parse(entry.KindFlow, l.text)
		if err != nil {
			return p, fmt.Errorf("%s:%d: %w", name, l.n, err)
		}
		k := string(id)
		if n, dup := seen[k]; dup {
			p.refusals = append(p.refusals, fmt.Sprintf("%s:%d: the same flow (table, priority, match) as line %d", name, l.n, n))
			continue
		}
		seen[k] = l.n
		p.stored++
		text, err := canon.Format(entry.KindFlow, payload)
		if err != nil {
			text = l.text
		}
		h, ok := declared[k]
		switch {
		case ok && h.e.Module != module:
			p.refusals = append(p.refusals, fmt.Sprintf("%s:%d: %q is module %q's", name, l.n, l.text, h.e.Module))
		case !ok:
			p.added++
			p.changes = append(p.changes, client.Change{Op: client.ChangeAdd, Kind: entry.KindFlow, Module: module, Desired: text})
		case !bytes.Equal(h.payload, payload):
			p.changed++
			p.changes = append(p.changes, client.Change{Op: client.ChangeModify, Kind: entry.KindFlow, Module: module, Desired: text, Actual: h.e.Text})
		}
	}
	var gone []client.StoredEntry
	for k, h := range declared {
		if _, ok := seen[k]; !ok && h.e.Module == module {
			gone = append(gone, h.e)
		}
	}
	slices.SortFunc(gone, func(a, b client.StoredEntry) int { return dumpOrder(a.OpenFlow, b.OpenFlow) })
	for _, e := range gone {
		p.del++
		p.changes = append(p.changes, client.Change{Op: client.ChangeDelete, Kind: entry.KindFlow, Module: module, Actual: e.Text})
	}
	return p, nil
}

// dryRun prints what replace-flows --module module FILE would do, changing
// nothing. As diff (asDiff), differences exit with status 2.
func dryRun(cmd *cobra.Command, g *globals, module, name, output string, asDiff bool) error {
	lines, err := readInput(cmd, name, entry.KindFlow)
	if err != nil {
		return err
	}
	return g.run(cmd, func(ctx context.Context, c *client.Client) error {
		if err := managed(ctx, c, g.bridge); err != nil {
			return err
		}
		es, err := c.List(ctx, client.Filter{Bridge: g.bridge, Kind: entry.KindFlow})
		if err != nil {
			return err
		}
		p, err := planReplace(name, module, lines, es)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if err := printChanges(w, p.changes, output); err != nil {
			return err
		}
		if len(p.refusals) > 0 {
			return fmt.Errorf("replace-flows of %s would fail, changing nothing:\n  %s", name, strings.Join(p.refusals, "\n  "))
		}
		summary := fmt.Sprintf("%s: %d flows: %d added, %d changed, %d removed, %d unchanged (dry run: nothing changed)",
			module, p.stored, p.added, p.changed, p.del, p.stored-p.added-p.changed)
		if output == "json" || asDiff {
			fmt.Fprintln(cmd.ErrOrStderr(), summary)
		} else {
			fmt.Fprintln(w, summary)
		}
		if asDiff && len(p.changes) > 0 {
			return exitCode{code: exitUsage}
		}
		return nil
	})
}
