package ofproxy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestGuardRelayLearnedAtReturn: what a controller installed through the
// guard's relay while flowstated was away is flowstated's first replay's
// to learn, not to undo. With the flowstated binary and a real
// ovn-controller through the proxy: flowstated is SIGKILLed, vswitchd
// restarts plainly and a logical port is bound meanwhile, and the
// controller programs it through the guard's relay. Then flowstated comes
// back. A sampler dumps br-int without pause from before flowstated's start
// until the controller's reinstall through flowstated is complete: no
// sample may lack one of the new port's flows (before the fix the first
// replay deleted them, undeclared, until the reinstall). Right after the
// first replay the store holds them as module ovn's.
func TestGuardRelayLearnedAtReturn(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, fs := startRelayed(ctx, t)
	o, err := s.StartOVN(ctx)
	if err != nil {
		t.Fatalf("start OVN: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("close OVN: %v", err)
		}
	})
	if err := o.StartController(ctx, fs.proxyDir); err != nil {
		t.Fatal(err)
	}
	topo, err := o.BuildTopology(ctx, pktTopology)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatalf("ovn-nbctl --wait=hv sync through flowstated: %v", err)
	}
	fs.waitConverged(ctx, t)

	fs.kill(t)
	poll(ctx, t, "the guard's release (flow-restore-wait cleared)", func() (bool, error) {
		on, err := s.FlowRestoreWait(ctx)
		return err == nil && !on, err
	})
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	const port, mac, ip, ofport = "pnew", "0a:00:00:00:00:99", "10.0.0.99", 99
	if _, err := o.Nbctl(ctx, "lsp-add", "sw0", port, "--", "lsp-set-addresses", port, mac+" "+ip); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Vsctl(ctx, "--no-wait", "add-port", sandbox.OVNBridge, port, "--", "set", "Interface", port, "type=dummy",
		"ofport_request="+strconv.Itoa(ofport), "external_ids:iface-id="+port); err != nil {
		t.Fatal(err)
	}
	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	src := topo.Ports[1]
	poll(ctx, t, "the new port programmed through the guard's relay", func() (bool, error) {
		return forwards(ctx, s, src, port, mac, ip)
	})
	portFlow := "in_port=" + strconv.Itoa(ofport)
	isPortFlow := func(f string) bool { return strings.Contains(f, portFlow) || strings.Contains(f, mac) }
	var want []string
	poll(ctx, t, "the new port's flows settled on br-int", func() (bool, error) {
		now := slices.DeleteFunc(dumpFlows(ctx, t, s), func(f string) bool { return !isPortFlow(f) })
		same := len(now) > 0 && slices.Equal(now, want)
		want = now
		return same, nil
	})
	if !slices.ContainsFunc(want, func(f string) bool { return strings.Contains(f, portFlow) }) {
		t.Fatalf("br-int holds no flow with %s: %q", portFlow, want)
	}
	t.Logf("%d flows of the new port installed through the guard's relay", len(want))

	smp := startSampler(ctx, t, s, want, nil)
	fs.start(ctx, t)
	first := fs.waitFirstReplay(ctx, t)
	stored, err := fs.c.List(ctx, client.Filter{Bridge: sandbox.OVNBridge, Module: ovnModule})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(stored, func(e client.StoredEntry) bool { return strings.Contains(e.Text, portFlow) }) {
		t.Errorf("right after flowstated's first replay (%v), module %s holds no flow with %s", first.FinishedAt, ovnModule, portFlow)
	}
	if !strings.Contains(fs.logs.String(), "learned what the controller installed through the guard's relay") {
		t.Errorf("flowstated did not log what it learned")
	}
	// The controller's reinstall through flowstated, then the end of its
	// resync: a clean diff with its install recorded.
	poll(ctx, t, "ovn-controller's reinstall through flowstated", func() (bool, error) {
		st, err := fs.c.Status(ctx)
		if err != nil || len(st.Proxies) != 1 || st.Proxies[0].Connections < 1 || st.Proxies[0].LastInstall.IsZero() {
			return false, err
		}
		changes, err := fs.c.Diff(ctx, sandbox.OVNBridge)
		return err == nil && len(changes) == 0, err
	})
	missing, samples, err := smp.stop()
	if err != nil {
		t.Fatal(err)
	}
	if samples < 10 {
		t.Fatalf("only %d dumps of br-int between flowstated's start and the reinstall", samples)
	}
	if missing != "" {
		t.Errorf("a flow of the new port vanished from br-int after flowstated came back (%d dumps): %s", samples, missing)
	} else {
		t.Logf("%d dumps of br-int, the new port's %d flows in every one", samples, len(want))
	}
	if ok, err := forwards(ctx, s, src, port, mac, ip); !ok {
		t.Errorf("br-int no longer forwards to %s after flowstated came back (%v)", port, err)
	}
}

