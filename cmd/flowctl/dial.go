// Reaching flowstated: the --server target, the client and its retries, and
// the errors that tell why flowstated cannot be reached (not listening,
// frozen, or a socket this user may not open).

package main

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/flowstate-io/flowstate/errdefs"
)

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
