package server_test

// Faults of the OpenFlow proxy (issue 23, "Must show 7: Faults"): what a
// controller behind --openflow-proxy sees, and what flowstated's store and
// the switch hold, when flowstated is killed with a bundle open, when it dies
// between the switch's commit and the store's, when ovs-vswitchd is frozen
// under an install, and when a client feeds the proxy garbage.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore"
)

// pfModule is the module the proxy of these tests records its controller
// as, on br-int.
const pfModule = "tunnel"

// pfEnv is a sandbox with br-int and the Config of a flowstated that
// manages it with an OpenFlow proxy recording module tunnel; flowstated is
// not started. It returns the proxy's socket path.
func pfEnv(ctx context.Context, t *testing.T, opts ...func(*server.Config)) (*testenv.Env, string) {
	t.Helper()
	e := testenv.New(ctx, t, testenv.Configure(append([]func(*server.Config){func(c *server.Config) {
		c.Proxies = []server.ProxySpec{{Module: pfModule, Bridge: "br-int"}}
	}}, opts...)...))
	return e, e.ProxySocket("br-int")
}

// pfFlows returns the FLOW_MODs (OpenFlow 1.5, OFPFC_ADD) of flows.
func pfFlows(t *testing.T, flows ...string) []ofconn.Message {
	t.Helper()
	ms := make([]ofconn.Message, len(flows))
	for i, f := range flows {
		p, _, err := canon.Parse(entry.KindFlow, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		ms[i] = p
	}
	return ms
}

// pfOnSwitch returns which of the flows with these markers (a substring
// each, e.g. "nw_dst=10.23.0.1") br-int holds.
func pfOnSwitch(ctx context.Context, t *testing.T, e *testenv.Env, markers []string) []string {
	t.Helper()
	dump, err := e.Sandbox.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	return pfIn(dump, markers)
}

// pfIn lists the markers that a flow of dump holds.
func pfIn(dump, markers []string) []string {
	var on []string
	for _, m := range markers {
		if slices.ContainsFunc(dump, func(l string) bool { return pfHas(l, m) }) {
			on = append(on, m)
		}
	}
	return on
}

// pfHas says whether the flow line holds the match field marker m.
func pfHas(line, m string) bool {
	return strings.Contains(line, m+",") || strings.Contains(line, m+" ") || strings.HasSuffix(line, m)
}

// pfStored returns the entries of module tunnel in the store, as text.
func pfStored(ctx context.Context, t *testing.T, c *client.Client) []string {
	t.Helper()
	es, err := c.List(ctx, client.Filter{Bridge: "br-int", Module: pfModule})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Text
	}
	return out
}

// pfStoredMarkers returns which markers the stored entries of module tunnel
// carry.
func pfStoredMarkers(ctx context.Context, t *testing.T, c *client.Client, markers []string) []string {
	t.Helper()
	stored := pfStored(ctx, t, c)
	var in []string
	for _, m := range markers {
		if slices.ContainsFunc(stored, func(s string) bool { return pfHas(s, m) }) {
			in = append(in, m)
		}
	}
	return in
}

// pfNoDiff fails unless flowstated's Diff of br-int is empty.
func pfNoDiff(ctx context.Context, t *testing.T, c *client.Client, what string) {
	t.Helper()
	cs, err := c.Diff(ctx, "br-int")
	if err != nil || len(cs) != 0 {
		t.Fatalf("%s: diff of br-int %v (%v), want none", what, cs, err)
	}
}

// pfMarkers are the nw_dst of flow i of a test's set.
func pfMarkers(prefix string, n int) (flows, markers []string) {
	for i := range n {
		m := fmt.Sprintf("nw_dst=%s.%d", prefix, i+1)
		markers = append(markers, m)
		flows = append(flows, fmt.Sprintf("table=5,priority=10,ip,%s,actions=drop", m))
	}
	return flows, markers
}

// A raw OpenFlow 1.5 controller connection, for what ofconn does not do: a
// bundle left open, a commit without the barrier before it, garbage. Echo
// requests are answered; every other message is handed to the test.

type pfRaw struct {
	nc   *net.UnixConn
	wmu  sync.Mutex
	msgs chan []byte
	quit chan struct{}
	done chan struct{} // closed once the reader ended; err is set before
	err  error
	wg   sync.WaitGroup
	xid  uint32
	once sync.Once
}

// pfDial connects to the proxy's socket at path; with hello, it sends an
// OpenFlow 1.5 HELLO and waits for the switch's.
func pfDial(ctx context.Context, t *testing.T, path string, hello bool) *pfRaw {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &pfRaw{nc: c.(*net.UnixConn), msgs: make(chan []byte, 4096), quit: make(chan struct{}), done: make(chan struct{}), xid: 100}
	r.wg.Go(r.read)
	t.Cleanup(r.close)
	if hello {
		r.send(t, pfHeader(openflow15.Type_Hello, 8, 1))
		m, err := r.recv(ctx)
		if err != nil || m[1] != openflow15.Type_Hello {
			t.Fatalf("the switch's HELLO through the proxy: %x, %v", m, err)
		}
	}
	return r
}

func (r *pfRaw) read() {
	defer close(r.done)
	br := bufio.NewReader(r.nc)
	for {
		m, err := ofconn.ReadMessage(br)
		if err != nil {
			r.err = err
			return
		}
		if m[1] == openflow15.Type_EchoRequest {
			reply := bytes.Clone(m)
			reply[1] = openflow15.Type_EchoReply
			r.wmu.Lock()
			_, _ = r.nc.Write(reply)
			r.wmu.Unlock()
			continue
		}
		select {
		case r.msgs <- m:
		case <-r.quit:
			return
		}
	}
}

