package ofproxy_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ofproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func startSandbox(ctx context.Context, t testing.TB) *sandbox.Sandbox {
	t.Helper()
	s, err := sandbox.Start(ctx, sandbox.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	return s
}

// startProxy serves a proxy for bridge in a directory of its own.
func startProxy(t testing.TB, s *sandbox.Sandbox, bridge string) *ofproxy.Proxy {
	t.Helper()
	return startProxyWith(t, s, bridge, nil)
}

// startProxyWith serves a proxy for bridge that hands state changes to rec
// (nil: relay only).
func startProxyWith(t testing.TB, s *sandbox.Sandbox, bridge string, rec ofproxy.Recorder) *ofproxy.Proxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "ofp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := ofproxy.Listen(ofproxy.Config{
		Bridge:   bridge,
		Listen:   filepath.Join(dir, bridge+".mgmt"),
		Upstream: s.MgmtPath(bridge),
		Logger:   testLogger(t),
		Recorder: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

var topology = sandbox.Topology{Switches: 4, PortsPerSwitch: 50, ACLs: 100, LoadBalancers: 50, Meters: 4}

// state is what the switch holds for br-int, as sorted dumps without
// counters, and with group and meter ids replaced by placeholders:
// ovn-controller allocates those as it meets them.
type state struct{ flows, groups, meters, tlv []string }

var unstable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`group(_id=|:)\d+`), "group${1}G"},
	{regexp.MustCompile(`meter(_id=|=|:)\d+`), "meter${1}M"},
}

func normalize(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		for _, u := range unstable {
			l = u.re.ReplaceAllString(l, u.with)
		}
		out[i] = l
	}
	slices.Sort(out)
	return out
}

func switchState(ctx context.Context, t *testing.T, s *sandbox.Sandbox) state {
	t.Helper()
	return normalized(rawState(ctx, t, s))
}

// diffLines compares two sorted multisets.
func diffLines(a, b []string) (onlyA, onlyB []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return onlyA, onlyB
}

// stateDiff describes how two states differ, or is "" when they do not.
func stateDiff(direct, proxied state) string {
	var d []string
	for _, k := range []struct {
		name string
		a, b []string
	}{{"flows", direct.flows, proxied.flows}, {"groups", direct.groups, proxied.groups}, {"meters", direct.meters, proxied.meters}, {"TLV mappings", direct.tlv, proxied.tlv}} {
		onlyA, onlyB := diffLines(k.a, k.b)
		if len(onlyA)+len(onlyB) > 0 {
			d = append(d, fmt.Sprintf("%s: %d only direct, %d only through the proxy; first: %q / %q",
				k.name, len(onlyA), len(onlyB), first(onlyA), first(onlyB)))
		}
	}
	return strings.Join(d, "\n")
}

func first(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return l[0]
}

// forwarded injects a SYN from src to dst:port and reports whether dst's
// interface sent it.
func forwarded(ctx context.Context, t *testing.T, s *sandbox.Sandbox, src, dst sandbox.OVNPort, port uint16) bool {
	t.Helper()
	_, before, err := s.PortStats(ctx, sandbox.OVNBridge, dst.Name)
	if err != nil {
		t.Fatal(err)
	}
	p := sandbox.Packet{SrcMAC: src.MAC, DstMAC: dst.MAC, SrcIP: src.IP, DstIP: dst.IP, DstPort: port}
	if err := s.InjectSYN(ctx, sandbox.OVNBridge, src.Name, p); err != nil {
		t.Fatal(err)
	}
	_, after, err := s.PortStats(ctx, sandbox.OVNBridge, dst.Name)
	if err != nil {
		t.Fatal(err)
	}
	return after > before
}

