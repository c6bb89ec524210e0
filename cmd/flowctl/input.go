// The input of add-flows, del-flows, replace-flows and the like: files and
// standard input read line by line, parsed on every CPU before anything is
// sent, and streamed to flowstated.

package main

import (
	"bufio"
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
