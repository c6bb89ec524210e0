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
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofproxy"
)

// TestTestControllerThroughProxy: Open vSwitch's own learning-switch
// controller, connected to the proxy as an active client of br0.mgmt, gets
// its packet-ins and installs its table-miss and learned (idle-timeout)
// flows through the proxy, and traffic is switched by them.
//
// Recording, the table-miss flow is recorded and the learned flows, which
// expire, pass through unrecorded.
func TestTestControllerThroughProxy(t *testing.T) {
	t.Run("relay", func(t *testing.T) { testTestController(t, false) })
	t.Run("recording", func(t *testing.T) { testTestController(t, true) })
}

func testTestController(t *testing.T, recording bool) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	bin, err := exec.LookPath("ovs-testcontroller")
	if err != nil {
		t.Fatal("ovs-testcontroller not found: apt-get update && apt-get install -y openvswitch-testcontroller")
	}
	s := startSandbox(ctx, t)
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Vsctl(ctx, "set", "Bridge", "br0", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p1", "p2"} {
		if err := s.AddPort(ctx, "br0", p, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Ofctl(ctx, "del-flows", "br0"); err != nil {
		t.Fatal(err)
	}
	var (
		p   *ofproxy.Proxy
		rec *switchRecorder
	)
	if recording {
		p, rec = startRecordingProxy(t, s, "br0")
	} else {
		p = startProxy(t, s, "br0")
	}

	logf := filepath.Join(t.TempDir(), "testcontroller.log")
	cmd := exec.Command(bin, "-O", "OpenFlow15", "--log-file="+logf, "-vconsole:off",
		"--unixctl="+filepath.Join(filepath.Dir(p.Addr()), "tc.ctl"), "unix:"+p.Addr())
	cmd.Env = s.Env()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	// The table-miss flow comes first, installed at connect.
	waitFlows(ctx, t, s, "br0", func(flows []string) bool {
		for _, f := range flows {
			if strings.Contains(f, "priority=0") && strings.Contains(f, "CONTROLLER") {
				return true
			}
		}
		return false
	})

	h1 := sandbox.Packet{SrcMAC: "50:54:00:00:00:01", DstMAC: "50:54:00:00:00:02", SrcIP: "10.0.0.1", DstIP: "10.0.0.2"}
	h2 := sandbox.Packet{SrcMAC: h1.DstMAC, DstMAC: h1.SrcMAC, SrcIP: h1.DstIP, DstIP: h1.SrcIP, SrcPort: 80, DstPort: 40000}
	// h1's first packet is flooded by a packet-out (its destination is not
	// learned yet); h2's answer is to a learned MAC: a flow with an idle
	// timeout is installed, and the packet goes out of p1.
	if err := s.InjectSYN(ctx, "br0", "p1", h1); err != nil {
		t.Fatal(err)
	}
	_, p1Before, err := s.PortStats(ctx, "br0", "p1")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.InjectSYN(ctx, "br0", "p2", h2); err != nil {
			t.Fatal(err)
		}
		_, p1After, err := s.PortStats(ctx, "br0", "p1")
		if err != nil {
			t.Fatal(err)
		}
		if p1After > p1Before {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf)
			t.Fatalf("h2's packet to h1 never left p1 through the learning controller behind the proxy\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFlows(ctx, t, s, "br0", func(flows []string) bool {
		for _, f := range flows {
			if strings.Contains(f, "idle_timeout=") && strings.Contains(f, "dl_dst=50:54:00:00:00:01") {
				return true
			}
		}
		return false
	})
	if p.Stats().ByType(ofproxy.ToController)["PACKET_IN"] == 0 {
		t.Errorf("no packet-in reached the controller through the proxy: %v", p.Stats().ByType(ofproxy.ToController))
	}
	if !recording {
		return
	}
	msgs, _ := rec.recorded()
	var recorded []string
	for _, m := range msgs {
		f, err := ofctl.FormatFlowMod(m)
		if err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, f)
	}
	if len(recorded) != 1 || !strings.Contains(recorded[0], "CONTROLLER") {
		t.Errorf("recorded %q, want the table-miss flow alone (learned flows expire: not state)", recorded)
	}
}

func waitFlows(ctx context.Context, t *testing.T, s *sandbox.Sandbox, bridge string, ok func([]string) bool) {
	t.Helper()
	var flows []string
	for {
		var err error
		if flows, err = s.DumpFlows(ctx, bridge); err != nil {
			t.Fatal(err)
		}
		if ok(flows) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("flows of %s never matched: %v\n%s", bridge, ctx.Err(), strings.Join(flows, "\n"))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