// TestOVNThroughProxy: an unmodified ovn-controller, pointed at the proxy
// by OVS_RUNDIR alone, programs br-int exactly as it does when connected
// directly; after a vswitchd restart the proxy drops its connections as
// vswitchd would, and ovn-controller reconnects and reinstalls through it.
//
// Both installs come from one OVN deployment, so cookies (southbound UUIDs),
// tunnel keys and conntrack zones are the same; ovn-controller allocates
// group and meter ids anew when it starts, so those are compared by content.
func TestOVNThroughProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	s := startSandbox(ctx, t)
	addIntegrationBridge(ctx, t, s)
	p := startProxy(t, s, sandbox.OVNBridge)
	o, topo, want := installDirect(ctx, t, s)
	if len(want.tlv) == 0 {
		t.Fatal("ovn-controller mapped no geneve TLV (tun_metadata0)")
	}
	if p.Stats().Accepted.Load() != 0 {
		t.Fatal("a connection went through the proxy while ovn-controller was connected directly")
	}

	// Empty the bridge, so that what it holds next was installed through
	// the proxy.
	reinstallThrough(ctx, t, s, o, p)
	got := switchState(ctx, t, s)
	t.Logf("direct: %d flows, %d groups, %d meter lines; through the proxy: %d, %d, %d; messages relayed: %d to the switch, %d to the controller",
		len(want.flows), len(want.groups), len(want.meters), len(got.flows), len(got.groups), len(got.meters),
		p.Stats().Messages[ofproxy.ToSwitch].Load(), p.Stats().Messages[ofproxy.ToController].Load())
	if p.Stats().Accepted.Load() == 0 {
		t.Fatal("ovn-controller synced, but no connection went through the proxy")
	}
	// ovn-controller's install, as the capture saw it: bundles of
	// flow and group mods, meters outside them, the TLV mapping, barriers.
	toSwitch, toController := p.Stats().ByType(ofproxy.ToSwitch), p.Stats().ByType(ofproxy.ToController)
	t.Logf("to the switch: %v; to the controller: %v", toSwitch, toController)
	for _, k := range []string{"HELLO", "BUNDLE_CONTROL", "BUNDLE_ADD_MESSAGE", "METER_MOD", "BARRIER_REQUEST", "NXT_TLV_TABLE_MOD", "NXT_SET_PACKET_IN_FORMAT"} {
		if toSwitch[k] == 0 {
			t.Errorf("no %s relayed to the switch: %v", k, toSwitch)
		}
	}
	for _, k := range []string{"HELLO", "BUNDLE_CONTROL", "BARRIER_REPLY"} {
		if toController[k] == 0 {
			t.Errorf("no %s relayed to the controller: %v", k, toController)
		}
	}
	if d := stateDiff(want, got); d != "" {
		t.Errorf("br-int installed through the proxy differs from the direct install:\n%s", d)
	}

	ports, denied := topo.Ports, topo.Denied[0]
	if !forwarded(ctx, t, s, ports[0], ports[1], 80) {
		t.Errorf("SYN %s -> %s:80 was not forwarded", ports[0].IP, ports[1].IP)
	}
	from := ports[0]
	if from.Name == denied.Port.Name {
		from = ports[1]
	}
	if forwarded(ctx, t, s, from, denied.Port, denied.TCPPort) {
		t.Errorf("SYN to %s:%d was forwarded although a drop ACL covers it", denied.Port.IP, denied.TCPPort)
	}

	// The dropped SYN hit a logged ACL: its packet-in reached ovn-controller
	// through the proxy, which logs it.
	logged := false
	for !logged && ctx.Err() == nil {
		b, err := os.ReadFile(o.ControllerLog())
		if err != nil {
			t.Fatal(err)
		}
		logged = strings.Contains(string(b), `name="deny0", verdict=drop`)
		if !logged {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !logged {
		t.Error("ovn-controller never logged the ACL hit of the dropped SYN: its packet-in did not reach it through the proxy")
	}

	accepted := p.Stats().Accepted.Load()
	took := restartAndReinstall(ctx, t, s, want)
	t.Logf("ovn-controller reinstalled br-int through the proxy %v after the vswitchd restart", took)
	if got := p.Stats().Accepted.Load(); got <= accepted {
		t.Errorf("after the vswitchd restart no new connection came through the proxy (accepted %d, before %d)", got, accepted)
	}
}

// hello is an OpenFlow 1.5 HELLO without elements.
func hello(xid uint32) []byte { return header(0, 8, xid) }

func header(typ uint8, length uint16, xid uint32) []byte {
	b := make([]byte, 8)
	b[0], b[1] = 6, typ
	binary.BigEndian.PutUint16(b[2:4], length)
	binary.BigEndian.PutUint32(b[4:8], xid)
	return b
}

// echo sends an ECHO_REQUEST on c and waits for the reply with its xid,
// skipping anything else (the switch's HELLO).
func echo(t *testing.T, c net.Conn, xid uint32, deadline time.Duration) error {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(deadline)); err != nil {
		return err
	}
	if _, err := c.Write(header(2, 8, xid)); err != nil {
		return err
	}
	for {
		m, err := ofconn.ReadMessage(c)
		if err != nil {
			return err
		}
		if m[1] == 3 && binary.BigEndian.Uint32(m[4:8]) == xid {
			return nil
		}
	}
}

func dialProxy(t *testing.T, p *ofproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(hello(1)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRefusesWithoutUpstream: while vswitchd's socket does not accept, a
// controller's connection is closed at once instead of hanging, and is
// relayed again once vswitchd is back.
func TestRefusesWithoutUpstream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := startSandbox(ctx, t)
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, s, "br0")
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// Closed at once: EOF, or a reset because the HELLO was never read.
	if _, err := ofconn.ReadMessage(c); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read from a proxy without vswitchd: %v, want the connection closed at once", err)
	}
	if got := p.Stats().Refused.Load(); got != 1 {
		t.Errorf("refused %d connections, want 1", got)
	}
	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := echo(t, dialProxy(t, p), 7, 5*time.Second); err != nil {
		t.Fatalf("echo through the proxy after vswitchd came back: %v", err)
	}
}