// TestGuardRelayLearnedNoReconnect: a controller that never reconnects
// (ovs-ofctl through the proxy's socket) adds, changes and deletes flows of
// its module through the guard's relay while flowstated is away, and
// changes another module's flow. Back, flowstated learns the module's
// state from the switch: in every dump from its start on, the added and
// changed flows stay as the controller left them and the deleted one stays
// gone, and the store says so; the other module's flow is put back, as a
// replay always does. A second replay (Reconcile) changes nothing.
func TestGuardRelayLearnedNoReconnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, fs := relayedOfctl(ctx, t)
	smp := startSampler(ctx, t, s, []string{kept, added, changedT}, []string{deleted, changed})
	fs.start(ctx, t)
	fs.waitFirstReplay(ctx, t)
	texts := storedTexts(ctx, t, fs)
	for _, f := range []string{kept, added, changedT} {
		if !slices.ContainsFunc(texts, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("after flowstated's first replay module %s does not hold %q: %q", ovnModule, f, texts)
		}
	}
	if len(texts) != 3 {
		t.Errorf("after flowstated's first replay module %s holds %d flows, want 3 (the deleted one removed): %q", ovnModule, len(texts), texts)
	}
	poll(ctx, t, "the other module's flow put back", func() (bool, error) {
		return slices.ContainsFunc(dumpFlows(ctx, t, s), func(d string) bool { return sameFlow(d, other) }), nil
	})
	fs.waitConverged(ctx, t)
	if _, err := fs.c.Reconcile(ctx, sandbox.OVNBridge); err != nil {
		t.Fatal(err)
	}
	changes, err := fs.c.Diff(ctx, sandbox.OVNBridge)
	if err != nil || len(changes) != 0 {
		t.Errorf("diff after a second replay: %d changes (%v)", len(changes), err)
	}
	missing, samples, err := smp.stop()
	if err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		t.Errorf("after flowstated came back br-int lost what the controller left (%d dumps): %s", samples, missing)
	} else {
		t.Logf("%d dumps of br-int from flowstated's start on, the controller's flows as it left them in every one", samples)
	}
	if _, err := os.Stat(fs.lease + ".relayed." + sandbox.OVNBridge); !os.IsNotExist(err) {
		t.Errorf("the guard's record of its relayed session is still there after flowstated learned it (%v)", err)
	}
}

// TestGuardRelayNotLearnedAfterVswitchdRestart: a vswitchd restarted after
// the guard's last relayed session holds nothing the controller installed,
// so flowstated back does not learn from it: the store keeps module ovn's
// flows as recorded (never wiped by an empty switch) and replays them, and
// the guard's record goes.
func TestGuardRelayNotLearnedAfterVswitchdRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, fs := relayedOfctl(ctx, t)
	if err := s.RestartVswitchd(ctx, false); err != nil {
		t.Fatal(err)
	}
	fs.start(ctx, t)
	fs.waitConverged(ctx, t)
	texts := storedTexts(ctx, t, fs)
	for _, f := range []string{kept, changed, deleted} {
		if !slices.ContainsFunc(texts, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("module %s lost %q to a vswitchd that restarted after the relay: %q", ovnModule, f, texts)
		}
	}
	flows := dumpFlows(ctx, t, s)
	for _, f := range []string{kept, changed, deleted, other} {
		if !slices.ContainsFunc(flows, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("br-int lacks %q after flowstated's replay: %q", f, flows)
		}
	}
	if !strings.Contains(fs.logs.String(), "vswitchd restarted since the guard relayed") {
		t.Errorf("flowstated did not say why it learned nothing")
	}
	if _, err := os.Stat(fs.lease + ".relayed." + sandbox.OVNBridge); !os.IsNotExist(err) {
		t.Errorf("the guard's record of its relayed session is still there (%v)", err)
	}
}

