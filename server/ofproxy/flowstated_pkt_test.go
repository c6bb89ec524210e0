package ofproxy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// pktTopology is small: two logical switches on lr0 (sw0 10.0.0.0/24 and
// sw1 10.1.0.0/24, router ports 10.S.0.1), three ports each, a logged drop
// ACL (deny0: TCP 1000 to p0-0, under acl-meter0) and allow-related ACLs
// on both switches, so the pipelines run conntrack as in the large
// topology.
var pktTopology = sandbox.Topology{Switches: 2, PortsPerSwitch: 3, ACLs: 3, Meters: 1}

// TestOVNPacketsThroughFlowstated: packet-ins and packet-outs between
// vswitchd and an unmodified ovn-controller pass through flowstated's
// proxy (--openflow-proxy ovn=br-int) while its flows are recorded (issue
// 23's "must show" 4):
//
//  1. acl log: a SYN a logged drop ACL covers is dropped, and its
//     packet-in reaches ovn-controller, which logs the verdict.
//  2. arp resolution: an IP packet routed by lr0 to an address of sw1's
//     subnet that no port has makes the router ask ovn-controller (a
//     packet-in, OVN's arp action); ovn-controller's ARP request, a
//     packet-out, goes out of sw1's ports. The reply, injected on a port
//     of sw1, is a packet-in again (put_arp): ovn-controller writes the
//     MAC_Binding to the southbound database and installs its flow,
//     recorded as module ovn's like the rest.
func TestOVNPacketsThroughFlowstated(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()

	e := ovnFlowstated(ctx, t)
	s := e.Sandbox
	e.Start(ctx)
	e.WaitConverged(ctx)

	o, err := s.StartOVN(ctx)
	if err != nil {
		t.Fatalf("start OVN: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("close OVN: %v", err)
		}
	})
	// Through flowstated from the start: every connection of
	// ovn-controller (ofctrl's, pinctrl's, the features and statistics
	// ones) finds br-int.mgmt in the proxy's directory.
	if err := o.StartController(ctx, e.Config.ProxyDir); err != nil {
		t.Fatal(err)
	}
	topo, err := o.BuildTopology(ctx, pktTopology)
	if err != nil {
		t.Fatal(err)
	}
	f := &ovnFixture{e: e, s: s, o: o, topo: topo, proxyDir: e.Config.ProxyDir}
	f.syncChange(ctx, t, "sw-pkt")
	if ps := f.proxyStatus(ctx, t); ps.GetConnections() < 1 || ps.GetRecordedMessages() == 0 {
		t.Fatalf("ovn-controller synced, but the proxy saw no connection or recorded nothing: %v", ps)
	}
	f.wantNoDiff(ctx, t, "after the install through the proxy")
	t.Logf("OVN installed through flowstated's proxy in %v", time.Since(start).Round(time.Millisecond))

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"acl log", func(t *testing.T) { f.aclLogPacketIn(ctx, t) }},
		{"arp resolution", func(t *testing.T) { f.arpRoundTrip(ctx, t) }},
	}
	for _, st := range steps {
		began := time.Now()
		t.Run(st.name, st.run)
		t.Logf("step %q took %v", st.name, time.Since(began).Round(time.Millisecond))
	}
	f.wantNoErrors(ctx, t, errorCount{})
	f.wantNoDiff(ctx, t, "at the end")
}

// packetIns counts the packet-ins the proxy relayed to ovn-controller (it
// asks for NXT_PACKET_IN2), and packetOuts the packet-outs it relayed to
// the switch.
func (f *ovnFixture) packetIns(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	return f.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_controller", "type": "NXT_PACKET_IN2"}) +
		f.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_controller", "type": "PACKET_IN"})
}

func (f *ovnFixture) packetOuts(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	return f.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_switch", "type": "PACKET_OUT"})
}

