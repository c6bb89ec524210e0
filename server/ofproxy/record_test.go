package ofproxy_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ofproxy"
)

// switchRecorder is the Recorder of these tests: it applies each change to
// the real switch over a connection of its own (a bundle for flow and group
// mods, one message at a time for the others) and keeps what it applied.
// It stands in for the engine, whose source the proxy becomes.
type switchRecorder struct {
	path string

	mu      sync.Mutex
	conn    *ofconn.Conn
	applied []ofconn.Message
	changes int
}

func (r *switchRecorder) dial(ctx context.Context) (*ofconn.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		select {
		case <-r.conn.Done():
			r.conn.Close()
			r.conn = nil
		default:
			return r.conn, nil
		}
	}
	c, err := ofconn.Dial(ctx, r.path, ofconn.Options{})
	if err != nil {
		return nil, err
	}
	r.conn = c
	return c, nil
}

func bundleable(m ofconn.Message) bool {
	return m.Type() == 14 || m.Type() == 15 // FLOW_MOD, GROUP_MOD
}

func (r *switchRecorder) Apply(ctx context.Context, msgs []ofconn.Message) error {
	c, err := r.dial(ctx)
	if err != nil {
		return err
	}
	for i := 0; i < len(msgs); {
		j := i + 1
		if bundleable(msgs[i]) {
			for j < len(msgs) && bundleable(msgs[j]) {
				j++
			}
			err = c.Bundle(ctx, msgs[i:j])
		} else {
			err = c.Send(ctx, msgs[i])
		}
		var be *ofconn.BundleError
		var oe *ofconn.OFError
		switch {
		case err == nil:
		case i > 0:
			// Part of the change is applied already: only an unknown
			// outcome is true to the contract.
			return fmt.Errorf("applied %d of %d messages: %w", i, len(msgs), err)
		case errors.As(err, &be):
			for k := range be.Failed {
				if be.Failed[k].Index >= 0 {
					be.Failed[k].Index += i
				}
			}
			return be
		case errors.As(err, &oe):
			return &ofconn.BundleError{Failed: []ofconn.AddError{{Index: i, Type: oe.Type, Code: oe.Code, Experimenter: oe.Experimenter, Name: oe.Name}}}
		default:
			return err
		}
		i = j
	}
	r.mu.Lock()
	r.applied = append(r.applied, msgs...)
	r.changes++
	r.mu.Unlock()
	return nil
}

func (r *switchRecorder) recorded() (msgs []ofconn.Message, changes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ofconn.Message(nil), r.applied...), r.changes
}

func (r *switchRecorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close()
	}
}

// startRecordingProxy serves a recording proxy for bridge.
func startRecordingProxy(t testing.TB, s *sandbox.Sandbox, bridge string) (*ofproxy.Proxy, *switchRecorder) {
	t.Helper()
	rec := &switchRecorder{path: s.MgmtPath(bridge)}
	t.Cleanup(rec.close)
	return startProxyWith(t, s, bridge, rec), rec
}