func (r *pfRaw) close() {
	r.once.Do(func() {
		close(r.quit)
		r.nc.Close()
		r.wg.Wait()
	})
}

// send writes msgs in one write.
func (r *pfRaw) send(t *testing.T, msgs ...[]byte) {
	t.Helper()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if _, err := r.nc.Write(bytes.Join(msgs, nil)); err != nil {
		t.Fatalf("write to the proxy: %v", err)
	}
}

// trySend is send for a connection the proxy may have closed already.
func (r *pfRaw) trySend(msgs ...[]byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, err := r.nc.Write(bytes.Join(msgs, nil))
	return err
}

// recv returns the next message, or the error that ended the connection
// once every message before it was returned.
func (r *pfRaw) recv(ctx context.Context) ([]byte, error) {
	select {
	case m := <-r.msgs:
		return m, nil
	case <-r.done:
		select {
		case m := <-r.msgs:
			return m, nil
		default:
		}
		return nil, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// closedBy reads until the proxy closes the connection and returns the
// messages it sent before, failing the test when it does not close by
// ctx's end.
func (r *pfRaw) closedBy(ctx context.Context, t *testing.T, what string) ([][]byte, error) {
	t.Helper()
	var got [][]byte
	for {
		m, err := r.recv(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("%s: the connection was not closed: %v (got %s)", what, ctx.Err(), pfTypes(got))
			}
			return got, err
		}
		got = append(got, m)
	}
}

func (r *pfRaw) nextXid() uint32 {
	r.xid++
	return r.xid
}

// pfClosedErr tells a closed connection (EOF, reset) from other errors.
func pfClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

func pfHeader(typ uint8, length int, xid uint32) []byte {
	b := make([]byte, 8)
	b[0], b[1] = openflow15.VERSION, typ
	binary.BigEndian.PutUint16(b[2:4], uint16(length))
	binary.BigEndian.PutUint32(b[4:8], xid)
	return b
}

const pfBundleFlags = openflow15.BF_ORDERED | openflow15.BF_ATOMIC

func pfBundleCtrl(xid, id uint32, typ uint16) []byte {
	b := append(pfHeader(openflow15.Type_BundleControl, 16, xid), make([]byte, 8)...)
	binary.BigEndian.PutUint32(b[8:12], id)
	binary.BigEndian.PutUint16(b[12:14], typ)
	binary.BigEndian.PutUint16(b[14:16], pfBundleFlags)
	return b
}

// pfBundleAdd wraps inner, its xid set to the add's as vswitchd requires.
func pfBundleAdd(xid, id uint32, inner []byte) []byte {
	b := append(pfHeader(openflow15.Type_BundleAddMessage, 16+len(inner), xid), make([]byte, 8)...)
	binary.BigEndian.PutUint32(b[8:12], id)
	binary.BigEndian.PutUint16(b[14:16], pfBundleFlags)
	in := bytes.Clone(inner)
	binary.BigEndian.PutUint32(in[4:8], xid)
	return append(b, in...)
}

func pfBarrier(xid uint32) []byte { return pfHeader(openflow15.Type_BarrierRequest, 8, xid) }

func pfXid(m []byte) uint32 { return binary.BigEndian.Uint32(m[4:8]) }

// pfIsReply says whether m answers xid with type typ (and, for a bundle
// control reply, bundle control type ctrl).
func pfIsReply(m []byte, typ uint8, xid uint32, ctrl uint16) bool {
	if len(m) < 8 || m[1] != typ || pfXid(m) != xid {
		return false
	}
	return typ != openflow15.Type_BundleControl || (len(m) >= 16 && binary.BigEndian.Uint16(m[12:14]) == ctrl)
}

var pfBundleCtrlNames = []string{"OPEN_REQUEST", "OPEN_REPLY", "CLOSE_REQUEST", "CLOSE_REPLY",
	"COMMIT_REQUEST", "COMMIT_REPLY", "DISCARD_REQUEST", "DISCARD_REPLY", "?"}

// pfTypes describes messages for failures and logs.
func pfTypes(ms [][]byte) string {
	var s []string
	for _, m := range ms {
		d := ofconn.TypeName(m[1])
		switch {
		case m[1] == openflow15.Type_Error && len(m) >= 12:
			d += "(" + ofconn.ErrorName(binary.BigEndian.Uint16(m[8:10]), binary.BigEndian.Uint16(m[10:12]), 0) + ")"
		case m[1] == openflow15.Type_BundleControl && len(m) >= 16:
			d += fmt.Sprintf("(%s)", pfBundleCtrlNames[min(int(binary.BigEndian.Uint16(m[12:14])), len(pfBundleCtrlNames)-1)])
		}
		s = append(s, fmt.Sprintf("%s xid %d", d, pfXid(m)))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// pfLogs is a buffer the output goroutine of a child process and the test
// share.
type pfLogs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *pfLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *pfLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pfProc is a flowstated running as a child process.
type pfProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the child exited, after err is set
	err  error         // cmd.Wait's
	logs *pfLogs
}

// pfStartProc starts cmd, stdin a pipe (a child that outlives the test
// sees it close), and kills it at cleanup; its output goes to the test log
// when the test fails.
func pfStartProc(t *testing.T, cmd *exec.Cmd, name string) *pfProc {
	t.Helper()
	p := &pfProc{cmd: cmd, done: make(chan struct{}), logs: &pfLogs{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s (pid %d) output:\n%s", name, cmd.Process.Pid, p.logs.String())
		}
	})
	return p
}

// kill sends SIGKILL and waits for the exit.
func (p *pfProc) kill(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child exited with %v, want killed by SIGKILL", p.err)
		}
	case <-ctx.Done():
		t.Fatal("child did not exit on SIGKILL")
	}
}