// aclLogPacketIn (step 1): a SYN to a port and TCP port a logged drop ACL
// covers is not forwarded, and ovn-controller logs the ACL hit, which it
// learns of only from the packet-in relayed by the proxy.
func (f *ovnFixture) aclLogPacketIn(ctx context.Context, t *testing.T) {
	denied := f.topo.Denied[0]
	var from sandbox.OVNPort
	for _, p := range f.topo.Ports {
		if p.Switch == denied.Port.Switch && p.Name != denied.Port.Name {
			from = p
			break
		}
	}
	logSize := fileSize(t, f.o.ControllerLog())
	pins := f.packetIns(ctx, t)
	if forwarded(ctx, t, f.s, from, denied.Port, denied.TCPPort) {
		t.Fatalf("SYN %s -> %s:%d was forwarded although the drop ACL deny0 covers it", from.IP, denied.Port.IP, denied.TCPPort)
	}
	var hits []string
	poll(ctx, t, "ovn-controller's log of the ACL hit", func() (bool, error) {
		hits = linesSince(t, f.o.ControllerLog(), logSize, `name="deny0", verdict=drop`)
		return len(hits) > 0, nil
	})
	t.Logf("ovn-controller logged: %s", hits[0])
	for _, want := range []string{"nw_src=" + from.IP, "nw_dst=" + denied.Port.IP, "tp_dst=" + strconv.Itoa(int(denied.TCPPort))} {
		if !strings.Contains(hits[0], want) {
			t.Errorf("the ACL log line lacks %q: %s", want, hits[0])
		}
	}
	if n := f.packetIns(ctx, t) - pins; n < 1 {
		t.Errorf("the proxy relayed %v packet-ins to ovn-controller for the dropped SYN, want at least 1", n)
	}
}

