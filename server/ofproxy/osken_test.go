package ofproxy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestOSKenThroughFlowstated: an os-ken app (testdata/osken_pipeline.py, an
// unmodified os-ken controller speaking OpenFlow 1.5) dials flowstated's
// proxy over loopback TCP (--openflow-proxy-tcp, os-ken's
// --ofp-switch-address-list) and installs a meter, a group and flows that
// use them. They are recorded as its module and on the switch; with the
// app stopped, a plain vswitchd restart gets them back from flowstated.
func TestOSKenThroughFlowstated(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := exec.LookPath("osken-manager")
	if err != nil {
		t.Fatal("osken-manager not found: apt-get update && apt-get install -y python3-os-ken")
	}
	const bridge, module = "br-int", "osken"
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
		c.Proxies = []server.ProxySpec{{Module: module, Bridge: bridge, TCP: "127.0.0.1:0"}}
		c.RearmFlowRestoreWait = true
	}))
	s := e.Sandbox
	if _, err := s.Vsctl(ctx, "set", "Bridge", bridge, "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	e.WaitConverged(ctx)
	st, err := e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Proxies) != 1 || st.Proxies[0].TCPListen == "" {
		t.Fatalf("status proxies: %+v, want one with a tcp address", st.Proxies)
	}
	addr := st.Proxies[0].TCPListen

	app, err := filepath.Abs(filepath.Join("testdata", "osken_pipeline.py"))
	if err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(t.TempDir(), "osken.log")
	// It also listens, as os-ken always does: on a port of its own, on
	// loopback, so that parallel runs do not meet.
	cmd := exec.Command(bin, "--ofp-switch-address-list", addr, "--ofp-switch-connect-interval", "1",
		"--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", "0", "--log-file", logf, app)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	tail := func() string {
		b, _ := os.ReadFile(logf)
		return string(b)
	}

	// 11 flows, the group and the meter, recorded as the app's module.
	poll(ctx, t, "the os-ken app's pipeline recorded", func() (bool, error) {
		es, err := e.Client.List(ctx, client.Filter{Bridge: bridge, Module: module})
		return len(es) == 13, err
	})
	dump := func() (flows, groups, meters []string) {
		var err error
		if flows, err = s.DumpFlows(ctx, bridge); err != nil {
			t.Fatal(err)
		}
		if groups, err = s.DumpGroups(ctx, bridge); err != nil {
			t.Fatal(err)
		}
		if meters, err = s.DumpMeters(ctx, bridge); err != nil {
			t.Fatal(err)
		}
		return flows, groups, meters
	}
	f0, g0, m0 := dump()
	if len(f0) != 11 || len(g0) != 1 || len(m0) != 1 {
		t.Fatalf("br-int after the os-ken app's install: %d flows, %d groups, %d meters, want 11, 1, 1\n%s\nos-ken log:\n%s",
			len(f0), len(g0), len(m0), strings.Join(f0, "\n"), tail())
	}
	if cs, err := e.Client.Diff(ctx, bridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff after the os-ken install: %d changes, %v", len(cs), err)
	}
	if st, err = e.Client.Status(ctx); err != nil || st.Proxies[0].Connections < 1 {
		t.Fatalf("status: %+v, %v: want the app's connection", st.Proxies, err)
	}

	// The app stopped, vswitchd restarted plainly: flowstated restores it.
	stop()
	restarted := time.Now()
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "br-int restored and released", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		if err != nil {
			return false, nil
		}
		return st.Bridges[0].Converged && st.LastRelease.After(restarted), nil
	})
	t.Logf("restored and released %v after the restart began", time.Since(restarted).Round(time.Millisecond))
	f1, g1, m1 := dump()
	if !slices.Equal(f0, f1) || !slices.Equal(g0, g1) || !slices.Equal(m0, m1) {
		t.Fatalf("br-int after the restart differs:\nflows %q\nwant  %q\ngroups %q want %q\nmeters %q want %q", f1, f0, g1, g0, m1, m0)
	}
}