// alive fails the test if the child has exited.
func (p *pfProc) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("child exited: %v", p.err)
	default:
	}
}

// pfFlowstated builds cmd/flowstated into a directory of the test's, once
// per test (one test of a run runs the binary).
func pfFlowstated(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/flowstated").CombinedOutput(); err != nil {
		t.Fatalf("go build flowstated: %v\n%s", err, out)
	}
	return bin
}

// pfRunBinary runs the flowstated binary bin with e's Config and waits
// until br-int is converged.
func pfRunBinary(ctx context.Context, t *testing.T, e *testenv.Env, bin string) *pfProc {
	t.Helper()
	c := e.Config
	args := []string{
		"--ovs-rundir", c.RunDir, "--ovsdb", c.OVSDB, "--bridge", "br-int",
		"--db", c.DBPath, "--listen", c.Listen, "--boot-id-file", c.BootIDFile,
		"--metrics-listen", "", "--guard", "off", "--rearm-flow-restore-wait=false",
		"--ofp-echo-interval", "1s", "--ofp-echo-timeout", "2s",
		"--openflow-proxy", pfModule + "=br-int", "--openflow-proxy-dir", c.ProxyDir,
	}
	p := pfStartProc(t, exec.Command(bin, args...), "flowstated")
	testenv.Poll(ctx, t, "the flowstated binary converged", func() (bool, error) {
		p.alive(t)
		st, err := e.Client.Status(ctx)
		return err == nil && st.Gate.Open && len(st.Bridges) == 1 && st.Bridges[0].Converged, nil
	})
	return p
}

// TestProxyFaultKillWithOpenBundle: flowstated, the real binary, is killed
// (SIGKILL) while a controller's bundle is open on the proxy: opened, three
// flows added, a barrier answered after them, no commit. Nothing of the
// bundle is in the store (flowstated restarted, List) nor on the switch,
// what the controller committed before is in both; the controller sees its
// connection closed (EOF); reconnected, it installs everything again in one
// bundle and barrier, and the store, the switch and Diff agree.
func TestProxyFaultKillWithOpenBundle(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin := pfFlowstated(t)
	e, sock := pfEnv(ctx, t)
	fs := pfRunBinary(ctx, t, e, bin)

	baseFlows, baseMarkers := pfMarkers("10.23.0", 2)
	openFlows, openMarkers := pfMarkers("10.23.1", 3)
	all := append(slices.Clone(baseMarkers), openMarkers...)

	// A first install, committed.
	pfInstall(ctx, t, sock, baseFlows...)

	// The bundle left open: OPEN (answered by the proxy), three ADDs, and
	// a barrier, answered only once the proxy read the ADDs before it.
	r := pfDial(ctx, t, sock, true)
	const bundle = 7
	open := r.nextXid()
	msgs := [][]byte{pfBundleCtrl(open, bundle, openflow15.OFPBCT_OPEN_REQUEST)}
	for _, m := range pfFlows(t, openFlows...) {
		msgs = append(msgs, pfBundleAdd(r.nextXid(), bundle, m))
	}
	barrier := r.nextXid()
	msgs = append(msgs, pfBarrier(barrier))
	r.send(t, msgs...)
	var got [][]byte
	for !slices.ContainsFunc(got, func(m []byte) bool { return pfIsReply(m, openflow15.Type_BarrierReply, barrier, 0) }) {
		m, err := r.recv(ctx)
		if err != nil {
			t.Fatalf("the open bundle's replies: %v (got %s)", err, pfTypes(got))
		}
		got = append(got, m)
	}
	if len(got) != 2 || !pfIsReply(got[0], openflow15.Type_BundleControl, open, openflow15.OFPBCT_OPEN_REPLY) {
		t.Fatalf("replies to OPEN, three ADDs and a barrier: %s, want the OPEN_REPLY and the BARRIER_REPLY", pfTypes(got))
	}
	if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, baseMarkers) {
		t.Fatalf("with the bundle open the switch holds %q, want %q", on, baseMarkers)
	}

	fs.kill(ctx, t)
	rest, err := r.closedBy(ctx, t, "the controller's connection after flowstated was killed")
	if !pfClosedErr(err) || len(rest) != 0 {
		t.Fatalf("the controller after flowstated was killed: %s then %v, want nothing then EOF", pfTypes(rest), err)
	}
	if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, baseMarkers) {
		t.Fatalf("flowstated killed with a bundle open: the switch holds %q, want %q", on, baseMarkers)
	}

	fs = pfRunBinary(ctx, t, e, bin)
	if in := pfStoredMarkers(ctx, t, e.Client, all); !slices.Equal(in, baseMarkers) {
		t.Fatalf("after the restart module %s holds %q, want the committed %q alone", pfModule, in, baseMarkers)
	}
	if n := len(pfStored(ctx, t, e.Client)); n != len(baseMarkers) {
		t.Fatalf("after the restart module %s holds %d entries, want %d", pfModule, n, len(baseMarkers))
	}
	if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, baseMarkers) {
		t.Fatalf("after the restart the switch holds %q, want %q", on, baseMarkers)
	}
	pfNoDiff(ctx, t, e.Client, "after the restart")

	// The controller reconnects and installs everything again.
	pfInstall(ctx, t, sock, append(slices.Clone(baseFlows), openFlows...)...)
	if in := pfStoredMarkers(ctx, t, e.Client, all); !slices.Equal(in, all) {
		t.Fatalf("after the reinstall module %s holds %q, want %q", pfModule, in, all)
	}
	if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, all) {
		t.Fatalf("after the reinstall the switch holds %q, want %q", on, all)
	}
	pfNoDiff(ctx, t, e.Client, "after the reinstall")
	fs.alive(t)
}

