package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// paChildEnv makes the test binary an OpenFlow controller
// (runProxyAuthChild); it carries a paChild.
const paChildEnv = "FLOWSTATE_PROXYAUTH_CHILD"

// paChild is what the controller child dials and sends.
type paChild struct {
	Network, Addr string
	FlowMod       string // hex
}

// runProxyAuthChild is the test binary re-run by TestMain as a controller,
// as whatever uid the parent gave it: it dials the proxy and sends HELLO
// (OpenFlow 1.5), a FLOW_MOD and a barrier in one write, without waiting
// for anything, as a controller that pipelines does; then it prints
// "admitted" at the barrier reply, or "closed: ERR" when the proxy closes
// first.
func runProxyAuthChild(raw string) int {
	var cc paChild
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Println("config:", err)
		return 2
	}
	fm, err := hex.DecodeString(cc.FlowMod)
	if err != nil {
		fmt.Println("flow mod:", err)
		return 2
	}
	c, err := net.DialTimeout(cc.Network, cc.Addr, 10*time.Second)
	if err != nil {
		fmt.Println("dial:", err)
		return 2
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(bytes.Join([][]byte{pfHeader(openflow15.Type_Hello, 8, 1), fm, pfBarrier(7)}, nil)); err != nil {
		fmt.Println("closed:", err)
		return 0
	}
	br := bufio.NewReader(c)
	for {
		m, err := ofconn.ReadMessage(br)
		if err != nil {
			fmt.Println("closed:", err)
			return 0
		}
		switch m[1] {
		case openflow15.Type_BarrierReply:
			fmt.Println("admitted")
			return 0
		case openflow15.Type_Error:
			fmt.Printf("error: %x\n", m)
			return 0
		}
	}
}