// arpRoundTrip (step 2): ARP resolution by ovn-controller's pinctrl, both
// ways through the proxy.
func (f *ovnFixture) arpRoundTrip(ctx context.Context, t *testing.T) {
	s, o := f.s, f.o
	var src, at sandbox.OVNPort // a port of sw0; the first port of sw1
	var sw1 []sandbox.OVNPort
	for _, p := range f.topo.Ports {
		switch {
		case p.Switch == "sw0" && src.Name == "" && !slices.ContainsFunc(f.topo.Denied, func(d sandbox.DeniedFlow) bool { return d.Port.Name == p.Name }):
			src = p
		case p.Switch == "sw1":
			sw1 = append(sw1, p)
		}
	}
	if src.Name == "" || len(sw1) == 0 {
		t.Fatalf("topology has no usable port on sw0 or none on sw1: %+v", f.topo.Ports)
	}
	at = sw1[0]
	gwMAC, _ := routerPort(ctx, t, o, "lr0-sw0")
	rMAC, rNet := routerPort(ctx, t, o, "lr0-sw1")
	// An address of sw1's subnet that no port has: .250.
	a4 := rNet.Masked().Addr().As4()
	a4[3] = 250
	target := netip.AddrFrom4(a4).String()
	for _, p := range f.topo.Ports {
		if p.IP == target {
			t.Fatalf("port %s has %s, the address meant to be unknown", p.Name, target)
		}
	}
	if b := macBinding(ctx, t, o, target); b != nil {
		t.Fatalf("a MAC_Binding for %s exists before anything asked for it: %s", target, b)
	}

	pcap, err := s.CaptureTx(ctx, at.Name)
	if err != nil {
		t.Fatal(err)
	}
	txBefore := make(map[string]uint64)
	for _, p := range sw1 {
		_, tx, err := s.PortStats(ctx, sandbox.OVNBridge, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		txBefore[p.Name] = tx
	}
	pins, pouts := f.packetIns(ctx, t), f.packetOuts(ctx, t)

	// To lr0's port on sw0, for target: routed to lr0-sw1, which has no
	// MAC for it.
	syn := sandbox.Packet{SrcMAC: src.MAC, DstMAC: gwMAC, SrcIP: src.IP, DstIP: target, DstPort: 80}
	if err := s.InjectSYN(ctx, sandbox.OVNBridge, src.Name, syn); err != nil {
		t.Fatal(err)
	}
	var req sandbox.ARP
	poll(ctx, t, "ovn-controller's ARP request for "+target+" out of "+at.Name, func() (bool, error) {
		arps, err := sandbox.ReadPcapARPs(pcap)
		for _, a := range arps {
			if a.Op == sandbox.ARPRequest && a.TPA == target {
				req = a
				return true, nil
			}
		}
		return false, err
	})
	t.Logf("out of %s: %s", at.Name, req)
	want := sandbox.ARP{SrcMAC: rMAC, DstMAC: "ff:ff:ff:ff:ff:ff", Op: sandbox.ARPRequest,
		SHA: rMAC, SPA: rNet.Addr().String(), THA: "00:00:00:00:00:00", TPA: target}
	if req != want {
		t.Errorf("ARP request out of %s:\n got %s\nwant %s", at.Name, req, want)
	}
	// Broadcast on sw1: every port of it sent the request.
	for _, p := range sw1 {
		_, tx, err := s.PortStats(ctx, sandbox.OVNBridge, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if tx <= txBefore[p.Name] {
			t.Errorf("port %s of sw1 sent nothing (tx %d, %d before): the ARP request was not flooded on sw1", p.Name, tx, txBefore[p.Name])
		}
	}
	// The packet-in of the arp action, and the packet-out of the request,
	// went through the proxy: ovn-controller has no other way to the
	// switch. The request left a port, so the packet-out was relayed.
	nIn, nOut := f.packetIns(ctx, t)-pins, f.packetOuts(ctx, t)-pouts
	t.Logf("the proxy relayed %v packet-ins to ovn-controller and %v packet-outs to the switch", nIn, nOut)
	if nOut < 1 {
		t.Errorf("the proxy relayed %v packet-outs to the switch, want ovn-controller's ARP request", nOut)
	}
	if nIn < 1 {
		t.Errorf("the proxy relayed %v packet-ins to ovn-controller, want the arp action's", nIn)
	}

	// The answer, from a host behind sw1's first port: learned by the
	// router (put_arp, a packet-in) and written to the southbound
	// database by ovn-controller.
	const mac = "0a:00:00:0f:0f:fa"
	pins = f.packetIns(ctx, t)
	reply := sandbox.ARP{Op: sandbox.ARPReply, SHA: mac, SPA: target, THA: rMAC, TPA: rNet.Addr().String()}
	if err := s.InjectARP(ctx, sandbox.OVNBridge, at.Name, reply); err != nil {
		t.Fatal(err)
	}
	var binding map[string]string
	poll(ctx, t, "MAC_Binding of "+target, func() (bool, error) {
		binding = macBinding(ctx, t, o, target)
		return binding != nil, nil
	})
	t.Logf("southbound MAC_Binding: %v", binding)
	if binding["mac"] != mac || binding["logical_port"] != "lr0-sw1" {
		t.Errorf("MAC_Binding of %s is %v, want mac %s on lr0-sw1", target, binding, mac)
	}
	if n := f.packetIns(ctx, t) - pins; n < 1 {
		t.Errorf("the proxy relayed %v packet-ins to ovn-controller for the ARP reply, want put_arp's", n)
	}

	// ovn-controller turns the binding into a flow (eth.dst for the next
	// hop): a FLOW_MOD like any other, recorded as module ovn's and on
	// the switch.
	setDst := "set_field:" + mac + "->eth_dst"
	has := func(l string) bool { return strings.Contains(l, setDst) }
	var recorded string
	poll(ctx, t, "the MAC binding's flow recorded and on br-int", func() (bool, error) {
		stored, err := f.e.Client.List(ctx, client.Filter{Bridge: sandbox.OVNBridge, Module: ovnModule})
		if err != nil {
			return false, err
		}
		onSwitch, err := s.DumpFlows(ctx, sandbox.OVNBridge)
		if err != nil {
			return false, err
		}
		if i := slices.IndexFunc(stored, func(e client.StoredEntry) bool { return has(e.Text) }); i >= 0 {
			recorded = stored[i].Text
		}
		return recorded != "" && slices.ContainsFunc(onSwitch, has), nil
	})
	t.Logf("module ovn's flow for the binding: %s", recorded)
	f.wantNoDiff(ctx, t, "after the MAC binding")
}

// routerPort returns a logical router port's MAC and network.
func routerPort(ctx context.Context, t *testing.T, o *sandbox.OVN, name string) (string, netip.Prefix) {
	t.Helper()
	out, err := o.Nbctl(ctx, "--bare", "--columns=mac,networks", "list", "Logical_Router_Port", name)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("router port %s: mac and networks %q, want one of each", name, out)
	}
	pfx, err := netip.ParsePrefix(f[1])
	if err != nil {
		t.Fatalf("router port %s: %v", name, err)
	}
	return f[0], pfx
}

// macBinding returns the columns logical_port, ip and mac of the
// southbound MAC_Binding of ip, from `ovn-sbctl
// --columns=logical_port,ip,mac list MAC_Binding`; nil when there is
// none.
func macBinding(ctx context.Context, t *testing.T, o *sandbox.OVN, ip string) map[string]string {
	t.Helper()
	out, err := o.Sbctl(ctx, "--columns=logical_port,ip,mac", "list", "MAC_Binding")
	if err != nil {
		t.Fatal(err)
	}
	for rec := range strings.SplitSeq(out, "\n\n") {
		cols := map[string]string{}
		for l := range strings.SplitSeq(rec, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				cols[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
		if cols["ip"] == ip {
			return cols
		}
	}
	return nil
}

// tcModule and tcBridge: ovs-testcontroller is recorded as module lswitch
// of br0.
const (
	tcModule = "lswitch"
	tcBridge = "br0"
)

// TestTestControllerThroughFlowstated: Open vSwitch's learning-switch
// controller, an active client of flowstated's proxy for br0
// (--openflow-proxy lswitch=br0, br0 in fail_mode=secure, managed by
// flowstated), through issue 23's "must show" 5:
//
//   - it installs its table-miss flow (priority=0, to the controller) at
//     connect: recorded as module lswitch's one entry;
//   - the switch's packet-ins reach it and its packet-outs and learned
//     flows reach the switch: traffic between br0's two ports is switched,
//     after learning by the flows alone;
//   - the learned flows (idle_timeout) are on the switch but not recorded,
//     and neither a Reconcile nor an audit that corrects real drift
//     touches them;
//   - after a vswitchd restart flowstated restores the table-miss flow
//     while no controller is connected (ovs-testcontroller does not
//     reconnect: without flowstated, br0 would stay empty), the learned
//     flows are gone as they would be with plain OVS, and with
//     ovs-testcontroller started again traffic learns them again.
func TestTestControllerThroughFlowstated(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := exec.LookPath("ovs-testcontroller")
	if err != nil {
		t.Fatal("ovs-testcontroller not found: apt-get update && apt-get install -y openvswitch-testcontroller")
	}
	e := testenv.New(ctx, t, testenv.Bridges(tcBridge), testenv.Configure(func(c *server.Config) {
		c.Bridges = []string{tcBridge}
		c.Proxies = []server.ProxySpec{{Module: tcModule, Bridge: tcBridge}}
		c.MetricsListen = "127.0.0.1:0"
		c.RearmFlowRestoreWait = true
		// Audits often, so that they run while learned flows are on br0.
		c.AuditInterval = 200 * time.Millisecond
	}))
	s := e.Sandbox
	p1, p2 := tcBridge+"-p1", tcBridge+"-p2" // ofports 1 and 2
	if _, err := s.Vsctl(ctx, "set", "Bridge", tcBridge, "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ofctl(ctx, "del-flows", tcBridge); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	e.WaitConverged(ctx)
	tc := &tcFixture{e: e, s: s, p1: p1, p2: p2}

	ctlDir, err := os.MkdirTemp("", "tc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ctlDir) })
	tc.start = func(t *testing.T, n int) *tcProc {
		return startTestController(t, bin, s, e.ProxySocket(tcBridge), ctlDir, n)
	}
	tc.proc = tc.start(t, 1)

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"table-miss recorded", func(t *testing.T) { tc.tableMiss(ctx, t) }},
		{"learning", func(t *testing.T) { tc.learn(ctx, t) }},
		{"learned flows not recorded", func(t *testing.T) { tc.notRecorded(ctx, t) }},
		{"vswitchd restart", func(t *testing.T) { tc.restart(ctx, t) }},
	}
	for _, st := range steps {
		began, finished := time.Now(), false
		t.Run(st.name, func(t *testing.T) {
			st.run(t)
			finished = true
		})
		t.Logf("step %q took %v", st.name, time.Since(began).Round(time.Millisecond))
		if !finished {
			t.Logf("ovs-testcontroller's log:\n%s", tail(tc.proc.log))
			return
		}
	}
	if n := tc.metric(ctx, t, "flowstate_proxy_answered_total", map[string]string{"kind": "error"}) +
		tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_controller", "type": "ERROR"}); n != 0 {
		t.Errorf("%v OFPT_ERRORs reached ovs-testcontroller through the proxy", n)
	}
}

// tcFixture is TestTestControllerThroughFlowstated's deployment.
type tcFixture struct {
	e      *testenv.Env
	s      *sandbox.Sandbox
	p1, p2 string
	proc   *tcProc                           // the running ovs-testcontroller
	start  func(t *testing.T, n int) *tcProc // starts the nth

	tableMissFlow string // as the switch dumps it
}

// tcProc is one ovs-testcontroller process.
type tcProc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed once it exited
}

// startTestController starts ovs-testcontroller as an active client of
// sock (the proxy's br0.mgmt), with testcontroller_test.go's flags; n
// names its log and control socket in dir. It is killed at cleanup.
func startTestController(t *testing.T, bin string, s *sandbox.Sandbox, sock, dir string, n int) *tcProc {
	t.Helper()
	p := &tcProc{log: filepath.Join(dir, fmt.Sprintf("testcontroller-%d.log", n)), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "-O", "OpenFlow15", "--log-file="+p.log, "-vconsole:off",
		"--unixctl="+filepath.Join(dir, fmt.Sprintf("tc%d.ctl", n)), "unix:"+sock)
	p.cmd.Env = s.Env()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// Two hosts: h1 behind p1, h2 behind p2.
var (
	tcH1 = sandbox.Packet{SrcMAC: "50:54:00:00:00:01", DstMAC: "50:54:00:00:00:02", SrcIP: "10.0.0.1", DstIP: "10.0.0.2"}
	tcH2 = sandbox.Packet{SrcMAC: tcH1.DstMAC, DstMAC: tcH1.SrcMAC, SrcIP: tcH1.DstIP, DstIP: tcH1.SrcIP, SrcPort: 80, DstPort: 40000}
)

func isTableMiss(fl string) bool {
	return strings.Contains(fl, "priority=0") && strings.Contains(fl, "CONTROLLER") && !strings.Contains(fl, "timeout=")
}

func isLearned(fl string) bool { return strings.Contains(fl, "idle_timeout=") }

// tableMiss: at connect ovs-testcontroller installs one flow, the
// table-miss flow sending every packet to it; flowstated records it as the
// module's one entry and applies it.
func (tc *tcFixture) tableMiss(ctx context.Context, t *testing.T) {
	var flows []string
	poll(ctx, t, "ovs-testcontroller's table-miss flow on br0", func() (bool, error) {
		var err error
		flows, err = tc.s.DumpFlows(ctx, tcBridge)
		return slices.ContainsFunc(flows, isTableMiss), err
	})
	t.Logf("br0 after ovs-testcontroller connected: %q", flows)
	if len(flows) != 1 {
		t.Fatalf("br0 holds %d flows, want the table-miss flow alone: %q", len(flows), flows)
	}
	tc.tableMissFlow = flows[0]
	// The switch gets a change before the store commits it (a barrier,
	// which ovs-testcontroller does not send, would wait for both).
	var stored []string
	poll(ctx, t, "the table-miss flow recorded", func() (bool, error) {
		stored = tc.stored(ctx, t)
		return len(stored) > 0, nil
	})
	if len(stored) != 1 || !isTableMiss(stored[0]) {
		t.Fatalf("module %s holds %q, want the table-miss flow alone", tcModule, stored)
	}
	st, err := tc.e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Proxies) != 1 || st.Proxies[0].Connections != 1 || st.Proxies[0].RecordedMessages == 0 {
		t.Fatalf("proxy status %+v, want ovs-testcontroller's one connection and its recorded flow", st.Proxies)
	}
	tc.wantNoDiff(ctx, t, "after the table-miss flow")
}

// learn: traffic between h1 and h2 is switched, through packet-ins first
// (h1's first packet flooded by a packet-out, h2's answer to a learned MAC
// sent by one and a flow installed), then by the learned flows alone.
func (tc *tcFixture) learn(ctx context.Context, t *testing.T) {
	s := tc.s
	pins := tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_controller", "type": "PACKET_IN"})
	pouts := tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_switch", "type": "PACKET_OUT"})
	tc.relearn(ctx, t)
	t.Logf("learned through the proxy: %v packet-ins to ovs-testcontroller, %v packet-outs to the switch",
		tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_controller", "type": "PACKET_IN"})-pins,
		tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_switch", "type": "PACKET_OUT"})-pouts)
	if n := tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_switch", "type": "PACKET_OUT"}) - pouts; n < 1 {
		t.Errorf("%v packet-outs went through the proxy while learning, want at least h1's flood", n)
	}

	// Now the switch forwards on its own: each packet counts on its
	// learned flow and leaves the other port.
	learned := tc.learnedFlows(ctx, t)
	for _, dir := range []struct {
		in, out string
		pkt     sandbox.Packet
	}{{tc.p1, tc.p2, tcH1}, {tc.p2, tc.p1, tcH2}} {
		_, txBefore, err := s.PortStats(ctx, tcBridge, dir.out)
		if err != nil {
			t.Fatal(err)
		}
		hits := tc.flowPackets(ctx, t, dir.pkt.DstMAC)
		if err := s.InjectSYN(ctx, tcBridge, dir.in, dir.pkt); err != nil {
			t.Fatal(err)
		}
		_, txAfter, err := s.PortStats(ctx, tcBridge, dir.out)
		if err != nil {
			t.Fatal(err)
		}
		if txAfter != txBefore+1 {
			t.Errorf("a packet to %s in %s: %s sent %d packets, want 1", dir.pkt.DstMAC, dir.in, dir.out, txAfter-txBefore)
		}
		if n := tc.flowPackets(ctx, t, dir.pkt.DstMAC) - hits; n != 1 {
			t.Errorf("a packet to %s in %s: its learned flow counted %d packets, want 1 (learned flows: %q)", dir.pkt.DstMAC, dir.in, n, learned)
		}
	}
}

// relearn sends h1 -> h2 and h2 -> h1 until both learned flows are on br0
// and a packet each way was delivered.
func (tc *tcFixture) relearn(ctx context.Context, t *testing.T) {
	s := tc.s
	for _, dir := range []struct {
		in, out string
		pkt     sandbox.Packet
	}{{tc.p1, tc.p2, tcH1}, {tc.p2, tc.p1, tcH2}, {tc.p1, tc.p2, tcH1}} {
		_, before, err := s.PortStats(ctx, tcBridge, dir.out)
		if err != nil {
			t.Fatal(err)
		}
		// The first packet is flooded by a packet-out, the later ones to a
		// learned MAC sent by one, each after its packet-in's round trip:
		// each is sent once and awaited.
		if err := s.InjectSYN(ctx, tcBridge, dir.in, dir.pkt); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, fmt.Sprintf("a packet to %s in %s out of %s", dir.pkt.DstMAC, dir.in, dir.out), func() (bool, error) {
			_, after, err := s.PortStats(ctx, tcBridge, dir.out)
			return after > before, err
		})
	}
	poll(ctx, t, "both learned flows on br0", func() (bool, error) {
		return len(tc.learnedFlows(ctx, t)) == 2, nil
	})
}

