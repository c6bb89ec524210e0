package ofproxy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestTestController10LeftAlone: ovs-testcontroller speaking OpenFlow 1.0
// through flowstated's proxy installs two permanent flows from a file, one
// whose ofp10_match the proxy does not translate (kept by table and
// priority) and a match-all one (kept by identity). Audits and a Reconcile
// leave both, the first forwards port 1 to port 2, and status counts them.
func TestTestController10LeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := exec.LookPath("ovs-testcontroller")
	if err != nil {
		t.Fatal("ovs-testcontroller not found: apt-get update && apt-get install -y openvswitch-testcontroller")
	}
	const bridge = "br0"
	e := testenv.New(ctx, t, testenv.Bridges(bridge), testenv.Configure(func(c *server.Config) {
		c.Bridges = []string{bridge}
		c.Proxies = []server.ProxySpec{{Module: "tc10", Bridge: bridge}}
		c.AuditInterval = 200 * time.Millisecond
	}))
	s := e.Sandbox
	p1, p2 := bridge+"-p1", bridge+"-p2"
	if _, err := s.Vsctl(ctx, "set", "Bridge", bridge, "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	e.WaitConverged(ctx)
	dir, err := os.MkdirTemp("", "tc10")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	flowsFile := filepath.Join(dir, "flows")
	if err := os.WriteFile(flowsFile, []byte("priority=100,in_port=1,actions=output:2\npriority=7,actions=drop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-O", "OpenFlow10", "--with-flows", flowsFile, "--log-file="+filepath.Join(dir, "tc.log"),
		"-vconsole:off", "--unixctl="+filepath.Join(dir, "tc.ctl"), "unix:"+e.ProxySocket(bridge))
	cmd.Env = s.Env()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	theirs := func() (n int, flows []string) {
		flows, err := s.DumpFlows(ctx, bridge)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			if strings.Contains(f, "priority=100,in_port=1") || strings.Contains(f, "priority=7 ") {
				n++
			}
		}
		return n, flows
	}
	poll(ctx, t, "ovs-testcontroller's two flows on br0", func() (bool, error) {
		n, _ := theirs()
		return n == 2, nil
	})
	if _, err := e.Client.Reconcile(ctx, bridge); err != nil {
		t.Fatal(err)
	}
	audited := time.Now().Add(time.Second)
	poll(ctx, t, "a second of audits", func() (bool, error) { return time.Now().After(audited), nil })
	if n, flows := theirs(); n != 2 {
		t.Fatalf("br0 after audits and a replay: %d of ovs-testcontroller's 2 flows:\n%s", n, strings.Join(flows, "\n"))
	}
	poll(ctx, t, "status counting the two flows as left alone", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && st.Bridges[0].LeftAlone == 2, err
	})
	_, before, err := s.PortStats(ctx, bridge, p2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InjectSYN(ctx, bridge, p1, sandbox.Packet{SrcMAC: "50:54:00:00:10:01", DstMAC: "50:54:00:00:10:02",
		SrcIP: "10.10.0.2", DstIP: "10.10.0.3"}); err != nil {
		t.Fatal(err)
	}
	if _, after, err := s.PortStats(ctx, bridge, p2); err != nil || after != before+1 {
		t.Fatalf("a packet in %s: %s sent %d packets (%v), want 1", p1, p2, after-before, err)
	}
}
