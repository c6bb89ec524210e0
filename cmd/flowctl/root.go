package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/version"
)

// globals are the flags every command shares.
type globals struct {
	server  string
	bridge  string
	timeout time.Duration
	// by is when the command run by runFor must end, diagnosis included
	// (zero outside runFor): explain's probe waits only until then.
	by time.Time
}

// Exit statuses, as documented in docs/operations.md ("flowctl").
const (
	exitOK      = 0
	exitFailure = 1
	// exitUsage: the command line is wrong, or diff found differences.
	exitUsage = 2
)

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "flowctl",
		Short: "Declare and inspect the flows flowstated keeps on Open vSwitch bridges",
		Long: `Declare and inspect the flows flowstated keeps on Open vSwitch bridges.

flowctl speaks the flow syntax of ovs-ofctl. It talks only to flowstated
(--server), except prestart and release, which reach ovsdb-server
(--ovsdb) when flowstated does not answer.

Exit status: 0 success; 1 failure; 2 usage error, or diff found differences.`,
		Example: `  flowctl status
  flowctl add-flows --module pipeline pipeline.flows
  flowctl --server /run/flowstate/flowstate.sock dump-flows --table 0
  flowctl --version`,
		Version:       version.Get().String("flowctl"),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without it cobra treats an unknown command as a missing one and
		// prints help with exit status 0.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q%s; see 'flowctl --help'", args[0], didYouMean(cmd, args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetVersionTemplate("{{.Version}}\n")
	def := os.Getenv("FLOWSTATE_SERVER")
	if def == "" {
		def = client.DefaultTarget
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", def, "flowstated address: a socket path, unix:///path or host:port (env FLOWSTATE_SERVER)")
	pf.StringVar(&g.bridge, "bridge", "br-int", "bridge")
	g.timeout = 60 * time.Second
	pf.Var(&timeoutValue{&g.timeout}, "timeout", "timeout of each command: a duration (30s, 2m) or seconds (30)")
	for _, k := range entry.Kinds {
		root.AddCommand(newAdd(g, k), newAddOne(g, k), newDel(g, k), newDump(g, k))
	}
	root.AddCommand(newReplaceFlows(g), newReady(g), newForgetModule(g), newDiff(g), newReconcile(g), newWatch(g), newWait(g), newStatus(g),
		newPrestart(g), newRelease(g), newVswitchdState(g), newBackup(g), newImport(g), newSupportBundle(g))
	markFailures(root)
	registerCompletions(root, g)
	return root
}

// usageError is a wrong command line found after cobra's own checks; it
// exits with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// failure marks an error returned by a command's RunE: the command line was
// fine and the work failed. Errors cobra returns itself (unknown flag or
// command, wrong arguments) carry no mark and exit with status 2.
type failure struct{ err error }

func (e failure) Error() string { return e.err.Error() }
func (e failure) Unwrap() error { return e.err }

// markFailures wraps the RunE of cmd and its children.
func markFailures(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if err := run(cmd, args); err != nil {
				return failure{err}
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		markFailures(c)
	}
}

// exitCode is an error that sets the exit status (diff: 2).
type exitCode struct {
	code int
	msg  string
}

func (e exitCode) Error() string { return e.msg }

// status is the exit status for the error a command returned.
func status(err error) int {
	var ec exitCode
	var ue usageError
	var f failure
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return ec.code
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &f):
		return exitFailure
	}
	return exitUsage
}

// execute runs flowctl with args and returns its exit status; errors go to
// stderr, once, with a hint where one helps.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// An unknown command is said before cobra parses the flags: they belong
	// to the command meant, so "unknown flag" would blame the wrong word.
	err := unknownCommand(root, args)
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	code := status(err)
	if err != nil {
		var ec exitCode
		if !errors.As(err, &ec) || ec.msg != "" {
			fmt.Fprintln(stderr, "flowctl:", oneKind(err))
		}
		if code == exitUsage && !errors.As(err, &ec) && !strings.Contains(err.Error(), "--help") {
			fmt.Fprintln(stderr, "see 'flowctl --help' or 'flowctl COMMAND --help'")
		}
	}
	return code
}

// unknownCommand returns a usage error naming the first word of args that
// is neither a flag, the value of a global flag, nor a command, with the
// commands it may be a typo of.
func unknownCommand(root *cobra.Command, args []string) error {
	name := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			f := root.PersistentFlags().Lookup(strings.TrimLeft(a, "-"))
			if f != nil && f.NoOptDefVal == "" && !strings.Contains(a, "=") {
				i++ // its value
			}
			continue
		}
		name = a
		break
	}
	if name == "" {
		return nil
	}
	for _, c := range root.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return nil
		}
	}
	// Commands cobra adds itself when it executes.
	if name == "help" || name == "completion" || strings.HasPrefix(name, "__complete") {
		return nil
	}
	return usageError{fmt.Errorf("unknown command %q%s; see 'flowctl --help'", name, didYouMean(root, name))}
}

// didYouMean lists the commands name may be a typo of: cobra's suggestions
// (a prefix, or an edit distance of at most 2).
func didYouMean(root *cobra.Command, name string) string {
	root.SuggestionsMinimumDistance = 2
	s := root.SuggestionsFor(name)
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", quoteOr(s))
}

func quoteOr(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = strconv.Quote(x)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// timeoutValue is --timeout: a Go duration ("30s", "1m30s") or, as
// ovs-restart takes it, a number of seconds ("5", "2.5").
type timeoutValue struct{ d *time.Duration }

func (v *timeoutValue) String() string { return v.d.String() }
func (v *timeoutValue) Type() string   { return "duration" }

func (v *timeoutValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || f > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("want a duration (30s, 2m) or seconds (30)")
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return fmt.Errorf("want a positive duration")
	}
	*v.d = d
	return nil
}

// oneKind renders err with its kind stated once: the client appends the
// kind to a message from flowstated that often ends with it already
// ("...: failed precondition: failed precondition"), so a segment that
// repeats the one before it is dropped.
func oneKind(err error) string {
	parts := strings.Split(err.Error(), ": ")
	out := parts[:1]
	for _, p := range parts[1:] {
		if p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}