// notRecorded: the learned flows are on the switch, not in the store, and
// neither a Reconcile nor an audit removes them.
func (tc *tcFixture) notRecorded(ctx context.Context, t *testing.T) {
	s, e := tc.s, tc.e
	learned := tc.learnedFlows(ctx, t)
	t.Logf("learned flows on br0: %q", learned)
	if len(learned) != 2 {
		t.Fatalf("br0 holds %d learned flows, want h1's and h2's: %q", len(learned), learned)
	}
	if stored := tc.stored(ctx, t); len(stored) != 1 || !isTableMiss(stored[0]) {
		t.Errorf("module %s holds %q, want the table-miss flow alone: learned flows expire, they are not desired state", tcModule, stored)
	}
	if n := tc.metric(ctx, t, "flowstate_proxy_recorded_total", map[string]string{"type": "FLOW_MOD"}); n != 1 {
		t.Errorf("the proxy recorded %v flow mods, want the table-miss flow's alone", n)
	}
	if n := tc.metric(ctx, t, "flowstate_proxy_messages_total", map[string]string{"direction": "to_switch", "type": "FLOW_MOD"}); n < 3 {
		t.Errorf("the proxy read %v flow mods from ovs-testcontroller, want its table-miss flow and the 2 learned ones", n)
	}
	tc.wantNoDiff(ctx, t, "with learned flows on br0")

	if _, err := e.Client.Reconcile(ctx, tcBridge); err != nil {
		t.Fatal(err)
	}
	if got := tc.learnedFlows(ctx, t); !slices.Equal(got, learned) {
		t.Errorf("learned flows after a Reconcile: %q, want %q", got, learned)
	}

	// An audit that finds real drift (a flow added behind flowstated's
	// back) corrects it, and only it.
	st, err := e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drift0 := tc.bridge(st).DriftFound
	const stray = "table=0,priority=7,cookie=0x5ca7,ip,nw_dst=192.0.2.7,actions=drop"
	if _, err := s.Ofctl(ctx, "add-flow", tcBridge, stray); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the audit's correction of the stray flow", func() (bool, error) {
		flows, err := s.DumpFlows(ctx, tcBridge)
		if err != nil {
			return false, err
		}
		st, err := e.Client.Status(ctx)
		if err != nil {
			return false, err
		}
		return tc.bridge(st).DriftFound > drift0 && !slices.ContainsFunc(flows, func(l string) bool { return strings.Contains(l, "cookie=0x5ca7") }), nil
	})
	if got := tc.learnedFlows(ctx, t); !slices.Equal(got, learned) {
		t.Errorf("learned flows after the audit corrected drift: %q, want %q", got, learned)
	}
	st, err = e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := tc.bridge(st); b.DriftFound != drift0+1 {
		t.Errorf("the audits found drift %d times since the stray flow, want once (last: %v)", b.DriftFound-drift0, b.LastDrift)
	}
	tc.wantNoDiff(ctx, t, "after the audit")
}

