package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOVNController serves `version` on <dir>/ovn-controller.<pid>.ctl as
// a daemon with the given pid would, answering reply, and counts the asks.
func fakeOVNController(t *testing.T, dir string, pid int, reply string) *atomic.Int32 {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ovn-controller.pid"), fmt.Appendf(nil, "%d\n", pid), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, fmt.Sprintf("ovn-controller.%d.ctl", pid)))
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var req struct{ ID json.RawMessage }
			if json.NewDecoder(c).Decode(&req) == nil {
				asked.Add(1)
				b, _ := json.Marshal(map[string]any{"id": req.ID, "error": nil, "result": reply})
				_, _ = c.Write(b)
			}
			_ = c.Close()
		}
	}()
	return &asked
}

// TestOVNControllerAsks: the reasons status gives without a version, and
// an answer kept for ovnAskEvery unless another process took the pidfile.
func TestOVNControllerAsks(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	missing := filepath.Join(t.TempDir(), "ovn")
	if got := newOVNController(missing, log).status(ctx); got.GetReason() !=
		"not asked: --ovn-rundir "+missing+" is not a directory (no OVN on this node?)" {
		t.Fatalf("missing rundir: %v", got)
	}

	dir, err := os.MkdirTemp("", "ovn") // short: a socket path fits sockaddr_un
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	o := newOVNController(dir, log)
	fakeOVNController(t, dir, 41, "something else 1.0\n")
	if got := o.status(ctx); got.GetVersion() != "" ||
		got.GetReason() != `pid 41 answered version with "something else 1.0", not "ovn-controller VERSION"` {
		t.Fatalf("another daemon's answer: %v", got)
	}

	asked := fakeOVNController(t, dir, 42, "ovn-controller 25.03.0\nOpen vSwitch Library 3.5.0\n")
	for range 3 {
		if got := o.status(ctx); got.GetVersion() != "25.03.0" || got.GetReply() != "ovn-controller 25.03.0\nOpen vSwitch Library 3.5.0" {
			t.Fatalf("status %v", got)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("asked %d times within %v, want once", n, ovnAskEvery)
	}
	if !strings.HasSuffix(o.status(ctx).GetSocket(), "/ovn-controller.42.ctl") {
		t.Fatalf("socket %q", o.status(ctx).GetSocket())
	}
}