// pfChildEnv carries the Config of the child flowstated (runProxyFaultChild).
const pfChildEnv = "FLOWSTATE_PROXYFAULT_CHILD"

// pfChildConfig is what the child needs of the parent's Config, and the
// file it creates when its fault point is reached.
type pfChildConfig struct {
	Listen, DBPath, BootIDFile, RunDir, OVSDB, ProxyDir, Marker string
}

// runProxyFaultChild is the test binary re-run by TestMain as flowstated
// for TestProxyFaultDeathBeforeStoreCommit: its second write blocks at its
// store's commit, after the switch took its bundle (the binary has no
// fault switch of its own), and the parent kills it there.
func runProxyFaultChild(raw string) int {
	return pfRunChild(raw, func(cc pfChildConfig, cfg *server.Config) {
		var writes atomic.Int32
		cfg.Proxies = []server.ProxySpec{{Module: pfModule, Bridge: "br-int"}}
		cfg.ProxyDir = cc.ProxyDir
		cfg.Faults = &server.Faults{Engine: &restore.Faults{BeforeStoreCommit: func() error {
			if writes.Add(1) == 1 {
				return nil // the controller's first install
			}
			pfAtFault(cc.Marker)
			return nil
		}}}
	})
}

// pfRunChild runs flowstated in a child re-run of the test binary, its
// pfChildConfig raw and its faults set by configure. It exits when its stdin
// closes (the parent is gone), and returns only on a failure.
func pfRunChild(raw string, configure func(cc pfChildConfig, cfg *server.Config)) int {
	var cc pfChildConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	cfg := server.Config{
		Listen: cc.Listen, DBPath: cc.DBPath, BootIDFile: cc.BootIDFile, RunDir: cc.RunDir, OVSDB: cc.OVSDB,
		Bridges: []string{"br-int"}, EchoInterval: time.Second, EchoTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	configure(cc, &cfg)
	if err := server.Run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "flowstated:", err)
	}
	return 5
}

// pfAtFault is a child's fault point: it creates marker, for the parent to
// see, and blocks there until the parent kills the child.
func pfAtFault(marker string) {
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "marker:", err)
		os.Exit(4) // not return: this runs in the engine
	}
	select {} // killed here
}

// pfStartChild starts the test binary again as flowstated on e's Config,
// TestMain running it by env (pfRunChild), its fault point creating marker.
func pfStartChild(t *testing.T, e *testenv.Env, env, marker string) *pfProc {
	t.Helper()
	cc, err := json.Marshal(pfChildConfig{
		Listen: e.Config.Listen, DBPath: e.Config.DBPath, BootIDFile: e.Config.BootIDFile,
		RunDir: e.Config.RunDir, OVSDB: e.Config.OVSDB, ProxyDir: e.Config.ProxyDir, Marker: marker,
	})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(cc))
	return pfStartProc(t, cmd, "flowstated child")
}

