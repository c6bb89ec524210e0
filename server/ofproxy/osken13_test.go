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
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestOSKen13LeftAlone: an os-ken app that speaks only OpenFlow 1.3
// (testdata/osken_of13.py) dials flowstated's proxy, which relays it
// without recording it, and installs a meter, a group and two permanent
// flows (in_port=1 through the group to port 2). Audits every 200 ms, a
// Reconcile and Diff leave them on the switch (plain OVS keeps them): the
// flow still forwards a packet from port 1 to port 2, and status counts
// the four entries as left alone, not restored. The engine's own work goes
// on beside them: a module's declared flow stays, and a default NORMAL
// flow put back by hand, which nobody declared, is deleted at the replay.
func TestOSKen13LeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := exec.LookPath("osken-manager")
	if err != nil {
		t.Fatal("osken-manager not found: apt-get update && apt-get install -y python3-os-ken")
	}
	const bridge, module = "br0", "osken13"
	e := testenv.New(ctx, t, testenv.Bridges(bridge), testenv.Configure(func(c *server.Config) {
		c.Bridges = []string{bridge}
		c.Proxies = []server.ProxySpec{{Module: module, Bridge: bridge, TCP: "127.0.0.1:0"}}
		c.AuditInterval = 200 * time.Millisecond
	}))
	s := e.Sandbox
	p1, p2 := bridge+"-p1", bridge+"-p2" // ofports 1 and 2
	if _, err := s.Vsctl(ctx, "set", "Bridge", bridge, "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	e.WaitConverged(ctx)
	declared := "table=0,priority=50,in_port=2,tcp,actions=drop"
	if _, err := e.Client.Put(ctx, client.Module{Bridge: bridge, Name: "pipeline"}, client.FlowText(declared)); err != nil {
		t.Fatal(err)
	}
	st, err := e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr := st.Proxies[0].TCPListen

	app, err := filepath.Abs(filepath.Join("testdata", "osken_of13.py"))
	if err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(t.TempDir(), "osken.log")
	cmd := exec.Command(bin, "--ofp-switch-address-list", addr, "--ofp-switch-connect-interval", "1",
		"--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", "0", "--log-file", logf, app)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	tail := func() string {
		b, _ := os.ReadFile(logf)
		return string(b)
	}
	appFlows := func(flows []string) int {
		n := 0
		for _, f := range flows {
			if strings.Contains(f, "cookie=0x130") {
				n++
			}
		}
		return n
	}
	flows := func() []string {
		fl, err := s.DumpFlows(ctx, bridge)
		if err != nil {
			t.Fatal(err)
		}
		return fl
	}
	poll(ctx, t, "the OpenFlow 1.3 app's flows on br0", func() (bool, error) {
		return appFlows(flows()) == 2, nil
	})
	if es, err := e.Client.List(ctx, client.Filter{Bridge: bridge, Module: module}); err != nil || len(es) != 0 {
		t.Fatalf("the OpenFlow 1.3 app's module holds %d entries (%v), want none: its session is not recorded", len(es), err)
	}
	// Vswitchd's default flow, back by hand: nobody declared it, the
	// replay deletes it as before.
	if _, err := s.Ofctl(ctx, "add-flow", bridge, "priority=0,actions=NORMAL"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.Reconcile(ctx, bridge); err != nil {
		t.Fatal(err)
	}
	// Past five audits or so.
	audited := time.Now().Add(time.Second)
	poll(ctx, t, "a second of audits", func() (bool, error) { return time.Now().After(audited), nil })
	fl := flows()
	if n := appFlows(fl); n != 2 || slices.ContainsFunc(fl, func(f string) bool { return strings.Contains(f, "NORMAL") }) ||
		!slices.ContainsFunc(fl, func(f string) bool { return strings.Contains(f, "priority=50,tcp,in_port=2") }) {
		t.Fatalf("br0 after audits and a replay: %d of the app's 2 flows, want them, the declared flow and no NORMAL:\n%s\nos-ken log:\n%s",
			n, strings.Join(fl, "\n"), tail())
	}
	for what, dump := range map[string]func(context.Context, string) ([]string, error){"group": s.DumpGroups, "meter": s.DumpMeters} {
		if got, err := dump(ctx, bridge); err != nil || len(got) != 1 {
			t.Fatalf("br0's %ss: %q, %v: want the app's one", what, got, err)
		}
	}
	// Every audit dumps the switch: one that saw the app's entries counts
	// them in status.
	poll(ctx, t, "an audit counting the app's four entries as left alone", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && st.Bridges[0].LeftAlone == 4, err
	})
	if cs, err := e.Client.Diff(ctx, bridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff: %v, %v: want none (the app's entries are left alone, not drift)", cs, err)
	}
	// It still forwards: a packet in port 1 leaves port 2 through its group.
	_, before, err := s.PortStats(ctx, bridge, p2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InjectSYN(ctx, bridge, p1, sandbox.Packet{SrcMAC: "50:54:00:00:13:01", DstMAC: "50:54:00:00:13:02",
		SrcIP: "10.13.0.2", DstIP: "10.13.0.3"}); err != nil {
		t.Fatal(err)
	}
	_, after, err := s.PortStats(ctx, bridge, p2)
	if err != nil {
		t.Fatal(err)
	}
	if after != before+1 {
		t.Fatalf("a packet in %s: %s sent %d packets, want 1 (the app's flow forwards)", p1, p2, after-before)
	}
	if st, err := e.Client.Status(ctx); err != nil || st.Bridges[0].LeftAlone != 4 || st.Bridges[0].LeftAloneAll {
		t.Fatalf("status: %+v, %v: want 4 entries left alone", st.Bridges, err)
	}
}
