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
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
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
		f, err := os.Open(name)
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
		for n := 1; sc.Scan(); n++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") || (skip != nil && skip(text)) {
				continue
			}
			if !yield(line{n: n, text: text}, nil) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			yield(line{}, fmt.Errorf("%s: %w", name, err))
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
	f, err := os.Open(name)
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
	return errors.Join(errs...)
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

// managed fails unless flowstated manages bridge: List of any other bridge
// is empty, which would read as "no flows".
func managed(ctx context.Context, c *client.Client, bridge string) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
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
			if kind == entry.KindFlow {
				return g.run(cmd, func(ctx context.Context, c *client.Client) error {
					var applied bool
					n, err := sendFlowFile(cmd, args[0], func(seq iter.Seq2[client.Entry, error]) (n int, err error) {
						applied, n, err = c.PutSeq(ctx, client.Module{Bridge: g.bridge, Name: module}, seq)
						return n, err
					})
					if n == 0 && (err == nil || errors.Is(err, errdefs.ErrInvalidArgument)) {
						return fmt.Errorf("%s: no %s", args[0], noun)
					}
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), appliedText(n, noun, applied))
					return nil
				})
			}
			lines, err := readInput(cmd, args[0], kind)
			if err != nil {
				return err
			}
			if len(lines) == 0 {
				return fmt.Errorf("%s: no %s", args[0], noun)
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				applied, err := c.Put(ctx, client.Module{Bridge: g.bridge, Name: module}, toEntries(kind, lines)...)
				if err != nil {
					return lineError(args[0], lines, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), appliedText(len(lines), noun, applied))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns them (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

// newDel is del-flows, del-groups and del-meters: strict, by identity.
func newDel(g *globals, kind entry.Kind) *cobra.Command {
	var module string
	noun := kind.String() + "s"
	ident := map[entry.Kind]string{entry.KindFlow: "table, priority and match", entry.KindGroup: "group_id=N", entry.KindMeter: "meter=N"}[kind]
	cmd := &cobra.Command{
		Use:   "del-" + noun + " --module M FILE|-",
		Short: "Delete " + noun + " of a module, named by " + ident,
		Example: map[entry.Kind]string{
			entry.KindFlow:  "  echo 'table=0,priority=100,ip' | flowctl del-flows --module pipeline -",
			entry.KindGroup: "  echo 'group_id=5' | flowctl del-groups --module lb -",
			entry.KindMeter: "  echo 'meter=1' | flowctl del-meters --module qos -",
		}[kind],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Not add syntax (no actions): the server parses identities.
			lines, err := readInput(cmd, args[0], 0)
			if err != nil {
				return err
			}
			if len(lines) == 0 {
				return fmt.Errorf("%s: no %s", args[0], noun)
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				if _, err := c.Delete(ctx, client.Module{Bridge: g.bridge, Name: module}, toEntries(kind, lines)...); err != nil {
					return lineError(args[0], lines, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d %s deleted\n", len(lines), noun)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns them (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

func newReplaceFlows(g *globals) *cobra.Command {
	var module string
	var ready bool
	cmd := &cobra.Command{
		Use:   "replace-flows --module M [--ready] FILE|-",
		Short: "Make FILE the complete set of a module's flows; the others are removed in the same bundle",
		Example: `  flowctl replace-flows --module pipeline pipeline.flows
  # the module's first complete set after a reboot:
  flowctl replace-flows --module pipeline --ready pipeline.flows
  # remove every flow of a module:
  flowctl replace-flows --module old /dev/null`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	_ = cmd.MarkFlagRequired("module")
	return cmd
}