// TestProxyWriters: with --module-writer rules, the OpenFlow proxy of
// module ovn relays only controllers that may write ovn, on its loopback
// TCP listener (the peer is the owner of its socket) as on its unix socket
// (SO_PEERCRED). Each controller is the test binary run as another uid,
// pipelining HELLO, a FLOW_MOD and a barrier. uid 65534, a writer of
// another module only, is refused on both: its connection closed, nothing
// stored or on the switch, a log line naming it and the module's writers,
// and flowstate_proxy_connections_denied_total. Its own uid (65533), a
// gid of ovn as primary (65532) or as a supplementary group, and root are
// admitted and recorded; after a vswitchd restart the switch holds exactly
// what they installed.
func TestProxyWriters(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a controller as another uid needs root; this test runs in CI, which runs as root")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	writers := server.Writers{}
	for _, r := range []string{"ovn=uid:65533", "ovn=gid:65532", "pod=uid:65534"} {
		if err := writers.ParseWriter(r); err != nil {
			t.Fatal(err)
		}
	}
	logs := &pfLogs{}
	e := newEnvOf(ctx, t, []string{"br-int"}, func(c *server.Config) {
		c.Proxies = []server.ProxySpec{{Module: "ovn", Bridge: "br-int", TCP: "127.0.0.1:0"}}
		c.Writers, c.MetricsListen = writers, "127.0.0.1:0"
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, testenv.Writer(t)), nil))
	})
	e.Start(ctx)
	e.WaitConverged(ctx)
	st, err := e.c.Status(ctx)
	if err != nil || len(st.Proxies) != 1 || st.Proxies[0].TCPListen == "" {
		t.Fatalf("status proxies: %+v, %v; want one with a tcp address", st, err)
	}
	tcpAddr, unixPath := st.Proxies[0].TCPListen, e.ProxySocket("br-int")
	// The unix socket carries vswitchd's mode; open it to every uid, as
	// a socket of group openvswitch is to its members, so that only
	// --module-writer stands between uid 65534 and the module.
	for _, d := range []string{e.dir, filepath.Dir(unixPath)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(unixPath, 0o666); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := copyExecutable(t, self)
	controller := func(cred *syscall.Credential, network, addr, flow string) string {
		t.Helper()
		raw, err := json.Marshal(paChild{Network: network, Addr: addr, FlowMod: hex.EncodeToString(pfFlows(t, flow)[0])})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), paChildEnv+"="+string(raw))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("controller as uid %d on %s: %v\n%s", cred.Uid, network, err, out)
		}
		return strings.TrimSpace(string(out))
	}

	denied := []string{"nw_dst=10.31.0.1", "nw_dst=10.31.0.2"}
	for i, network := range []string{"tcp", "unix"} {
		addr := map[string]string{"tcp": tcpAddr, "unix": unixPath}[network]
		out := controller(&syscall.Credential{Uid: 65534, Gid: 65534}, network, addr, "table=0,priority=10,ip,"+denied[i]+",actions=drop")
		if !strings.HasPrefix(out, "closed:") {
			t.Fatalf("uid 65534 on the proxy's %s listener: %q, want its connection closed", network, out)
		}
	}
	admitted := []struct {
		who    string
		cred   syscall.Credential
		marker string
	}{
		{"uid 65533 (a rule of its own)", syscall.Credential{Uid: 65533, Gid: 65533}, "nw_dst=10.31.1.1"},
		{"uid 65531 of primary gid 65532", syscall.Credential{Uid: 65531, Gid: 65532}, "nw_dst=10.31.1.2"},
		{"uid 65530 of supplementary group 65532", syscall.Credential{Uid: 65530, Gid: 65530, Groups: []uint32{65532}}, "nw_dst=10.31.1.3"},
		{"root", syscall.Credential{Uid: 0, Gid: 0}, "nw_dst=10.31.1.4"},
	}
	var want []string
	for _, a := range admitted {
		if out := controller(&a.cred, "tcp", tcpAddr, "table=0,priority=10,ip,"+a.marker+",actions=drop"); out != "admitted" {
			t.Fatalf("%s on the proxy's tcp listener: %q, want admitted\nlogs:\n%s", a.who, out, logs)
		}
		want = append(want, a.marker)
	}
	if out := controller(&syscall.Credential{Uid: 65533, Gid: 65533}, "unix", unixPath, "table=0,priority=10,ip,nw_dst=10.31.1.5,actions=drop"); out != "admitted" {
		t.Fatalf("uid 65533 on the proxy's unix socket: %q, want admitted", out)
	}
	want = append(want, "nw_dst=10.31.1.5")
	all := append(slices.Clone(denied), want...)

	check := func(what string) {
		t.Helper()
		if in := pfIn(e.stored(ctx, "ovn"), all); !slices.Equal(in, want) {
			t.Fatalf("%s: module ovn holds %q, want %q", what, in, want)
		}
		if on := pfOnSwitch(ctx, t, e.Env, all); !slices.Equal(on, want) {
			t.Fatalf("%s: the switch holds %q, want %q", what, on, want)
		}
	}
	check("after the controllers")
	l := logs.String()
	if n := strings.Count(l, "refused a controller connection"); n != 2 ||
		strings.Count(l, `uid 65534`) < 2 || !strings.Contains(l, `may not write module \"ovn\"`) || !strings.Contains(l, "module ovn admits root and uid:65533, gid:65532") {
		t.Fatalf("%d refusals logged, want 2 naming uid 65534 and the writers of ovn:\n%s", n, grepLines(l, "refused"))
	}
	t.Logf("refusals:\n%s", grepLines(l, "refused"))
	if m := e.Metrics(ctx); !strings.Contains(m, `flowstate_proxy_connections_denied_total{bridge="br-int",module="ovn"} 2`) {
		t.Fatalf("metrics: %s", grepLines(m, "flowstate_proxy_connections_denied_total"))
	}

	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.waitRestored(ctx)
	check("after a vswitchd restart")
}

// stored returns the text of module's entries on br-int.
func (e *env) stored(ctx context.Context, module string) []string {
	e.t.Helper()
	es, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Module: module})
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, en := range es {
		out[i] = en.Text
	}
	return out
}

// TestWritersArgs: the rules flowstated gives the guards it spawns parse
// back to its own.
func TestWritersArgs(t *testing.T) {
	w := server.Writers{}
	for _, r := range []string{"ovn=uid:65533", "ovn=gid:65532", "pod=uid:7"} {
		if err := w.ParseWriter(r); err != nil {
			t.Fatal(err)
		}
	}
	args := w.Args()
	back := server.Writers{}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] != "--module-writer" {
			t.Fatalf("args %q: want --module-writer pairs", args)
		}
		if err := back.ParseWriter(args[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(back, w) || len(args) != 6 {
		t.Fatalf("args %q parse back to %v, want %v", args, back, w)
	}
}
