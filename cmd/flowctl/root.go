package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

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

// retryFor is how long flowctl's calls wait for an unreachable flowstated.
const retryFor = 2 * time.Second

// socketPath is the path of a unix target, or "".
func socketPath(t string) string {
	if p, ok := strings.CutPrefix(t, "unix://"); ok {
		return p
	}
	if p, ok := strings.CutPrefix(t, "unix:"); ok {
		return p
	}
	return ""
}

// newClient connects to --server.
func newClient(g *globals) (*client.Client, error) { return dialClient(g, nil) }

// dialClient connects to --server. A socket flowctl may not open ends the
// command at once (cancel, with a *permissionError as the cause): waiting
// and retrying cannot grant the permission.
func dialClient(g *globals, cancel context.CancelCauseFunc) (*client.Client, error) {
	t := target(g.server)
	// An operator reads the failure: wait only as long as a starting
	// flowstated takes to answer, not for one that may never come.
	opts := []client.Option{client.WithRetryFor(retryFor)}
	if path := socketPath(t); path != "" && cancel != nil {
		var d net.Dialer
		opts = append(opts, client.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "unix", path)
			if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
				cancel(newPermissionError(g.server, path))
			}
			return c, err
		})))
	}
	c, err := client.New(t, opts...)
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
	ctx, cancel := context.WithCancelCause(cmd.Context())
	defer cancel(nil)
	c, err := dialClient(g, cancel)
	if err != nil {
		return err
	}
	defer c.Close()
	// The call leaves probeFloor of --timeout to explain's probe, so a
	// frozen flowstated is diagnosed within --timeout, not after it.
	g.by = time.Now().Add(d)
	call := d
	if d >= 2*probeFloor {
		call = d - probeFloor
	}
	tctx, tcancel := context.WithTimeout(ctx, call)
	defer tcancel()
	err = fn(tctx, c)
	var pe *permissionError
	if errors.As(context.Cause(ctx), &pe) && err != nil {
		return pe
	}
	return g.explain(cmd.Context(), err)
}

// explain replaces a transport error (flowstated not running, wrong socket,
// frozen) with one line saying what to check. Other errors, the server's own
// verdicts among them, pass unchanged.
func (g *globals) explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	var pe *permissionError
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		// The client's EACCES on the socket, or a --module-writer refusal.
		if r := probe(target(g.server), g.probeBudget()); errors.Is(r.dialErr, syscall.EACCES) || errors.Is(r.dialErr, syscall.EPERM) {
			return newPermissionError(g.server, socketPath(target(g.server)))
		}
		return err
	}
	if !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch r := probe(target(g.server), g.probeBudget()); {
	case r.dialErr != nil:
		if errors.Is(r.dialErr, syscall.EACCES) || errors.Is(r.dialErr, syscall.EPERM) {
			return newPermissionError(g.server, socketPath(target(g.server)))
		}
		return &unreachableError{server: g.server, err: r.dialErr}
	case !r.answered:
		return &frozenError{server: g.server, detail: "it sends nothing on a new connection"}
	case errors.Is(err, context.DeadlineExceeded):
		return &frozenError{server: g.server, detail: "the call did not finish within --timeout " + g.timeout.String()}
	}
	return err
}

// frozenError: flowstated accepts connections and does not answer.
type frozenError struct {
	server, detail string
}

func (e *frozenError) Error() string {
	return fmt.Sprintf("flowstated at %s accepts connections but did not answer in time (%s): frozen, overloaded or wedged? "+
		"check `systemctl status flowstated` and `journalctl -u flowstated`; a frozen flowstated is released by its guard "+
		"(see docs/operations.md, \"When flowstated is down, frozen or wedged\")", e.server, e.detail)
}
func (e *frozenError) Unwrap() error { return errdefs.ErrUnavailable }

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

// permissionError: the socket (or a directory above it) may not be opened
// by this user.
type permissionError struct {
	server, path, owner string
}

func newPermissionError(server, path string) *permissionError {
	e := &permissionError{server: server, path: path}
	if fi, serr := os.Stat(path); serr == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.owner = fmt.Sprintf(" (owner %s, group %s, mode %04o)", userName(st.Uid), groupName(st.Gid), fi.Mode().Perm())
		}
	} else if errors.Is(serr, os.ErrPermission) {
		e.owner = " (a directory above it is closed to you: " + filepath.Dir(path) + ")"
	}
	return e
}

func (e *permissionError) Error() string {
	who := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	return fmt.Sprintf("permission denied on flowstated's socket %s%s: user %s is not allowed to open it; run flowctl as root (sudo flowctl ...), "+
		"or as a member of the socket's group (flowstated's unit with Group=, then `usermod -aG GROUP %s` and log in again; "+
		"see docs/operations.md, systemd)", e.path, e.owner, who, who)
}
func (e *permissionError) Unwrap() error { return errdefs.ErrPermissionDenied }

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}

// probeResult is what a fresh connection to flowstated's address showed.
type probeResult struct {
	// dialErr: nothing accepts connections there (or not for this user).
	dialErr error
	// answered: the server sent its HTTP/2 preface unprompted, as a gRPC
	// server does at once on every connection; a frozen process (SIGSTOP)
	// leaves the connection in its listen queue, silent.
	answered bool
}

// probeWait is how long probe waits for the server's first bytes; a serving
// flowstated sends them within milliseconds, so probeFloor is still a fair
// test when --timeout leaves less.
const probeWait, probeFloor = 2 * time.Second, 250 * time.Millisecond

// probeBudget is what is left of the command's --timeout for a probe, between
// probeFloor and probeWait.
func (g *globals) probeBudget() time.Duration {
	if g.by.IsZero() {
		return probeWait
	}
	return min(max(time.Until(g.by), probeFloor), probeWait)
}

// probe dials the gRPC target's socket, to tell "nobody listens" from
// "flowstated listens but does not answer".
func probe(t string, wait time.Duration) probeResult {
	network, addr := "tcp", t
	switch {
	case socketPath(t) != "":
		network, addr = "unix", socketPath(t)
	case strings.HasPrefix(t, "dns:///"):
		addr = strings.TrimPrefix(t, "dns:///")
	case strings.Contains(t, "://"):
		return probeResult{answered: true} // a resolver we do not know how to probe
	}
	c, err := net.DialTimeout(network, addr, wait)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return probeResult{dialErr: fmt.Errorf("%s %s: %w", network, addr, oe.Err)}
		}
		return probeResult{dialErr: err}
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	n, _ := c.Read(b[:])
	// A TLS server waits for the client to speak: it is not judged frozen.
	return probeResult{answered: n > 0 || network == "tcp"}
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