// TestOVNRecorded: with a recording proxy, ovn-controller's flows, groups,
// meters and TLV mapping go to the Recorder, not to the switch, and the
// controller cannot tell: --wait=hv sync completes, the switch ends up as
// a direct install leaves it, and no OFPT_ERROR reaches the controller.
func TestOVNRecorded(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s := startSandbox(ctx, t)
	addIntegrationBridge(ctx, t, s)
	p, rec := startRecordingProxy(t, s, sandbox.OVNBridge)
	o, topo, want := installDirect(ctx, t, s)

	reinstallThrough(ctx, t, s, o, p)
	if d := stateDiff(want, switchState(ctx, t, s)); d != "" {
		t.Errorf("br-int installed through the recording proxy differs from the direct install:\n%s", d)
	}
	msgs, changes := rec.recorded()
	kinds := map[string]int{}
	for _, m := range msgs {
		kinds[ofconn.TypeName(m.Type())]++
	}
	t.Logf("recorded %d messages in %d changes: %v; the proxy answered %d messages itself (%d errors)",
		len(msgs), changes, kinds, p.Stats().Answered.Load(), p.Stats().Errors.Load())
	if kinds["FLOW_MOD"] < len(want.flows) || kinds["GROUP_MOD"] < len(want.groups) || kinds["METER_MOD"] == 0 || kinds["EXPERIMENTER"] == 0 {
		t.Errorf("recorded %v: want every flow (%d), group (%d), meter and the TLV mapping", kinds, len(want.flows), len(want.groups))
	}
	if n := p.Stats().Errors.Load(); n != 0 {
		t.Errorf("the proxy sent ovn-controller %d OFPT_ERRORs", n)
	}
	if n := p.Stats().ByType(ofproxy.ToController)["ERROR"]; n != 0 {
		t.Errorf("the switch sent ovn-controller %d OFPT_ERRORs through the proxy", n)
	}
	if strings.Contains(tail(o.ControllerLog()), "OFPT_ERROR") {
		t.Errorf("ovn-controller logged an OFPT_ERROR:\n%s", tail(o.ControllerLog()))
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

	// After a vswitchd restart ovn-controller installs everything again
	// through the proxy, and the Recorder reconnects to the new vswitchd.
	took := restartAndReinstall(ctx, t, s, want)
	t.Logf("reinstalled through the recording proxy %v after the vswitchd restart", took)
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// ofClient is a hand-driven OpenFlow 1.5 client.
type ofClient struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dialOF(ctx context.Context, t testing.TB, path string) *ofClient {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if dl, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(dl); err != nil {
			t.Fatal(err)
		}
	}
	cl := &ofClient{t: t, c: c, br: bufio.NewReader(c)}
	cl.send(hello(1))
	if m := cl.next(); m[1] != 0 {
		t.Fatalf("first message from %s: type %d, want HELLO", path, m[1])
	}
	return cl
}

func (c *ofClient) send(ms ...[]byte) {
	c.t.Helper()
	for _, m := range ms {
		if _, err := c.c.Write(m); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *ofClient) next() []byte {
	c.t.Helper()
	m, err := ofconn.ReadMessage(c.br)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// untilBarrier sends a barrier and returns everything received before its
// reply.
func (c *ofClient) untilBarrier(xid uint32) [][]byte {
	c.t.Helper()
	c.send(header(20, 8, xid))
	var got [][]byte
	for {
		m := c.next()
		if m[1] == 21 && binary.BigEndian.Uint32(m[4:8]) == xid {
			return got
		}
		got = append(got, m)
	}
}

func withXid(m []byte, xid uint32) []byte {
	m = append([]byte(nil), m...)
	binary.BigEndian.PutUint32(m[4:8], xid)
	return m
}

func bundleCtrl(xid, id uint32, typ, flags uint16) []byte {
	b := header(33, 16, xid)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, flags)
	return b
}

func bundleAdd(id uint32, flags uint16, inner []byte) []byte {
	b := header(34, uint16(16+len(inner)), binary.BigEndian.Uint32(inner[4:8]))
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, flags)
	return append(b, inner...)
}

// TestRecordedAnswersAsVswitchd drives the same conversations with
// vswitchd and with a recording proxy in front of another vswitchd, and
// requires the same answers, byte for byte: refused flows in a bundle and
// alone, bundle protocol mistakes, and a good bundle. (One answer differs
// on purpose: to a control type OpenFlow does not define, OVS 3.1 sends a
// reply of type 0; the proxy sends OFPBFC_BAD_TYPE, as the spec says.)
func TestRecordedAnswersAsVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := startSandbox(ctx, t)
	proxied := startSandbox(ctx, t)
	for _, s := range []*sandbox.Sandbox{direct, proxied} {
		if err := s.AddBridge(ctx, "br0"); err != nil {
			t.Fatal(err)
		}
	}
	p, rec := startRecordingProxy(t, proxied, "br0")

	flow := func(s string, xid uint32) []byte {
		t.Helper()
		b, err := ofctl.ParseFlowBinary(s)
		if err != nil {
			t.Fatal(err)
		}
		return withXid(b, xid)
	}
	good := flow("table=1,priority=10,ip,nw_dst=10.0.0.1,actions=drop", 101)
	bad := flow("table=1,priority=11,ip,nw_dst=10.0.0.2,actions=group:77", 102) // no group 77
	const atomic = 3                                                            // ATOMIC|ORDERED
	conversations := []struct {
		name string
		msgs [][]byte
	}{
		{"bundle with a refused flow", [][]byte{
			bundleCtrl(10, 1, 0, atomic), bundleAdd(1, atomic, good), bundleAdd(1, atomic, bad), bundleCtrl(11, 1, 4, atomic)}},
		{"refused flow alone", [][]byte{withXid(bad, 103)}},
		{"commit of an unknown bundle", [][]byte{bundleCtrl(12, 9, 4, atomic)}},
		{"open twice", [][]byte{bundleCtrl(13, 2, 0, atomic), bundleCtrl(14, 2, 0, atomic), bundleCtrl(15, 2, 6, atomic)}},
		{"commit with other flags", [][]byte{bundleCtrl(16, 3, 0, atomic), bundleCtrl(17, 3, 4, 1), bundleCtrl(18, 3, 6, atomic)}},
		{"add after close, close twice", [][]byte{
			bundleCtrl(22, 5, 0, atomic), bundleCtrl(23, 5, 2, atomic), bundleAdd(5, atomic, withXid(good, 105)), bundleCtrl(24, 5, 2, atomic), bundleCtrl(25, 5, 6, atomic)}},
		{"add whose xid differs from its message's", [][]byte{
			bundleCtrl(26, 6, 0, atomic), withXid(bundleAdd(6, atomic, withXid(good, 106)), 99), bundleCtrl(27, 6, 6, atomic)}},
		{"add opens a bundle, discard drops it", [][]byte{
			bundleAdd(7, atomic, withXid(good, 107)), bundleCtrl(28, 7, 6, atomic), bundleCtrl(29, 7, 4, atomic)}},
		{"add with other flags", [][]byte{
			bundleCtrl(30, 8, 0, atomic), bundleAdd(8, 1, withXid(good, 108)), bundleCtrl(31, 8, 6, atomic)}},
		{"close with other flags", [][]byte{
			bundleCtrl(32, 10, 0, atomic), bundleCtrl(33, 10, 2, 1), bundleCtrl(34, 10, 6, atomic)}},
		{"good bundle", [][]byte{
			bundleCtrl(19, 4, 0, atomic), bundleAdd(4, atomic, withXid(good, 104)), bundleCtrl(20, 4, 2, atomic), bundleCtrl(21, 4, 4, atomic)}},
	}
	dc := dialOF(ctx, t, direct.MgmtPath("br0"))
	pc := dialOF(ctx, t, p.Addr())
	for i, cv := range conversations {
		dc.send(cv.msgs...)
		pc.send(cv.msgs...)
		want := dc.untilBarrier(uint32(1000 + i))
		got := pc.untilBarrier(uint32(1000 + i))
		if fmt.Sprintf("%x", got) != fmt.Sprintf("%x", want) {
			t.Errorf("%s: through the recording proxy:\n%x\nvswitchd:\n%x", cv.name, got, want)
		}
	}
	dFlows, err := direct.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	pFlows, err := proxied.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(dFlows, "\n") != strings.Join(pFlows, "\n") {
		t.Errorf("flows differ:\nproxied:\n%s\ndirect:\n%s", strings.Join(pFlows, "\n"), strings.Join(dFlows, "\n"))
	}
	if msgs, _ := rec.recorded(); len(msgs) != 1 {
		t.Errorf("recorded %d messages, want the good bundle's one flow", len(msgs))
	}
}