// restart: vswitchd restarted plainly (flowstated re-armed the flag).
// The proxy closes ovs-testcontroller's connection as vswitchd's end
// would, and ovs-testcontroller does not reconnect: it connects
// "unreliably" to an address on its command line, and with plain OVS too
// it stays, disconnected, while the restarted bridge stays empty. Here
// flowstated restores the table-miss flow with no controller connected;
// the learned flows are gone, as with plain OVS. ovs-testcontroller
// started again (as its supervisor would) installs its table-miss flow
// again, which changes nothing, and traffic learns the flows again.
func (tc *tcFixture) restart(ctx context.Context, t *testing.T) {
	s, e := tc.s, tc.e
	poll(ctx, t, "flow-restore-wait re-armed", func() (bool, error) { return s.FlowRestoreWait(ctx) })
	recorded := tc.metric(ctx, t, "flowstate_proxy_recorded_total", map[string]string{"type": "FLOW_MOD"})
	stopped := time.Now()
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the proxy closed ovs-testcontroller's connection", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && len(st.Proxies) == 1 && st.Proxies[0].Connections == 0, err
	})
	if err := s.StartVswitchd(ctx); err != nil { // plain start: the re-armed flag holds it
		t.Fatal(err)
	}
	poll(ctx, t, "br0 restored and released", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && st.LastRelease.After(stopped), nil
	})
	flows, err := s.DumpFlows(ctx, tcBridge)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("br0 once flowstated released vswitchd (%d controller connections): %q", st.Proxies[0].Connections, flows)
	if !slices.Equal(flows, []string{tc.tableMissFlow}) {
		t.Errorf("br0 after the restart holds %q, want the recorded table-miss flow alone (%q): learned flows go with vswitchd", flows, tc.tableMissFlow)
	}
	tc.wantNoDiff(ctx, t, "after the vswitchd restart")

	// With no controller, a packet goes nowhere: the table-miss flow
	// sends it to a controller that is not there.
	_, before, err := s.PortStats(ctx, tcBridge, tc.p2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InjectSYN(ctx, tcBridge, tc.p1, tcH1); err != nil {
		t.Fatal(err)
	}
	if _, after, err := s.PortStats(ctx, tcBridge, tc.p2); err != nil || after != before {
		t.Errorf("with no controller, h1's packet left %s (tx %d, %d before; err %v)", tc.p2, after, before, err)
	}

	if err := tc.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-tc.proc.exited
	tc.proc = tc.start(t, 2)
	poll(ctx, t, "ovs-testcontroller's table-miss flow recorded again", func() (bool, error) {
		return tc.metric(ctx, t, "flowstate_proxy_recorded_total", map[string]string{"type": "FLOW_MOD"}) > recorded, nil
	})
	tc.relearn(ctx, t)
	t.Logf("learned again: %q", tc.learnedFlows(ctx, t))
	if stored := tc.stored(ctx, t); len(stored) != 1 || !isTableMiss(stored[0]) {
		t.Errorf("module %s holds %q after the restart and relearning, want the table-miss flow alone", tcModule, stored)
	}
	if flows, err := s.DumpFlows(ctx, tcBridge); err != nil || len(flows) != 3 || !slices.Contains(flows, tc.tableMissFlow) {
		t.Errorf("br0 after relearning holds %q (err %v), want the table-miss flow and 2 learned flows", flows, err)
	}
	tc.wantNoDiff(ctx, t, "after relearning")
}

