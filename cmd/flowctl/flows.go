package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
)

// line is one entry of an input file. Only its text is kept: a file may
// hold a million flows.
type line struct {
	n    int
	text string
}

// readInput returns the non-blank, non-comment lines of FILE or "-". Flow
// files are also parsed here, so every syntax error is reported at once with
// its line before anything is sent.
func readInput(cmd *cobra.Command, name string, kind entry.Kind) ([]line, error) {
	return readInputSkipping(cmd, name, kind, nil)
}

// readLines is readInput without parsing: add-flows and replace-flows send
// the text as it is, since flowstated parses it anyway and a parse here
// would take CPU from flowstated and vswitchd on a small node (a third of a
// 200,000-flow declare's CPU). When flowstated refuses an entry, syntaxErrors
// then parses the file here to report every syntax error at once.
func readLines(cmd *cobra.Command, name string) ([]line, error) {
	return readInputSkipping(cmd, name, 0, nil)
}

// syntaxErrors turns flowstated's refusal of a flow file's entry (err) into
// the file's syntax errors, every one with its line, as readInput reports
// them; an error that is not about an entry's syntax names its line alone.
func syntaxErrors(cmd *cobra.Command, name string, lines []line, err error) error {
	var ee *errdefs.EntryError
	if errors.As(err, &ee) && errors.Is(err, errdefs.ErrInvalidArgument) {
		if serr := checkFlows(cmd, name, lines); serr != nil {
			return serr
		}
	}
	return lineError(name, lines, err)
}

// readInputSkipping is readInput that also leaves out the lines skip matches.
func readInputSkipping(cmd *cobra.Command, name string, kind entry.Kind, skip func(string) bool) ([]line, error) {
	r := cmd.InOrStdin()
	if name != "-" {
		f, err := openInput(cmd, name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []line
	for l, err := range scanLines(r, name, skip) {
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	if kind == entry.KindFlow {
		if err := checkFlows(cmd, name, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scanLines yields the non-blank, non-comment lines of r (the input name),
// numbered, except those skip matches.
func scanLines(r io.Reader, name string, skip func(string) bool) iter.Seq2[line, error] {
	return func(yield func(line, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), canon.MaxText+2) // a line as long as flowstated takes, and its line end
		n := 1
		for ; sc.Scan(); n++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") || (skip != nil && skip(text)) {
				continue
			}
			if !yield(line{n: n, text: text}, nil) {
				return
			}
		}
		if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
			yield(line{}, fmt.Errorf("%s:%d: line longer than %d bytes (1 MiB), the most flowstated takes for one entry",
				name, n, canon.MaxText))
		} else if err != nil {
			yield(line{}, fmt.Errorf("%s:%d: %w", name, n, err))
		}
	}
}

// sendFlowFile sends the flows of file name as they are read (send is the
// client's PutSeq or SyncSeq), so that flowctl holds no more of a
// million-line file than a message's worth. When flowstated refuses an
// entry, the file is read again to report every syntax error with its line
// (syntaxErrors). Standard input, which cannot be read twice, is read whole
// first. It returns how many flows were sent.
func sendFlowFile(cmd *cobra.Command, name string, send func(iter.Seq2[client.Entry, error]) (int, error)) (int, error) {
	if name == "-" {
		lines, err := readLines(cmd, name)
		if err != nil {
			return 0, err
		}
		n, err := send(func(yield func(client.Entry, error) bool) {
			for _, l := range lines {
				if !yield(client.FlowText(l.text), nil) {
					return
				}
			}
		})
		if err != nil {
			return n, syntaxErrors(cmd, name, lines, err)
		}
		return n, nil
	}
	f, err := openInput(cmd, name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := send(func(yield func(client.Entry, error) bool) {
		for l, err := range scanLines(f, name, nil) {
			if !yield(client.FlowText(l.text), err) || err != nil {
				return
			}
		}
	})
	var ee *errdefs.EntryError
	if err == nil || !errors.As(err, &ee) {
		return n, err
	}
	lines, rerr := readLines(cmd, name)
	if rerr != nil {
		return n, err
	}
	return n, syntaxErrors(cmd, name, lines, err)
}

// openInput opens the FILE argument of cmd. A FILE that does not exist and
// reads as an entry gets a hint: ovs-ofctl users write flows inline.
func openInput(cmd *cobra.Command, name string) (*os.File, error) {
	f, err := os.Open(name)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(name, "=") {
		return f, err
	}
	hint := "FILE or - (standard input) expected"
	if inl := inlineCommand(cmd.Name()); inl != "" {
		hint += fmt.Sprintf("; for one entry inline, as ovs-ofctl's %s, use: flowctl %s --module M '%s'", inl, inl, name)
	}
	return nil, usagef("%s: no such file: %s", name, hint)
}

// inlineCommand is the command that takes an entry inline in place of
// the FILE of command, or "".
func inlineCommand(command string) string {
	switch command {
	case "add-flows", "add-groups", "add-meters":
		return strings.TrimSuffix(command, "s")
	}
	return ""
}

// checkFlows parses every line, on every CPU (a million-line file is
// parsed in well under the time the switch takes to install it), and joins
// the errors in line order.
func checkFlows(cmd *cobra.Command, name string, lines []line) error {
	errs := make([]error, len(lines))
	bar := newProgress(cmd.ErrOrStderr(), "parsing "+name, len(lines))
	var done atomic.Int64
	workers := min(runtime.GOMAXPROCS(0), max(1, len(lines)/checkChunk))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for lo := w * checkChunk; lo < len(lines); lo += workers * checkChunk {
				hi := min(lo+checkChunk, len(lines))
				for i := lo; i < hi; i++ {
					if err := checkFlow(lines[i].text); err != nil {
						errs[i] = fmt.Errorf("%s:%d: %w", name, lines[i].n, err)
					}
				}
				done.Add(int64(hi - lo))
				if w == 0 {
					bar.set(int(done.Load()))
				}
			}
		})
	}
	wg.Wait()
	bar.set(len(lines))
	bar.done()
	if err := errors.Join(errs...); err != nil {
		return usageError{err} // bad input, as an inline flow that does not parse: exit 2
	}
	return nil
}

// checkChunk is how many lines a parsing worker takes at a time.
const checkChunk = 1024

// checkFlow parses a flow line as flowstated does (canon.Parse), so a
// file's syntax errors are all reported before anything is sent.
func checkFlow(text string) error {
	_, _, err := canon.Parse(entry.KindFlow, text)
	return err
}

// lineError names the line of the file an entry error refers to.
func lineError(name string, lines []line, err error) error {
	var ee *errdefs.EntryError
	if errors.As(err, &ee) && ee.Index >= 0 && ee.Index < len(lines) {
		l := lines[ee.Index]
		return fmt.Errorf("%s:%d: %q: %w", name, l.n, l.text, ee.Err)
	}
	return err
}

func toEntries(kind entry.Kind, lines []line) []client.Entry {
	es := make([]client.Entry, len(lines))
	for i, l := range lines {
		es[i] = client.Entry{Kind: kind, Text: l.text}
	}
	return es
}

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
