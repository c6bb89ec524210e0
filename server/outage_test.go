package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// pipeline is the one from the outage report that started the project.
var pipeline = []string{
	"table=0,priority=100,ip,actions=ct(table=1,zone=65520)",
	"table=1,priority=100,ct_state=+inv+trk,ip,actions=drop",
	"table=1,priority=90,ip,actions=resubmit(,2)",
	"table=2,priority=100,ct_state=+new+trk,ip,actions=ct(commit,table=3,zone=65520)",
	"table=2,priority=90,ip,actions=resubmit(,3)",
	"table=3,priority=100,ip,actions=normal",
}

// env is a testenv.Env whose sandbox holds br-int, managed by flowstated,
// and an oracle bridge (br-ref) that ovs-ofctl programs with the same text;
// each with ports <bridge>-p1 and <bridge>-p2. t, sb, c, dir and sock are
// short names for what stays the same for the env's life.
type env struct {
	*testenv.Env
	t    *testing.T
	sb   *sandbox.Sandbox
	c    *client.Client
	dir  string
	sock string // Config.Listen, with its unix:// scheme
}

func newEnv(ctx context.Context, t *testing.T, opts ...func(*server.Config)) *env {
	t.Helper()
	te := testenv.New(ctx, t, testenv.Bridges("br-int", "br-ref"), testenv.Configure(opts...))
	return &env{Env: te, t: t, sb: te.Sandbox, c: te.Client, dir: te.Sandbox.Dir(), sock: te.Config.Listen}
}

// limitTable7 makes br-int's table 7 hold one flow at most: OVS refuses the
// second at commit (OFPFMFC_TABLE_FULL) whatever its syntax, a refusal the
// parser cannot catch first. With vswitchd running it returns once vswitchd
// applied the limit; with it down (running false) the limit waits in OVSDB.
func (e *env) limitTable7(ctx context.Context, running bool) {
	e.t.Helper()
	args := []string{"--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
		"--", "set", "Bridge", "br-int", "flow_tables:7=@ft"}
	if !running {
		args = append([]string{"--no-wait"}, args...)
	}
	if out, err := e.sb.Vsctl(ctx, args...); err != nil {
		e.t.Fatal(err, out)
	}
}

// oracle programs br-ref with `ovs-ofctl --bundle replace-flows` from the
// same text.
func (e *env) oracle(ctx context.Context, flows []string) {
	e.t.Helper()
	e.ofctlFlows(ctx, "replace-flows", flows)
}

// ofctlFlows runs `ovs-ofctl --bundle CMD br-ref FILE` with flows in FILE.
// replace-flows does not carry flow_mod flags (send_flow_rem, ...); tests of
// flows with flags use del-flows then add-flows.
func (e *env) ofctlFlows(ctx context.Context, cmd string, flows []string) {
	e.t.Helper()
	f := filepath.Join(e.dir, "oracle.txt")
	if err := os.WriteFile(f, []byte(strings.Join(flows, "\n")+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.sb.Ofctl(ctx, "--bundle", cmd, "br-ref", f); err != nil {
		e.t.Fatalf("ovs-ofctl %s: %v: %s", cmd, err, out)
	}
}

func (e *env) dump(ctx context.Context, br string) []string {
	e.t.Helper()
	flows, err := e.sb.DumpFlows(ctx, br)
	if err != nil {
		e.t.Fatal(err)
	}
	return flows
}

// waitRestored polls until flowstated reports br-int converged and the flag
// is cleared in OVSDB.
func (e *env) waitRestored(ctx context.Context) {
	e.t.Helper()
	poll(ctx, e.t, "br-int converged and flow-restore-wait cleared", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, nil
		}
		on, err := e.sb.FlowRestoreWait(ctx)
		if err != nil {
			return false, err
		}
		return st.Bridges[0].Converged && !on, nil
	})
}

// txOf returns the tx packet counter of port p of bridge br.
func (e *env) txOf(ctx context.Context, br, p string) uint64 {
	e.t.Helper()
	_, tx, err := e.sb.PortStats(ctx, br, br+"-"+p)
	if err != nil {
		e.t.Fatal(err)
	}
	return tx
}

func (e *env) rxOf(ctx context.Context, br, p string) uint64 {
	e.t.Helper()
	rx, _, err := e.sb.PortStats(ctx, br, br+"-"+p)
	if err != nil {
		e.t.Fatal(err)
	}
	return rx
}

// inject sends one SYN into p1 of br-int and waits until p1 counted it.
func (e *env) inject(ctx context.Context, pkt sandbox.Packet) {
	e.t.Helper()
	e.injectOn(ctx, "br-int", pkt)
}

// injectOn sends one SYN into p1 of br and waits until p1 counted it.
func (e *env) injectOn(ctx context.Context, br string, pkt sandbox.Packet) {
	e.t.Helper()
	rx0 := e.rxOf(ctx, br, "p1")
	if err := e.sb.InjectSYN(ctx, br, br+"-p1", pkt); err != nil {
		e.t.Fatal(err)
	}
	poll(ctx, e.t, br+" p1 received the SYN", func() (bool, error) {
		return e.rxOf(ctx, br, "p1") > rx0, nil
	})
}

func TestOutageReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	poll(ctx, t, "br-int converged", func() (bool, error) {
		st, err := e.c.Status(ctx)
		return err == nil && st.Bridges[0].Converged, nil
	})

	// Declare the pipeline while the switch forwards: applied at once.
	entries := make([]client.Entry, len(pipeline))
	for i, l := range pipeline {
		entries[i] = client.FlowText(l)
	}
	applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, entries...)
	if err != nil || !applied {
		t.Fatalf("put: applied=%v err=%v", applied, err)
	}
	e.oracle(ctx, pipeline)
	want := e.dump(ctx, "br-ref")
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("after put, br-int holds\n%s\nwant (ovs-ofctl on br-ref)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The outage: flowstated is down while vswitchd restarts gated.
	e.Stop()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := e.dump(ctx, "br-int"); len(got) != 1 || !strings.Contains(got[0], "actions=NORMAL") {
		t.Fatalf("restarted gated vswitchd holds %q, want only the default NORMAL flow", got)
	}
	tx0 := e.txOf(ctx, "br-int", "p2")
	e.inject(ctx, sandbox.Packet{})
	if tx := e.txOf(ctx, "br-int", "p2"); tx != tx0 {
		t.Fatalf("gated vswitchd forwarded a SYN (p2 tx %d -> %d)", tx0, tx)
	}

	// flowstated comes back: one bundle restores the pipeline, then the flag goes.
	e.Start(ctx)
	e.waitRestored(ctx)
	e.oracle(ctx, pipeline) // br-ref lost its flows in the restart too
	want = e.dump(ctx, "br-ref")
	got := e.dump(ctx, "br-int")
	if !slices.Equal(got, want) {
		t.Fatalf("after restore, br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range got {
		if strings.Contains(f, "priority=0 ") {
			t.Fatalf("default flow survived the restore: %s", f)
		}
	}
	st, err := e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.VswitchdAcknowledged || st.FlowRestoreWait {
		t.Fatalf("after restore: flag %v, acknowledged by vswitchd %v", st.FlowRestoreWait, st.VswitchdAcknowledged)
	}
	if r := st.Bridges[0].LastReplay; r.Error != "" || r.Messages != len(pipeline)+1 {
		t.Fatalf("last replay = %v, want %d adds + 1 delete of the default flow", r, len(pipeline))
	}

	// Traffic flows again through the restored conntrack pipeline, and the
	// SYN dropped while gated was not queued: exactly one more packet out.
	e.inject(ctx, sandbox.Packet{SrcPort: 40001})
	poll(ctx, t, "SYN forwarded to p2", func() (bool, error) {
		return e.txOf(ctx, "br-int", "p2") > tx0, nil
	})
	if tx := e.txOf(ctx, "br-int", "p2"); tx != tx0+1 {
		t.Fatalf("p2 sent %d packets, want exactly 1", tx-tx0)
	}
}

func TestPutRejectedByOVS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	poll(ctx, t, "br-int converged", func() (bool, error) {
		st, err := e.c.Status(ctx)
		return err == nil && st.Bridges[0].Converged, nil
	})
	// Table 7 holds one flow at most: OVS refuses the second at commit,
	// whatever its syntax.
	e.limitTable7(ctx, true)
	_, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"},
		client.FlowText("table=7,priority=1,ip,actions=drop"), client.FlowText("table=7,priority=2,ip,actions=drop"))
	var ee *errdefs.EntryError
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.As(err, &ee) || ee.Index != 1 || !strings.Contains(err.Error(), "OFPFMFC_TABLE_FULL") {
		t.Fatalf("put beyond the table's limit: %v, want INVALID_ARGUMENT naming entry 1 and OVS's error", err)
	}
	es, err := e.c.List(ctx, client.Filter{})
	if err != nil || len(es) != 0 {
		t.Fatalf("after a rejected put the store holds %d entries (%v)", len(es), err)
	}
	if got := e.dump(ctx, "br-int"); len(got) != 0 {
		t.Fatalf("after a rejected put the switch holds %q", got)
	}

	// Ownership: another module cannot take over a declared identity.
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.FlowText(pipeline[0])); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.FlowText(pipeline[0]))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"pipeline"`) {
		t.Fatalf("put of another module's flow: %v, want FAILED_PRECONDITION naming the owner", err)
	}
	// Syntax errors name the entry and the token.
	_, err = e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.FlowText("table=0,nw_srcc=1.2.3.4,actions=drop"))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "nw_srcc") {
		t.Fatalf("put with a typo: %v", err)
	}
	// Delete by identity removes it from the switch and the store.
	if _, err := e.c.Delete(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.FlowText("table=0,priority=100,ip")); err != nil {
		t.Fatal(err)
	}
	if got := e.dump(ctx, "br-int"); len(got) != 0 {
		t.Fatalf("after delete the switch holds %q", got)
	}
}

// poll is testenv.Poll.
var poll = testenv.Poll
