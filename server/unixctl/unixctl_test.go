package unixctl_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/unixctl"
)

// TestCallVswitchd asks a real ovs-vswitchd over its control socket: its
// version as `ovs-vswitchd --version` begins, and a refusal for a command
// it does not know.
func TestCallVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sock := filepath.Join(s.Dir(), "ovs-vswitchd.ctl") // the sandbox's --unixctl
	got, err := unixctl.Call(ctx, sock, "version")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "ovs-vswitchd", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); strings.TrimSpace(got) != first {
		t.Fatalf("version over unixctl %q, want %q", got, first)
	}
	_, err = unixctl.Call(ctx, sock, "no-such-command", "x")
	if !errors.Is(err, unixctl.ErrRefused) || !strings.Contains(err.Error(), sock) ||
		!strings.Contains(err.Error(), `"no-such-command" is not a valid command`) {
		t.Fatalf("unknown command: %v", err)
	}
}

// serve answers each request on a new socket with reply (nil: never
// answers) and returns its path.
func serve(t *testing.T, reply []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.ctl")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var req json.RawMessage
			if json.NewDecoder(c).Decode(&req) == nil && reply != nil {
				_, _ = c.Write(reply)
			} else {
				_, _ = io.Copy(io.Discard, c) // until the client closes
			}
			_ = c.Close()
		}
	}()
	return path
}

func TestCallErrors(t *testing.T) {
	big := `{"id":0,"error":null,"result":"` + strings.Repeat("x", unixctl.MaxReply) + `"}`
	for _, tc := range []struct {
		name  string
		reply []byte
		want  string
	}{
		{"refused", []byte(`{"id":0,"error":"no","result":null}`), "refused: no"},
		{"too long", []byte(big), "reply longer than 4096 bytes"},
		{"other id", []byte(`{"id":7,"error":null,"result":"v"}`), "reply to id 7, want 0"},
		{"json result", []byte(`{"id":0,"error":null,"result":{"reply":"v"}}`), "result is not text: an object"},
		{"closed", []byte{}, "reading the reply: EOF"},
		{"silent", nil, "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			path := serve(t, tc.reply)
			_, err := unixctl.Call(ctx, path, "version")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "unixctl: "+path+": version: ") {
				t.Fatalf("error %v, want one naming %s with %q", err, path, tc.want)
			}
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := unixctl.Call(ctx, filepath.Join(t.TempDir(), "none.ctl"), "version"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no socket: %v", err)
	}
}

func TestSocket(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "ovn-controller.pid")
	_, _, err := unixctl.Socket(dir, "ovn-controller")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "no pidfile "+pidfile) {
		t.Fatalf("no pidfile: %v", err)
	}
	if err := os.WriteFile(pidfile, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := unixctl.Socket(dir, "ovn-controller"); err == nil || !strings.Contains(err.Error(), `holds "garbage", not a pid`) {
		t.Fatalf("bad pidfile: %v", err)
	}
	if err := os.WriteFile(pidfile, []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "ovn-controller.4242.ctl")
	_, pid, err := unixctl.Socket(dir, "ovn-controller")
	if pid != 4242 || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "no socket "+sock) {
		t.Fatalf("stale pidfile: pid %d, %v", pid, err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, pid, err := unixctl.Socket(dir, "ovn-controller"); err != nil || got != sock || pid != 4242 {
		t.Fatalf("Socket = %q, %d, %v; want %q", got, pid, err, sock)
	}
}

// FuzzDecodeReply: whatever a daemon sends, the decoder returns a result
// only for a reply to the request's id within MaxReply bytes, and never
// panics.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{
		`{"id":0,"error":null,"result":"ovn-controller 23.03.1\nOpen vSwitch Library 3.1.0\n"}`,
		`{"error":null,"id":0,"result":"ovs-vswitchd (Open vSwitch) 3.1.0\n"}`,
		`{"id":0,"error":"\"x\" is not a valid command (use \"list-commands\" to see a list of valid commands)","result":null}`,
		`{"id":0,"error":null,"result":{"reply-format":"plain","reply":"x"}}`,
		`{"id":"0","result":"v"}`,
		`{"id":0,"result":"v"}{"id":1}`,
		`{"id":0,"result":"` + strings.Repeat("a", unixctl.MaxReply) + `"}`,
		`{"id":0,"result":"v`,
		`[1,2]`, `null`, `0`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := unixctl.DecodeReply(strings.NewReader(string(b)), 0)
		if err != nil {
			if res != "" {
				t.Fatalf("result %q with error %v", res, err)
			}
			return
		}
		if len(b) > 0 && len(res) > len(b) || len(res) > unixctl.MaxReply {
			t.Fatalf("result of %d bytes from a reply of %d", len(res), len(b))
		}
		if !strings.Contains(string(b), strconv.Itoa(0)) {
			t.Fatalf("a result from a reply with no id 0: %q", b)
		}
	})
}
