package unixctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MaxReply is the largest reply read: a version or a short status is a few
// hundred bytes, and a daemon that says more is not answering what was
// asked.
const MaxReply = 4 << 10

// ErrRefused is a reply whose "error" is set: the daemon understood the
// request and declined it (an unknown command, wrong arguments).
var ErrRefused = errors.New("unixctl: refused")

// Socket returns the control socket of target in rundir (step 1), as
// ovs-appctl -t target finds it, and the pid it read.
func Socket(rundir, target string) (path string, pid int, err error) {
	pidfile := filepath.Join(rundir, target+".pid")
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return "", 0, fmt.Errorf("unixctl: no pidfile %s: %w", pidfile, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return "", 0, fmt.Errorf("unixctl: pidfile %s holds %q, not a pid", pidfile, bytes.TrimSpace(b))
	}
	path = filepath.Join(rundir, fmt.Sprintf("%s.%d.ctl", target, pid))
	if _, err := os.Stat(path); err != nil {
		return "", pid, fmt.Errorf("unixctl: pidfile %s names pid %d, but there is no socket %s (a stale pidfile?): %w",
			pidfile, pid, path, err)
	}
	return path, pid, nil
}

// Call sends method with params to the daemon serving path (steps 2-4) and
// returns its text result. A refusal wraps ErrRefused.
func Call(ctx context.Context, path, method string, params ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", fmt.Errorf("unixctl: %s: %w", path, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return "", fmt.Errorf("unixctl: %s: %w", path, err)
		}
	}
	const id = 0
	if params == nil {
		params = []string{} // OVS requires an array
	}
	req, err := json.Marshal(struct {
		Method string   `json:"method"`
		Params []string `json:"params"`
		ID     int      `json:"id"`
	}{method, params, id})
	if err != nil {
		return "", fmt.Errorf("unixctl: %s: %w", path, err)
	}
	if _, err := conn.Write(req); err != nil {
		return "", fmt.Errorf("unixctl: %s: %s: %w", path, method, ctxErr(ctx, err))
	}
	res, err := DecodeReply(conn, id)
	if err != nil {
		return "", fmt.Errorf("unixctl: %s: %s: %w", path, method, ctxErr(ctx, err))
	}
	return res, nil
}

// ctxErr names ctx's end rather than the socket error it caused (a
// closed socket, or its deadline, which is ctx's).
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}

// DecodeReply reads the one reply to request id from r (step 3): its text
// result, or an error for a refusal (wrapping ErrRefused), another id, a
// non-text result or a reply longer than MaxReply.
func DecodeReply(r io.Reader, id int) (string, error) {
	lr := &io.LimitedReader{R: r, N: MaxReply + 1}
	var reply struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	dec := json.NewDecoder(lr)
	err := dec.Decode(&reply)
	if (err != nil && lr.N <= 0) || dec.InputOffset() > MaxReply {
		return "", fmt.Errorf("reply longer than %d bytes", MaxReply)
	}
	if err != nil {
		return "", fmt.Errorf("reading the reply: %w", err)
	}
	if got := strings.TrimSpace(string(reply.ID)); got != strconv.Itoa(id) {
		return "", fmt.Errorf("reply to id %s, want %d", got, id)
	}
	if e := reply.Error; len(e) > 0 && string(e) != "null" {
		var msg string
		if json.Unmarshal(e, &msg) != nil {
			msg = string(e)
		}
		return "", fmt.Errorf("%w: %s", ErrRefused, strings.TrimSpace(msg))
	}
	var res string
	if err := json.Unmarshal(reply.Result, &res); err != nil {
		return "", fmt.Errorf("result is not text: %s", kind(reply.Result))
	}
	return res, nil
}

// kind names a JSON value's type for an error.
func kind(v json.RawMessage) string {
	switch s := strings.TrimSpace(string(v)); {
	case s == "" || s == "null":
		return "missing"
	case s[0] == '{':
		return "an object"
	case s[0] == '[':
		return "an array"
	default:
		return "a " + strconv.Quote(s[:min(len(s), 16)])
	}
}