// learnedFlows returns br0's learned flows (those with an idle timeout).
func (tc *tcFixture) learnedFlows(ctx context.Context, t *testing.T) []string {
	t.Helper()
	flows, err := tc.s.DumpFlows(ctx, tcBridge)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fl := range flows {
		if isLearned(fl) {
			out = append(out, fl)
		}
	}
	return out
}

// flowPackets is n_packets of the learned flow to dst (0 when there is
// none).
func (tc *tcFixture) flowPackets(ctx context.Context, t *testing.T, dst string) int {
	t.Helper()
	out, err := tc.s.Ofctl(ctx, "--no-names", "dump-flows", tcBridge, "dl_dst="+dst)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for l := range strings.SplitSeq(out, "\n") {
		if !isLearned(l) {
			continue
		}
		for kv := range strings.SplitSeq(strings.TrimSpace(l), ", ") {
			if v, ok := strings.CutPrefix(kv, "n_packets="); ok {
				x, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("n_packets in %q: %v", l, err)
				}
				n += x
			}
		}
	}
	return n
}

// stored returns module lswitch's entries as flowstated lists them.
func (tc *tcFixture) stored(ctx context.Context, t *testing.T) []string {
	t.Helper()
	es, err := tc.e.Client.List(ctx, client.Filter{Bridge: tcBridge, Module: tcModule})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Text
	}
	return out
}

func (tc *tcFixture) bridge(st *client.Status) client.BridgeStatus {
	for _, b := range st.Bridges {
		if b.Name == tcBridge {
			return b
		}
	}
	return client.BridgeStatus{}
}

func (tc *tcFixture) wantNoDiff(ctx context.Context, t *testing.T, when string) {
	t.Helper()
	changes, err := tc.e.Client.Diff(ctx, tcBridge)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) > 0 {
		t.Errorf("flowctl diff %s: %d changes; first: %+v", when, len(changes), changes[:min(3, len(changes))])
	}
}

// metric sums the samples of name on /metrics whose labels include want
// (bridge br0 and module lswitch always).
func (tc *tcFixture) metric(ctx context.Context, t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	return metricSum(t, tc.e.Metrics(ctx), name, tcBridge, tcModule, want)
}
