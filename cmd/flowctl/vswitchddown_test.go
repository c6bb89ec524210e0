package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestVswitchdDownSaysWhy: diff and reconcile with ovs-vswitchd stopped name
// the cause (vswitchd is not running) and the next step, not only
// "not connected: unavailable".
func TestVswitchdDownSaysWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	srv := e.Config.Listen
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "wait"); code != 0 {
		t.Fatal(stderr)
	}
	if err := e.Sandbox.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(ctx, t, "br-int disconnected", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && len(st.Bridges) == 1 && !st.Bridges[0].Connected, err
	})
	for _, cmd := range []string{"diff", "reconcile"} {
		_, stderr, code := flowctl(ctx, "", "--server", srv, cmd)
		if code != 1 || !strings.Contains(stderr, "bridge br-int is not connected: ovs-vswitchd is not running (no pidfile ") ||
			!strings.Contains(stderr, "start ovs-vswitchd; flowstated restores the bridge when it comes back") {
			t.Errorf("%s with vswitchd down: exit %d\n%s", cmd, code, stderr)
		}
	}
}
