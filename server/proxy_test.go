package server_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// proxyEnv is a flowstated managing br-int (and br-ref, for the oracle)
// with an OpenFlow proxy that records module "tunnel" on br-int; the
// controller is ovs-ofctl, an unmodified OpenFlow client, pointed at the
// proxy's socket.
func proxyEnv(ctx context.Context, t *testing.T, opts ...func(*server.Config)) (*env, string) {
	t.Helper()
	e := newEnv(ctx, t, append([]func(*server.Config){func(c *server.Config) {
		c.Proxies = []server.ProxySpec{{Module: "tunnel", Bridge: "br-int"}}
	}}, opts...)...)
	return e, "unix:" + e.ProxySocket("br-int")
}

// ofctl runs ovs-ofctl against target (a bridge of the sandbox, or the
// proxy's unix: socket) and fails the test on an error.
func (e *env) ofctl(ctx context.Context, args ...string) string {
	e.t.Helper()
	out, err := e.sb.Ofctl(ctx, args...)
	if err != nil {
		e.t.Fatalf("ovs-ofctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func tlvLines(out string) []string {
	var l []string
	for _, s := range strings.Split(out, "\n") {
		if strings.Contains(s, "tun_metadata") {
			l = append(l, strings.Join(strings.Fields(s), " "))
		}
	}
	return l
}

// TestProxyRecordsAndRestores: a controller behind the proxy maps a Geneve
// option (NXT_TLV_TABLE_MOD) and installs flows that use it, a group and
// a meter. The switch holds them, the store holds them as the module's
// entries, and a plain vswitchd restart gets them back (the TLV map
// first, or the flows would be refused) with no controller connected.
// A delete-all of the controller deletes only its module's flows.
func TestProxyRecordsAndRestores(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := proxyEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)

	// A gRPC module on the same bridge.
	grpcFlows := []string{"table=9,priority=5,ip,nw_dst=10.9.0.1,actions=drop"}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(grpcFlows)...); err != nil {
		t.Fatal(err)
	}

	e.ofctl(ctx, "add-tlv-map", proxy, "{class=0xffff,type=0,len=4}->tun_metadata0")
	e.ofctl(ctx, "add-meter", proxy, "meter=3,kbps,band=type=drop,rate=1000")
	e.ofctl(ctx, "add-group", proxy, "group_id=7,type=select,bucket=actions=output:1,bucket=actions=output:2")
	flows := filepath.Join(t.TempDir(), "flows")
	if err := os.WriteFile(flows, []byte(strings.Join([]string{
		"table=0,priority=30,tun_metadata0=0x5,actions=drop",
		"table=0,priority=20,ip,actions=set_field:0x7->tun_metadata0,resubmit(,1)",
		"table=1,priority=10,ip,actions=meter:3,group:7",
	}, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ofctl(ctx, "--bundle", "add-flows", proxy, flows)

	want := func() (flows, groups, meters, tlv []string) {
		f, err := e.sb.DumpFlows(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.sb.DumpGroups(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.sb.DumpMeters(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		return f, g, m, tlvLines(e.ofctl(ctx, "dump-tlv-map", "br-int"))
	}
	f0, g0, m0, tlv0 := want()
	if len(f0) != 4 || len(g0) != 1 || len(m0) != 1 || len(tlv0) != 1 {
		t.Fatalf("switch after the install through the proxy: %d flows, %d groups, %d meters, tlv %q; want 4, 1, 1 and one mapping\n%s",
			len(f0), len(g0), len(m0), tlv0, strings.Join(f0, "\n"))
	}
	es, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Module: "tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 5 {
		t.Fatalf("the store holds %d entries of module tunnel, want 3 flows, a group and a meter", len(es))
	}
	e.wantNoDiff(ctx, "after the proxied install")
	st, err := e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Proxies) != 1 || st.Proxies[0].Module != "tunnel" || st.Proxies[0].RecordedMessages < 6 || st.Proxies[0].LastInstall.IsZero() {
		t.Fatalf("status proxies: %+v", st.Proxies)
	}

	// Conflicting identities go to the first writer: the controller's
	// add of pipeline's flow gets vswitchd's permission error, a gRPC Put
	// of the controller's flow an error naming its owner.
	if out, err := e.sb.Ofctl(ctx, "add-flow", proxy, grpcFlows[0]); err == nil || !strings.Contains(out+err.Error(), "OFPFMFC_EPERM") {
		t.Fatalf("the controller's add of pipeline's flow: err %v, output %q; want OFPFMFC_EPERM", err, out)
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.FlowText("table=0,priority=30,tun_metadata0=0x5,actions=drop")); err == nil || !strings.Contains(err.Error(), "tunnel") {
		t.Fatalf("a gRPC Put of the controller's flow: %v, want an error naming module tunnel", err)
	}

	// A plain restart, nothing connected to the proxy: flowstated holds
	// the node and restores the map, meter, group and flows.
	restarted := time.Now()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	// testenv runs without re-arm: released is the flag cleared.
	e.waitRestored(ctx)
	t.Logf("restored and released %v after the restart began", time.Since(restarted).Round(time.Millisecond))
	f1, g1, m1, tlv1 := want()
	if !slices.Equal(f0, f1) || !slices.Equal(g0, g1) || !slices.Equal(m0, m1) || !slices.Equal(tlv0, tlv1) {
		t.Fatalf("after a vswitchd restart the switch differs:\nflows %q\nwant  %q\ngroups %q want %q\nmeters %q want %q\ntlv %q want %q",
			f1, f0, g1, g0, m1, m0, tlv1, tlv0)
	}

	// A clear (ovn-controller's reconnect: delete every flow, then add
	// them back) starts a resync: nothing is deleted at once, and once the
	// controller is quiet what it did not add again goes. Only the
	// module's flows are its to delete; pipeline's stay.
	e.ofctl(ctx, "del-flows", proxy)
	if got, err := e.sb.DumpFlows(ctx, "br-int"); err != nil || len(got) != 4 {
		t.Fatalf("right after the controller's delete-all the switch holds %q (%v), want its 4 flows: the clear is deferred", got, err)
	}
	poll(ctx, t, "the controller's flows deleted once it is quiet", func() (bool, error) {
		got, err := e.sb.DumpFlows(ctx, "br-int")
		return len(got) == 1 && strings.Contains(got[0], "nw_dst=10.9.0.1"), err
	})
	e.ofctl(ctx, "--bundle", "add-flows", proxy, flows)
	e.wantNoDiff(ctx, "after the controller's reinstall")

	// A mapping of an index the module does not own... the switch holds
	// tun_metadata0 already: vswitchd's own error reaches the controller.
	if out, err := e.sb.Ofctl(ctx, "add-tlv-map", proxy, "{class=0xffff,type=1,len=8}->tun_metadata0"); err == nil {
		t.Fatalf("a second mapping of tun_metadata0 was accepted: %s", out)
	} else if !strings.Contains(out+err.Error(), "NXTTMFC_ALREADY_MAPPED") && !strings.Contains(out+err.Error(), "already mapped") {
		t.Fatalf("a second mapping of tun_metadata0: %v %s, want vswitchd's NXTTMFC_ALREADY_MAPPED", err, out)
	}
	if tlv := tlvLines(e.ofctl(ctx, "dump-tlv-map", "br-int")); !slices.Equal(tlv, tlv0) {
		t.Fatalf("tlv map after a refused mapping: %q, want %q", tlv, tlv0)
	}
	// Nor in the store: the next restart restores the first mapping.
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.waitRestored(ctx)
	if tlv := tlvLines(e.ofctl(ctx, "dump-tlv-map", "br-int")); !slices.Equal(tlv, tlv0) {
		t.Fatalf("tlv map restored after a refused mapping: %q, want %q", tlv, tlv0)
	}
}

// TestProxyReadinessAndRefusals: a proxied module that a cold start
// requires opens the gate with its controller's first install (auto
// readiness); an entry the switch refuses is not recorded and the
// controller gets vswitchd's own error; a flow that expires passes
// through to the switch without being recorded, and no replay or audit
// touches it.
func TestProxyReadinessAndRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := proxyEnv(ctx, t, func(c *server.Config) {
		c.RequiredModules = []string{"tunnel"}
		c.MetricsListen = "127.0.0.1:0"
		c.ReadinessTimeout = 90 * time.Second // beyond the test's deadline: only the module opens the gate
	})
	e.Start(ctx)
	st, err := e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Gate.Open {
		t.Fatalf("a cold start requiring module tunnel opened its gate before the module was ready: %+v", st.Gate)
	}

	// A controller's first install: one bundle, then a barrier, on one
	// connection (ovs-ofctl sends no barrier after a bundle).
	conn, err := ofconn.Dial(ctx, strings.TrimPrefix(proxy, "unix:"), ofconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var install []ofconn.Message
	for _, f := range []string{"table=0,priority=10,ip,actions=output:2", "table=0,priority=5,actions=drop"} {
		p, _, err := canon.Parse(entry.KindFlow, f)
		if err != nil {
			t.Fatal(err)
		}
		install = append(install, p)
	}
	if err := conn.Bundle(ctx, install); err != nil {
		t.Fatal(err)
	}
	if st, err := e.c.Status(ctx); err != nil || st.Gate.Open {
		t.Fatalf("the gate opened (err %v) before the controller's barrier said its install is complete", err)
	}
	if err := conn.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	poll(ctx, t, "the gate opened by the proxied module's first install", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, err
		}
		return st.Gate.Open, nil
	})
	if d := time.Since(opened); d > 10*time.Second {
		t.Fatalf("the gate opened %v after the install: by the readiness timeout, not the module's readiness", d)
	}
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after the first install")

	// Refused by vswitchd (no such group): its error, nothing recorded.
	out, err := e.sb.Ofctl(ctx, "add-flow", proxy, "table=0,priority=99,ip,actions=group:99")
	if err == nil || !strings.Contains(out+err.Error(), "OFPBAC_BAD_OUT_GROUP") {
		t.Fatalf("a flow to a missing group through the proxy: err %v, output %q; want vswitchd's OFPBAC_BAD_OUT_GROUP", err, out)
	}
	es, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Module: "tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("module tunnel holds %d entries after a refused flow, want its 2", len(es))
	}

	// A flow that expires is the switch's, not desired state.
	e.ofctl(ctx, "add-flow", proxy, "table=0,priority=50,idle_timeout=60,ip,nw_src=10.1.1.1,actions=drop")
	if es, err = e.c.List(ctx, client.Filter{Bridge: "br-int", Module: "tunnel"}); err != nil || len(es) != 2 {
		t.Fatalf("module tunnel holds %d entries (err %v) after an idle_timeout flow, want 2: it must pass through unrecorded", len(es), err)
	}
	if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	got, err := e.sb.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, "idle_timeout=60") }) {
		t.Fatalf("the idle_timeout flow is not on the switch after a reconcile:\n%s", strings.Join(got, "\n"))
	}
	e.wantNoDiff(ctx, "with a learned-style flow on the switch")

	st, err = e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Proxies[0]; p.LastError == "" || p.LastErrorTime.IsZero() {
		t.Fatalf("status of the proxy after a refusal: %+v, want the refusal as last error", p)
	}
	// Recorded: the bundle's two flows. Read from the controller: the
	// refused flow and the expiring one, which passed through.
	if m := e.Metrics(ctx); !strings.Contains(m, `flowstate_proxy_recorded_total{bridge="br-int",module="tunnel",type="FLOW_MOD"} 2`) ||
		!strings.Contains(m, `flowstate_proxy_messages_total{bridge="br-int",direction="to_switch",module="tunnel",type="FLOW_MOD"} 2`) {
		t.Fatalf("proxy metrics missing or wrong:\n%s", grepLines(m, "flowstate_proxy_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