// The flows of relayedOfctl: module ovn's (kept, changed, deleted) and
// module pipeline's (other) before flowstated goes away; what the
// controller leaves through the relay (kept, added, changedT; deleted gone)
// and does to pipeline's (otherT).
const (
	kept     = "priority=10,in_port=1 actions=drop"
	changed  = "priority=11,in_port=2 actions=drop"
	deleted  = "priority=12,in_port=3 actions=drop"
	other    = "priority=5,in_port=9 actions=drop"
	added    = "priority=20,in_port=4 actions=drop"
	changedT = "priority=11,in_port=2 actions=resubmit(,2)"
	otherT   = "priority=5,in_port=9 actions=resubmit(,3)"
)

// relayedOfctl runs flowstated with module ovn declared through its proxy
// by ovs-ofctl (a controller that never reconnects) and module pipeline
// through the API, kills it, and changes both through the guard's relay.
func relayedOfctl(ctx context.Context, t *testing.T) (*sandbox.Sandbox, *flowstatedProc) {
	t.Helper()
	s, fs := startRelayed(ctx, t)
	if _, err := fs.c.Put(ctx, client.Module{Bridge: sandbox.OVNBridge, Name: "pipeline"}, client.FlowText(other)); err != nil {
		t.Fatal(err)
	}
	sock := recordedThenAway(ctx, t, s, fs)
	for _, args := range [][]string{
		{"add-flow", sock, added},
		{"mod-flows", "--strict", sock, changedT},
		{"del-flows", "--strict", sock, "priority=12,in_port=3"},
		{"mod-flows", "--strict", sock, otherT},
	} {
		if _, err := s.Ofctl(ctx, args...); err != nil {
			t.Fatalf("ovs-ofctl %q through the guard's relay: %v", args, err)
		}
	}
	if _, err := os.Stat(fs.lease + ".relayed." + sandbox.OVNBridge); err != nil {
		t.Errorf("the guard left no record of its relayed session: %v", err)
	}
	relayed := dumpFlows(ctx, t, s)
	for _, f := range []string{kept, added, changedT, otherT} {
		if !slices.ContainsFunc(relayed, func(d string) bool { return sameFlow(d, f) }) {
			t.Fatalf("the relay did not leave %q on br-int: %q", f, relayed)
		}
	}

	return s, fs
}

// recordedThenAway records module ovn's three flows (kept, changed,
// deleted) through flowstated's proxy by ovs-ofctl, then kills flowstated
// and waits for the guard's relay; it returns the proxy's socket.
func recordedThenAway(ctx context.Context, t *testing.T, s *sandbox.Sandbox, fs *flowstatedProc) string {
	t.Helper()
	sock := "unix:" + filepath.Join(fs.proxyDir, sandbox.OVNBridge+".mgmt")
	for _, f := range []string{kept, changed, deleted} {
		if _, err := s.Ofctl(ctx, "add-flow", sock, f); err != nil {
			t.Fatalf("add-flow %q through flowstated's proxy: %v", f, err)
		}
	}
	poll(ctx, t, "module ovn's three flows recorded", func() (bool, error) {
		stored, err := fs.c.List(ctx, client.Filter{Bridge: sandbox.OVNBridge, Module: ovnModule})
		return err == nil && len(stored) == 3, err
	})
	fs.waitConverged(ctx, t)

	fs.kill(t)
	poll(ctx, t, "the guard relaying", func() (bool, error) { return strings.Contains(fs.guardLog(), "relaying"), nil })
	return sock
}