// TestGarbageAndFlood: a client that sends a frame shorter than a header
// loses its connection, as with vswitchd; a client that floods the proxy
// and never reads slows down only itself.
func TestGarbageAndFlood(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := startSandbox(ctx, t)
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, s, "br0")

	bad := dialProxy(t, p)
	if _, err := bad.Write(header(14, 4, 9)); err != nil {
		t.Fatal(err)
	}
	if err := bad.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := ofconn.ReadMessage(bad)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("garbage client: %v, want the connection closed", err)
		}
	}

	flood := dialProxy(t, p)
	stopFlood := make(chan struct{})
	flooded := make(chan error, 1)
	go func() {
		// Echo requests whose replies are never read: vswitchd's replies
		// back up into this client's own connection.
		burst := make([]byte, 0, 8*512)
		for i := range 512 {
			burst = append(burst, header(2, 8, uint32(100+i))...)
		}
		for {
			select {
			case <-stopFlood:
				flooded <- nil
				return
			default:
			}
			if err := flood.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				flooded <- err
				return
			}
			if _, err := flood.Write(burst); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue // the flooder is backed up: that is the point
				}
				flooded <- err
				return
			}
		}
	}()
	// Let the flood fill every buffer on its path before measuring.
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Messages[ofproxy.ToSwitch].Load() < 20_000 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := echo(t, dialProxy(t, p), 42, 5*time.Second); err != nil {
		t.Fatalf("echo of a second client during the flood: %v", err)
	}
	t.Logf("second client's echo round trip during the flood: %v (%d messages relayed to the switch)", time.Since(start), p.Stats().Messages[ofproxy.ToSwitch].Load())
	close(stopFlood)
	if err := <-flooded; err != nil {
		t.Fatalf("flooder: %v", err)
	}
}

// addIntegrationBridge creates br-int as a CNI's installer does, so that a
// proxy has an upstream before ovn-controller starts.
func addIntegrationBridge(ctx context.Context, t *testing.T, s *sandbox.Sandbox) {
	t.Helper()
	if _, err := s.Vsctl(ctx, "--may-exist", "add-br", sandbox.OVNBridge, "--", "set", "Bridge", sandbox.OVNBridge,
		"fail_mode=secure", "datapath_type=dummy"); err != nil {
		t.Fatal(err)
	}
}

// restartAndReinstall restarts vswitchd plainly and waits (30 s at most)
// until ovn-controller, reconnected through the proxy after its backoff
// (its old connections closed with vswitchd's), has installed want again.
func restartAndReinstall(ctx context.Context, t *testing.T, s *sandbox.Sandbox, want state) time.Duration {
	t.Helper()
	restarted := time.Now()
	if err := s.RestartVswitchd(ctx, false); err != nil {
		t.Fatal(err)
	}
	var d string
	for {
		d = stateDiff(want, switchState(ctx, t, s))
		if d == "" || ctx.Err() != nil || time.Since(restarted) > 30*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d != "" {
		t.Fatalf("30 s after a vswitchd restart, br-int still differs from the direct install:\n%s", d)
	}
	return time.Since(restarted).Round(time.Millisecond)
}

// installDirect starts OVN on s with ovn-controller connected to vswitchd
// directly, builds the test topology and returns what br-int then holds.
func installDirect(ctx context.Context, t *testing.T, s *sandbox.Sandbox) (*sandbox.OVN, *sandbox.Network, state) {
	t.Helper()
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
	topo, err := o.BuildTopology(ctx, topology)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatalf("ovn-nbctl --wait=hv sync, direct: %v", err)
	}
	return o, topo, switchState(ctx, t, s)
}

// reinstallThrough empties br-int and restarts ovn-controller pointed at
// p, so that what br-int holds next was installed through the proxy; it
// returns once a change made after the restart is synced (and undone).
func reinstallThrough(ctx context.Context, t *testing.T, s *sandbox.Sandbox, o *sandbox.OVN, p *ofproxy.Proxy) {
	t.Helper()
	if err := o.StopController(ctx); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"del-flows", "del-groups", "del-meters", "del-tlv-map"} {
		if _, err := s.Ofctl(ctx, cmd, sandbox.OVNBridge); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.StartController(ctx, filepath.Dir(p.Addr())); err != nil {
		t.Fatal(err)
	}
	for _, change := range [][]string{{"ls-add", "sw-proxied"}, {"ls-del", "sw-proxied"}} {
		if _, err := o.Nbctl(ctx, change...); err != nil {
			t.Fatal(err)
		}
		if err := o.Sync(ctx); err != nil {
			t.Fatalf("ovn-nbctl --wait=hv sync through the proxy: %v\n%s", err, tail(o.ControllerLog()))
		}
	}
}