// TestProxyFaultDeathBeforeStoreCommit: flowstated dies between the switch's
// commit of a controller's bundle and the store's commit.
//
//   - kill: flowstated runs in a child process whose fault hook blocks
//     there; the test checks the switch holds the change, kills the child
//     (SIGKILL), and restarts flowstated on the same store.
//   - store fails: in process, the hook fails the store's transaction, as a
//     death there would leave it.
//
// Either way the controller never gets its commit reply nor a barrier reply
// for the change (its connection is closed), and after the next replay
// (the restart's; the engine's own after the failed write) the switch
// equals the store: the change, which the store never committed, is gone
// from the switch, what was committed before stays, and Diff is clean.
func TestProxyFaultDeathBeforeStoreCommit(t *testing.T) {
	t.Run("kill", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		e, sock := pfEnv(ctx, t)
		marker := filepath.Join(t.TempDir(), "at-store-commit")
		child := pfStartChild(t, e, pfChildEnv, marker)
		e.WaitConverged(ctx)
		child.alive(t)

		baseFlows, baseMarkers := pfMarkers("10.23.7", 2)
		flows, markers := pfMarkers("10.23.2", 2)
		all := append(slices.Clone(baseMarkers), markers...)
		conn := pfController(ctx, t, sock, baseFlows...)
		committed := make(chan error, 1)
		go func() { committed <- conn.Bundle(ctx, pfFlows(t, flows...)) }()
		testenv.Poll(ctx, t, "the child at its store's commit", func() (bool, error) {
			child.alive(t)
			_, err := os.Stat(marker)
			return err == nil, nil
		})
		if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, all) {
			t.Fatalf("at the store's commit the switch holds %q, want %q (the switch commits first)", on, all)
		}
		select {
		case err := <-committed:
			t.Fatalf("the controller's commit was answered (%v) before the store committed", err)
		default:
		}
		child.kill(ctx, t)
		if err := <-committed; err == nil {
			t.Fatal("the controller's bundle committed, though flowstated died before its store did")
		}
		if err := conn.Barrier(ctx); err == nil {
			t.Fatal("the controller got a barrier reply after flowstated died before the store's commit")
		}

		e.Start(ctx)
		e.WaitConverged(ctx)
		if stored := pfStored(ctx, t, e.Client); len(stored) != len(baseMarkers) || !slices.Equal(pfStoredMarkers(ctx, t, e.Client, all), baseMarkers) {
			t.Fatalf("after the restart module %s holds %q, want the first install %q alone: the store never committed the second", pfModule, stored, baseMarkers)
		}
		if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, baseMarkers) {
			t.Fatalf("after the restart's replay the switch holds %q, want %q: the change the store never committed must be gone", on, baseMarkers)
		}
		pfNoDiff(ctx, t, e.Client, "after the restart")
	})

	t.Run("store fails", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var (
			armed     atomic.Bool
			fired     atomic.Int32
			onAtFault atomic.Value // []string: the change's flows on the switch when the hook ran
		)
		flows, markers := pfMarkers("10.23.3", 2)
		baseFlows, baseMarkers := pfMarkers("10.23.4", 1)
		var e *testenv.Env
		e, sock := pfEnv(ctx, t, func(c *server.Config) {
			c.Faults = &server.Faults{Engine: &restore.Faults{BeforeStoreCommit: func() error {
				if !armed.CompareAndSwap(true, false) {
					return nil
				}
				fired.Add(1)
				dump, err := e.Sandbox.DumpFlows(ctx, "br-int")
				if err != nil {
					return err
				}
				onAtFault.Store(pfIn(dump, markers))
				return errors.New("injected: flowstated died before the store's commit")
			}}}
		})
		e.Start(ctx)
		e.WaitConverged(ctx)

		conn := pfController(ctx, t, sock, baseFlows...)
		armed.Store(true)
		if err := conn.Bundle(ctx, pfFlows(t, flows...)); err == nil {
			t.Fatal("the controller's bundle committed, though the store's commit failed")
		} else {
			t.Logf("the controller's commit: %v", err)
		}
		if err := conn.Barrier(ctx); err == nil {
			t.Fatal("the controller got a barrier reply after the store's commit failed")
		}
		if fired.Load() != 1 {
			t.Fatalf("the fault hook ran %d times, want once", fired.Load())
		}
		if on, _ := onAtFault.Load().([]string); !slices.Equal(on, markers) {
			t.Fatalf("at the store's commit the switch held %q, want the change %q (the switch commits first)", on, markers)
		}

		all := append(slices.Clone(baseMarkers), markers...)
		testenv.Poll(ctx, t, "the switch back to the store", func() (bool, error) {
			st, err := e.Client.Status(ctx)
			if err != nil || !st.Bridges[0].Converged {
				return false, err
			}
			return slices.Equal(pfOnSwitch(ctx, t, e, all), baseMarkers), nil
		})
		if in := pfStoredMarkers(ctx, t, e.Client, all); !slices.Equal(in, baseMarkers) {
			t.Fatalf("module %s holds %q, want %q: the failed change must not be stored", pfModule, in, baseMarkers)
		}
		pfNoDiff(ctx, t, e.Client, "after the replay")

		// The controller reconnects and installs again: all of it lands.
		pfInstall(ctx, t, sock, append(slices.Clone(baseFlows), flows...)...)
		if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, all) {
			t.Fatalf("after the reinstall the switch holds %q, want %q", on, all)
		}
		pfNoDiff(ctx, t, e.Client, "after the reinstall")
	})
}

