package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/version"
)

// globals are the flags every command shares.
type globals struct {
	server  string
	bridge  string
	timeout time.Duration
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
				return fmt.Errorf("unknown command %q; see flowctl --help", args[0])
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
	pf.DurationVar(&g.timeout, "timeout", 60*time.Second, "timeout of each command")
	for _, k := range entry.Kinds {
		root.AddCommand(newAdd(g, k), newDel(g, k), newDump(g, k))
	}
	root.AddCommand(newReplaceFlows(g), newReady(g), newDiff(g), newReconcile(g), newWatch(g), newWait(g), newStatus(g),
		newPrestart(g), newRelease(g), newVswitchdState(g), newBackup(g), newImport(g))
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
	err := root.ExecuteContext(ctx)
	code := status(err)
	if err != nil {
		var ec exitCode
		if !errors.As(err, &ec) || ec.msg != "" {
			fmt.Fprintln(stderr, "flowctl:", oneKind(err))
		}
		if code == exitUsage && !errors.As(err, &ec) {
			fmt.Fprintln(stderr, "see 'flowctl --help' or 'flowctl COMMAND --help'")
		}
	}
	return code
}

// target turns a bare socket path into a gRPC unix target: "/run/x.sock"
// and "./x.sock" mean unix:///run/x.sock and unix:///<cwd>/x.sock.
func target(s string) string {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") {
		if abs, err := filepath.Abs(s); err == nil {
			s = abs
		}
		return "unix://" + s
	}
	return s
}

func newClient(g *globals) (*client.Client, error) {
	c, err := client.New(target(g.server), client.WithFailFast())
	if err != nil {
		return nil, usagef("--server %q: %w", g.server, err)
	}
	return c, nil
}

// run connects, bounds the command with --timeout, and runs fn. An error
// that means flowstated could not be reached is replaced by one that says so
// and what to check.
func (g *globals) run(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	return g.runFor(cmd, g.timeout, fn)
}

func (g *globals) runFor(cmd *cobra.Command, d time.Duration, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := newClient(g)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), d)
	defer cancel()
	return g.explain(cmd.Context(), fn(ctx, c))
}

// explain replaces a transport error (flowstated not running, wrong socket,
// frozen) with one line saying what to check. Other errors pass unchanged.
func (g *globals) explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	if !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if perr := probe(target(g.server)); perr != nil {
		return &unreachableError{server: g.server, err: perr}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("flowstated at %s accepts connections but did not answer in time (frozen, overloaded or wedged?); "+
			"check `systemctl status flowstated` and `journalctl -u flowstated`: %w", g.server, context.DeadlineExceeded)
	}
	return err
}

// unreachableError: nothing accepts connections at the address.
type unreachableError struct {
	server string
	err    error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach flowstated at %s (%v); is flowstated running? check `systemctl status flowstated`, "+
		"the socket path, or --server / FLOWSTATE_SERVER", e.server, e.err)
}
func (e *unreachableError) Unwrap() error { return errdefs.ErrUnavailable }

// probe dials the gRPC target's socket, to tell "nobody listens" from
// "flowstated listens but does not answer".
func probe(t string) error {
	network, addr := "tcp", t
	switch {
	case strings.HasPrefix(t, "unix://"):
		network, addr = "unix", strings.TrimPrefix(t, "unix://")
	case strings.HasPrefix(t, "unix:"):
		network, addr = "unix", strings.TrimPrefix(t, "unix:")
	case strings.HasPrefix(t, "dns:///"):
		addr = strings.TrimPrefix(t, "dns:///")
	case strings.Contains(t, "://"):
		return nil // a resolver we do not know how to probe
	}
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return fmt.Errorf("%s %s: %w", network, addr, oe.Err)
		}
		return err
	}
	return c.Close()
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
