package server_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/server"
)

// proxyEnv is a flowstated managing br-int (and br-ref, for the oracle)
// with an OpenFlow proxy that records module "tunnel" on br-int; the
// controller is ovs-ofctl, an unmodified OpenFlow client, pointed at the
// proxy's socket.
func proxyEnv(ctx context.Context, t *testing.T, opts ...func(*server.Config)) (*env, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ofp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := newEnv(ctx, t, append([]func(*server.Config){func(c *server.Config) {
		c.Proxies = []server.ProxySpec{{Module: "tunnel", Bridge: "br-int"}}
		c.ProxyDir = dir
	}}, opts...)...)
	return e, "unix:" + filepath.Join(dir, "br-int.mgmt")
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

	// A plain restart, nothing connected to the proxy: flowstated holds
	// the node and restores the map, meter, group and flows.
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	poll(ctx, t, "flag cleared after the restore", func() (bool, error) {
		on, err := e.sb.FlowRestoreWait(ctx)
		return !on, err
	})
	f1, g1, m1, tlv1 := want()
	if !slices.Equal(f0, f1) || !slices.Equal(g0, g1) || !slices.Equal(m0, m1) || !slices.Equal(tlv0, tlv1) {
		t.Fatalf("after a vswitchd restart the switch differs:\nflows %q\nwant  %q\ngroups %q want %q\nmeters %q want %q\ntlv %q want %q",
			f1, f0, g1, g0, m1, m0, tlv1, tlv0)
	}

	// ovn-controller's reconnect: delete every flow, then add them back.
	// Only the module's flows are its to delete; pipeline's stay.
	e.ofctl(ctx, "del-flows", proxy)
	got, err := e.sb.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], "nw_dst=10.9.0.1") {
		t.Fatalf("after the controller's delete-all the switch holds %q, want pipeline's flow alone", got)
	}
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
}