// storedTexts is the text of module ovn's entries on br-int in the store.
func storedTexts(ctx context.Context, t *testing.T, fs *flowstatedProc) []string {
	t.Helper()
	stored, err := fs.c.List(ctx, client.Filter{Bridge: sandbox.OVNBridge, Module: ovnModule})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range stored {
		texts = append(texts, e.Text)
	}
	return texts
}

// startRelayed builds flowstated and starts it on a sandbox with br-int
// and its proxy.
func startRelayed(ctx context.Context, t *testing.T) (*sandbox.Sandbox, *flowstatedProc) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/flowstate-io/flowstate/cmd/flowstated").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	addIntegrationBridge(ctx, t, s)
	fs := newFlowstatedProc(t, bin, s)
	fs.start(ctx, t)
	return s, fs
}

// waitFirstReplay waits for the first replay of br-int of the running
// flowstated and returns it.
func (f *flowstatedProc) waitFirstReplay(ctx context.Context, t *testing.T) client.Replay {
	t.Helper()
	var r client.Replay
	poll(ctx, t, "flowstated's first replay of br-int", func() (bool, error) {
		st, err := f.c.Status(ctx)
		if err != nil || len(st.Bridges) != 1 {
			return false, nil
		}
		r = st.Bridges[0].LastReplay
		return !r.FinishedAt.IsZero(), nil
	})
	if r.Error != "" {
		t.Fatalf("flowstated's first replay failed: %s", r.Error)
	}
	return r
}

// sameFlow reports whether the dumped flow d is f (ovs-ofctl's text, which
// dump-flows prints with its own spacing and field order kept).
func sameFlow(d, f string) bool {
	norm := func(s string) string { return strings.Join(strings.Fields(strings.ReplaceAll(s, ",", " ")), " ") }
	return norm(d) == norm(f) || strings.HasSuffix(norm(d), " "+norm(f))
}

// sampler dumps br-int without pause and notes the first dump that lacks
// one of want, or holds one of absent.
type sampler struct {
	want, absent []string
	quit, done   chan struct{}
	once         sync.Once
	mu           sync.Mutex
	missing      string
	samples      int
	err          error
}

func startSampler(ctx context.Context, t *testing.T, s *sandbox.Sandbox, want, absent []string) *sampler {
	sm := &sampler{want: want, absent: absent, quit: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { _, _, _ = sm.stop() })
	began := time.Now()
	go func() {
		defer close(sm.done)
		for {
			select {
			case <-sm.quit:
				return
			default:
			}
			flows, err := s.DumpFlows(ctx, sandbox.OVNBridge)
			sm.mu.Lock()
			if err != nil {
				sm.err = err
				sm.mu.Unlock()
				return
			}
			sm.samples++
			if sm.missing == "" {
				sm.missing = sm.check(flows, time.Since(began))
			}
			sm.mu.Unlock()
		}
	}()
	return sm
}

// check returns what is wrong with the dump flows, "" nothing.
func (sm *sampler) check(flows []string, at time.Duration) string {
	for _, w := range sm.want {
		if !slices.ContainsFunc(flows, func(d string) bool { return sameFlow(d, w) }) {
			return fmt.Sprintf("%q missing at +%v (dump %d, %d flows)", w, at.Round(time.Millisecond), sm.samples, len(flows))
		}
	}
	for _, a := range sm.absent {
		if slices.ContainsFunc(flows, func(d string) bool { return sameFlow(d, a) }) {
			return fmt.Sprintf("%q back at +%v (dump %d)", a, at.Round(time.Millisecond), sm.samples)
		}
	}
	return ""
}

// stop ends the dumps and returns the first violation ("" none) and the
// number of dumps.
func (sm *sampler) stop() (missing string, samples int, err error) {
	sm.once.Do(func() { close(sm.quit) })
	<-sm.done
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.missing, sm.samples, sm.err
}