// TestProxyFaultFrozenVswitchd: ovs-vswitchd is stopped (SIGSTOP) while a
// controller installs through the proxy: a bundle opened, its flows added,
// committed, and a barrier after it, pipelined as ovn-controller sends
// them.
//
// While vswitchd is frozen, until flowstated declared it gone and the proxy
// decided the commit (or 5 s more), no reply acknowledging the install
// (the commit's, the barrier's) may reach the controller: the switch has
// not applied it.
//
// Then vswitchd is resumed (SIGCONT) with flowstated not yet reconnected
// to it, as happens when its redial backs off or its replay takes a while:
// the test hides vswitchd's socket from new connections while the engine
// is down (the proxy's session is connected already). A barrier reply the
// controller gets then must come with its flows on the switch: the proxy
// promises that a barrier reply means the change is durable and on the
// switch.
//
// Once the socket is back everything converges: the controller's flows,
// all of them, in the store and on the switch (installed again by the
// controller if its install was not acknowledged), and Diff is clean.
func TestProxyFaultFrozenVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, sock := pfEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)

	baseFlows, baseMarkers := pfMarkers("10.23.5", 2)
	newFlows, newMarkers := pfMarkers("10.23.6", 20)
	allFlows := append(slices.Clone(baseFlows), newFlows...)
	all := append(slices.Clone(baseMarkers), newMarkers...)
	pfInstall(ctx, t, sock, baseFlows...)
	st, err := e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recorded := st.Proxies[0].RecordedMessages

	// Connected before the freeze: a frozen vswitchd sends no HELLO.
	r := pfDial(ctx, t, sock, true)
	if err := e.Sandbox.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	frozeAt := time.Now()
	frozen := true
	mgmt := e.Sandbox.MgmtPath("br-int")
	hiddenPath := mgmt + ".hidden"
	hidden := false
	t.Cleanup(func() {
		if hidden {
			_ = os.Rename(hiddenPath, mgmt)
		}
		if frozen {
			_ = e.Sandbox.ThawVswitchd()
		}
	})
	const bundle = 9
	open := r.nextXid()
	msgs := [][]byte{pfBundleCtrl(open, bundle, openflow15.OFPBCT_OPEN_REQUEST)}
	for _, m := range pfFlows(t, allFlows...) {
		msgs = append(msgs, pfBundleAdd(r.nextXid(), bundle, m))
	}
	commit, barrier := r.nextXid(), r.nextXid()
	msgs = append(msgs, pfBundleCtrl(commit, bundle, openflow15.OFPBCT_COMMIT_REQUEST), pfBarrier(barrier))
	r.send(t, msgs...)

	var (
		got             [][]byte // every message the controller got
		whileFrozen     [][]byte
		closed          error
		acked, answered bool // commit answered with COMMIT_REPLY; answered at all
		barrierReplied  bool
	)
	// onSwitch dumps br-int through vswitchd's socket, hidden or not.
	onSwitch := func() []string {
		path := mgmt
		if hidden {
			path = hiddenPath
		}
		out, err := e.Sandbox.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", "unix:"+path)
		if err != nil {
			t.Fatal(err, out)
		}
		var on []string
		for _, m := range all {
			if slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return pfHas(strings.TrimSpace(l), m) }) {
				on = append(on, m)
			}
		}
		return on
	}
	take := func(m []byte) {
		got = append(got, m)
		if frozen {
			whileFrozen = append(whileFrozen, m)
		}
		switch {
		case pfIsReply(m, openflow15.Type_BundleControl, commit, openflow15.OFPBCT_COMMIT_REPLY):
			acked, answered = true, true
		case m[1] == openflow15.Type_Error && pfXid(m) == commit:
			answered = true
		case pfIsReply(m, openflow15.Type_BarrierReply, barrier, 0):
			barrierReplied = true
			if frozen {
				return
			}
			// The barrier reply says the changes before it are on the
			// switch: look at once.
			if on := onSwitch(); acked && !slices.Equal(on, all) {
				t.Errorf("the controller got its barrier reply after its acknowledged commit with %d of its %d flows on the switch (flowstated not reconnected yet): acknowledged twice, not on the switch; missing %q",
					len(on), len(all), pfMissing(all, on))
			}
		}
	}
	// drain takes what the controller got so far.
	drain := func() {
		for closed == nil {
			select {
			case m := <-r.msgs:
				take(m)
				continue
			default:
			}
			select {
			case <-r.done:
				if m, err := r.recv(ctx); err != nil {
					closed = err
				} else {
					take(m)
				}
				continue
			default:
			}
			return
		}
	}
	status := func() *client.Status {
		st, err := e.Client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	testenv.Poll(ctx, t, "flowstated to declare the frozen vswitchd gone", func() (bool, error) {
		drain()
		return !status().Bridges[0].Connected, nil
	})
	goneAt := time.Since(frozeAt)
	// New connections to vswitchd fail from now on; once the engine's
	// redial says so, no connection of it waits in vswitchd's backlog.
	if err := os.Rename(mgmt, hiddenPath); err != nil {
		t.Fatal(err)
	}
	hidden = true
	testenv.Poll(ctx, t, "flowstated's redial to fail on the hidden socket", func() (bool, error) {
		drain()
		return strings.Contains(status().Bridges[0].Reason, "no such file"), nil
	})
	// The proxy decides the commit when the engine's write ends: its
	// entries recorded, an error, or the connection closed. A proxy that
	// holds the commit until the switch is back decides nothing while
	// vswitchd is frozen; 5 s more are the engine's write decided many
	// times over.
	window := func(what string, decided func() bool) {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		for drain(); !decided() && wctx.Err() == nil; drain() {
			select {
			case <-wctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		t.Logf("%s: decided %v", what, decided())
	}
	window("the proxy's verdict on the commit", func() bool {
		p := status().Proxies[0]
		return closed != nil || answered || p.RecordedMessages > recorded || p.LastErrorTime.After(frozeAt)
	})
	if err := e.Sandbox.ThawVswitchd(); err != nil {
		t.Fatal(err)
	}
	frozen = false
	t.Logf("vswitchd frozen for %v, declared gone after %v; while frozen the controller got %s%s",
		time.Since(frozeAt).Round(time.Millisecond), goneAt.Round(time.Millisecond), pfTypes(whileFrozen),
		map[bool]string{true: ", then its connection closed", false: ""}[closed != nil])
	for _, m := range whileFrozen {
		if m[1] == openflow15.Type_BarrierReply || pfIsReply(m, openflow15.Type_BundleControl, commit, openflow15.OFPBCT_COMMIT_REPLY) {
			t.Errorf("the controller's install was acknowledged (%s) while vswitchd was frozen, before the switch could have applied it", pfTypes([][]byte{m}))
		}
	}

	// Resumed, flowstated not reconnected: vswitchd answers the barrier
	// at once, if the proxy sent it on; a proxy holding it while the
	// change is not on the switch holds it.
	window("the barrier's answer with flowstated away", func() bool { return closed != nil || barrierReplied })
	if err := os.Rename(hiddenPath, mgmt); err != nil {
		t.Fatal(err)
	}
	hidden = false
	for closed == nil && !barrierReplied {
		m, err := r.recv(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("after the thaw no barrier reply and no close: %v (got %s)", err, pfTypes(got))
			}
			closed = err
			break
		}
		take(m)
	}
	t.Logf("the controller got %s (commit acknowledged: %v, closed: %v)", pfTypes(got), acked, closed)
	if !acked {
		// Not acknowledged: the controller installs again, as after a
		// vswitchd restart.
		pfInstall(ctx, t, sock, allFlows...)
	}
	e.WaitConverged(ctx)
	if stored := pfStored(ctx, t, e.Client); len(stored) != len(all) || !slices.Equal(pfStoredMarkers(ctx, t, e.Client, all), all) {
		t.Fatalf("after the thaw module %s holds %q, want the controller's %d flows", pfModule, stored, len(all))
	}
	if on := pfOnSwitch(ctx, t, e, all); !slices.Equal(on, all) {
		t.Fatalf("after the thaw the switch lacks %q", pfMissing(all, on))
	}
	pfNoDiff(ctx, t, e.Client, "after the thaw")
}

// pfMissing returns the markers of want not in have.
func pfMissing(want, have []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// TestProxyFaultGarbage: clients feed the proxy garbage: random bytes, a
// length field below a header's, the largest length field with a body of
// random bytes (a FLOW_MOD the Recorder decodes, and a message of no known
// type the switch gets), the same length with the body cut short, a
// header cut short, and a stream of framed state and bundle messages with
// random bodies. For each the proxy closes the connection or answers with
// OFPT_ERRORs as vswitchd would (and then still answers a barrier); and
// after each flowstated is healthy (Status answers, br-int connected and
// converged), a controller connected all along is unaffected (it installs
// through the proxy, bundle and barrier), nothing of the garbage is
// recorded, and Diff is clean.
func TestProxyFaultGarbage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, sock := pfEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)

	// The controller connected all along.
	good, err := ofconn.Dial(ctx, sock, ofconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	var goodFlows, goodMarkers []string
	install := func(round int) {
		t.Helper()
		f, m := pfMarkers(fmt.Sprintf("10.24.%d", round), 2)
		goodFlows, goodMarkers = append(goodFlows, f...), append(goodMarkers, m...)
		if err := good.Bundle(ctx, pfFlows(t, goodFlows...)); err != nil {
			t.Fatalf("round %d: the good controller's bundle: %v", round, err)
		}
		if err := good.Barrier(ctx); err != nil {
			t.Fatalf("round %d: the good controller's barrier: %v", round, err)
		}
	}
	install(0)
	st, err := e.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recorded := st.Proxies[0].RecordedMessages

	rng := rand.New(rand.NewPCG(23, 7))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	// framed is a message of type typ, version 1.5, with a random body.
	framed := func(typ uint8, xid uint32, body int) []byte {
		return append(pfHeader(typ, 8+body, xid), random(body)...)
	}
	const typeUnknown = 0xfe
	type outcome struct {
		got    [][]byte
		closed error
	}
	cases := []struct {
		name  string
		hello bool
		// send sends the garbage and returns the xid whose OFPT_ERROR it
		// wants (0: none) and whether to half-close after it.
		send func(r *pfRaw) (errXid uint32, closeWrite bool)
		// closes: the proxy must close the connection; otherwise it
		// must answer a barrier after the garbage (or close).
		closes bool
	}{{
		name: "random bytes", closes: true,
		send: func(r *pfRaw) (uint32, bool) {
			r.send(t, random(4096))
			return 0, true
		},
	}, {
		name: "length below a header's", hello: true, closes: true,
		send: func(r *pfRaw) (uint32, bool) {
			r.send(t, pfHeader(openflow15.Type_FlowMod, 4, r.nextXid()), random(60))
			return 0, false
		},
	}, {
		name: "largest length, a FLOW_MOD of random bytes", hello: true,
		send: func(r *pfRaw) (uint32, bool) {
			xid := r.nextXid()
			m := framed(openflow15.Type_FlowMod, xid, 0xffff-8)
			// An OFPFC_ADD without timeouts or flags: desired state, for
			// the Recorder.
			m[25] = 0
			clear(m[26:30])
			clear(m[44:46])
			r.send(t, m)
			return xid, false
		},
	}, {
		name: "largest length, no known type", hello: true,
		send: func(r *pfRaw) (uint32, bool) {
			xid := r.nextXid()
			r.send(t, framed(typeUnknown, xid, 0xffff-8))
			return xid, false
		},
	}, {
		name: "largest length, body cut short", hello: true, closes: true,
		send: func(r *pfRaw) (uint32, bool) {
			r.send(t, framed(openflow15.Type_FlowMod, r.nextXid(), 0xffff-8)[:1000])
			return 0, true
		},
	}, {
		name: "header cut short", hello: true, closes: true,
		send: func(r *pfRaw) (uint32, bool) {
			r.send(t, pfHeader(openflow15.Type_FlowMod, 64, r.nextXid())[:5])
			return 0, true
		},
	}, {
		name: "framed messages of random bodies", hello: true,
		send: func(r *pfRaw) (uint32, bool) {
			types := []uint8{openflow15.Type_FlowMod, openflow15.Type_GroupMod, openflow15.Type_MeterMod,
				openflow15.Type_BundleControl, openflow15.Type_BundleAddMessage, openflow15.Type_Experimenter}
			var msgs [][]byte
			for range 300 {
				typ := types[rng.IntN(len(types))]
				m := framed(typ, r.nextXid(), rng.IntN(300))
				switch {
				case typ == openflow15.Type_FlowMod && len(m) >= 56:
					m[25] = byte(rng.IntN(5)) // a command that exists
					clear(m[26:30])
					clear(m[44:46])
				case typ == openflow15.Type_Experimenter && len(m) >= 16 && rng.IntN(2) == 0:
					binary.BigEndian.PutUint32(m[8:12], openflow15.NxExperimenterID)
					binary.BigEndian.PutUint32(m[12:16], openflow15.Type_TlvTableMod)
				}
				msgs = append(msgs, m)
			}
			r.send(t, msgs...)
			return 0, false
		},
	}}
	for i, tc := range cases {
		r := pfDial(ctx, t, sock, tc.hello)
		errXid, closeWrite := tc.send(r)
		barrier := uint32(0)
		if !tc.closes {
			barrier = r.nextXid()
			if err := r.trySend(pfBarrier(barrier)); err != nil {
				t.Logf("%s: the barrier could not be sent: %v", tc.name, err)
			}
		}
		if closeWrite {
			if err := r.nc.CloseWrite(); err != nil {
				t.Fatal(err)
			}
		}
		var o outcome
		for o.closed == nil {
			m, err := r.recv(ctx)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("%s: the proxy neither closed nor answered: got %s", tc.name, pfTypes(o.got))
				}
				o.closed = err
				break
			}
			o.got = append(o.got, m)
			if barrier != 0 && pfIsReply(m, openflow15.Type_BarrierReply, barrier, 0) {
				break
			}
		}
		r.close()
		t.Logf("%s: the client got %s, closed: %v", tc.name, pfTypes(o.got), o.closed)
		switch {
		case tc.closes && o.closed == nil:
			t.Errorf("%s: the proxy did not close the connection", tc.name)
		case o.closed != nil && !pfClosedErr(o.closed):
			t.Errorf("%s: the connection ended with %v, want it closed", tc.name, o.closed)
		}
		for _, m := range o.got {
			switch m[1] {
			case openflow15.Type_Error, openflow15.Type_BarrierReply, openflow15.Type_Hello:
			case openflow15.Type_BundleControl:
				if !tc.hello {
					t.Errorf("%s: a bundle reply to a client that sent no HELLO: %s", tc.name, pfTypes([][]byte{m}))
				}
			default:
				t.Errorf("%s: the client got %s, want OFPT_ERRORs and replies alone", tc.name, pfTypes([][]byte{m}))
			}
		}
		if errXid != 0 && o.closed == nil && !slices.ContainsFunc(o.got, func(m []byte) bool { return m[1] == openflow15.Type_Error && pfXid(m) == errXid }) {
			t.Errorf("%s: no OFPT_ERROR for xid %d, and the connection stays open", tc.name, errXid)
		}

		// flowstated healthy, the good controller unaffected, nothing
		// of the garbage recorded.
		testenv.Poll(ctx, t, tc.name+": the garbage's session gone", func() (bool, error) {
			st, err := e.Client.Status(ctx)
			return err == nil && st.Proxies[0].Connections == 1, err
		})
		st, err := e.Client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b := st.Bridges[0]; !b.Connected || !b.Converged {
			t.Fatalf("%s: br-int connected %v, converged %v", tc.name, b.Connected, b.Converged)
		}
		if n := st.Proxies[0].RecordedMessages; n != recorded {
			t.Fatalf("%s: the proxy recorded %d messages, want %d: some garbage was recorded", tc.name, n-recorded, 0)
		}
		if err := good.Err(); err != nil {
			t.Fatalf("%s: the good controller's connection: %v", tc.name, err)
		}
		install(i + 1)
		recorded += uint64(len(goodFlows))
		if stored := pfStored(ctx, t, e.Client); len(stored) != len(goodMarkers) || !slices.Equal(pfStoredMarkers(ctx, t, e.Client, goodMarkers), goodMarkers) {
			t.Fatalf("%s: module %s holds %q, want the good controller's %d flows", tc.name, pfModule, stored, len(goodMarkers))
		}
		if on := pfOnSwitch(ctx, t, e, goodMarkers); !slices.Equal(on, goodMarkers) {
			t.Fatalf("%s: the switch lacks %q", tc.name, pfMissing(goodMarkers, on))
		}
		pfNoDiff(ctx, t, e.Client, tc.name)
	}
}

// pfInstall is a controller's install through the proxy at sock: one
// bundle of flows and a barrier on a connection of its own.
func pfInstall(ctx context.Context, t *testing.T, sock string, flows ...string) {
	t.Helper()
	pfController(ctx, t, sock, flows...).Close()
}

// pfController connects a controller to the proxy at sock and installs
// flows (one bundle, then a barrier); the connection stays open for more,
// closed at cleanup.
func pfController(ctx context.Context, t *testing.T, sock string, flows ...string) *ofconn.Conn {
	t.Helper()
	conn, err := ofconn.Dial(ctx, sock, ofconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Bundle(ctx, pfFlows(t, flows...)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	return conn
}
