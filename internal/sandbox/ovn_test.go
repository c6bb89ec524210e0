package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestOVNProgramsBridge runs the real OVN control plane against the
// sandbox's vswitchd: the baseline that an OpenFlow proxy in front of br-int
// must reproduce. The topology is the size the proxy's tests use.
func TestOVNProgramsBridge(t *testing.T) {
	_, s := newSandbox(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	o, err := s.StartOVN(ctx)
	if err != nil {
		t.Fatalf("start OVN: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("close OVN: %v", err)
		}
	})
	if err := o.StartController(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := waitSocket(ctx, s.MgmtPath(OVNBridge), nil); err != nil {
		t.Fatalf("ovn-controller did not create %s: %v", OVNBridge, err)
	}
	net, err := o.BuildTopology(ctx, Topology{Switches: 4, PortsPerSwitch: 50, ACLs: 100, LoadBalancers: 50, Meters: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatalf("ovn-nbctl --wait=hv sync: %v\n%s", err, tailFile(o.ControllerLog(), 20))
	}

	flows, err := s.DumpFlows(ctx, OVNBridge)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := s.DumpGroups(ctx, OVNBridge)
	if err != nil {
		t.Fatal(err)
	}
	meters, err := s.DumpMeters(ctx, OVNBridge)
	if err != nil {
		t.Fatal(err)
	}
	tlv, err := s.Ofctl(ctx, "dump-tlv-map", OVNBridge)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("br-int: %d flows, %d groups, %d meter lines", len(flows), len(groups), len(meters))
	// The floor, not the exact figure: OVN's output varies between
	// releases. 200 ports alone give several flows each.
	if len(flows) < 2000 {
		t.Errorf("br-int holds %d flows, want over 2000 for 200 ports, 100 ACLs and 50 load balancers", len(flows))
	}
	if len(groups) < 50 {
		t.Errorf("br-int holds %d groups, want one per load balancer (50)", len(groups))
	}
	if len(meters) == 0 {
		t.Error("br-int holds no meters, want the ACL log meters")
	}
	if !strings.Contains(tlv, "tun_metadata0") {
		t.Errorf("no geneve TLV mapping for tun_metadata0:\n%s", tlv)
	}

	src, dst := net.Ports[0], net.Ports[1]
	if got := forwarded(ctx, t, s, src, dst, 80); !got {
		t.Errorf("SYN %s -> %s:80 was not forwarded", src.IP, dst.IP)
	}
	d := net.Denied[0]
	from := net.Ports[0]
	if from.Name == d.Port.Name {
		from = net.Ports[1]
	}
	if got := forwarded(ctx, t, s, from, d.Port, d.TCPPort); got {
		t.Errorf("SYN %s -> %s:%d was forwarded although a drop ACL covers it", from.IP, d.Port.IP, d.TCPPort)
	}
}

// forwarded injects a SYN from src to dst:port on br-int and reports
// whether dst's interface sent it. vswitchd handles the packet within the
// injecting call, so the counter is read right after.
func forwarded(ctx context.Context, t *testing.T, s *Sandbox, src, dst OVNPort, port uint16) bool {
	t.Helper()
	_, before, err := s.PortStats(ctx, OVNBridge, dst.Name)
	if err != nil {
		t.Fatal(err)
	}
	p := Packet{SrcMAC: src.MAC, DstMAC: dst.MAC, SrcIP: src.IP, DstIP: dst.IP, DstPort: port}
	if err := s.InjectSYN(ctx, OVNBridge, src.Name, p); err != nil {
		t.Fatal(err)
	}
	_, after, err := s.PortStats(ctx, OVNBridge, dst.Name)
	if err != nil {
		t.Fatal(err)
	}
	return after > before
}
