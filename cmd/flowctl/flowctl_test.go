package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// run executes flowctl with args against server and returns its output.
func run(ctx context.Context, t *testing.T, srv string, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--server", srv, "--timeout", "20s"}, args...))
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func TestFlowctl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	sb, srv := e.Sandbox, e.Config.Listen

	flows := "# the pipeline\ntable=0,priority=100,ip,actions=ct(table=1,zone=65520)\n\ntable=1,priority=90,ip,actions=normal\n"
	file := filepath.Join(sb.Dir(), "flows.txt")
	if err := os.WriteFile(file, []byte(flows), 0o600); err != nil {
		t.Fatal(err)
	}
	// The bridge converges shortly after start; until then the flows are
	// stored for the replay. Either way they end up on the switch.
	if out, err := run(ctx, t, srv, "", "add-flows", "--module", "pipeline", file); err != nil || !strings.Contains(out, "2 flows") {
		t.Fatalf("add-flows: %v\n%s", err, out)
	}
	out, err := run(ctx, t, srv, "", "dump-flows")
	if err != nil {
		t.Fatal(err)
	}
	if want := "priority=100,ip actions=ct(table=1,zone=65520)\ntable=1, priority=90,ip actions=NORMAL\n"; out != want {
		t.Fatalf("dump-flows:\n%s\nwant\n%s", out, want)
	}

	t.Run("syntax errors name file and line", func(t *testing.T) {
		bad := filepath.Join(sb.Dir(), "bad.txt")
		if err := os.WriteFile(bad, []byte("table=0,actions=drop\n\ntable=0,nw_srcc=1.2.3.4,actions=drop\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := run(ctx, t, srv, "", "add-flows", "--module", "pipeline", bad)
		if err == nil || !strings.Contains(err.Error(), "bad.txt:3") || !strings.Contains(err.Error(), "nw_srcc") {
			t.Fatalf("error %v, want it to name bad.txt:3 and nw_srcc", err)
		}
	})
	t.Run("refusals name the line", func(t *testing.T) {
		// Owned by pipeline: FAILED_PRECONDITION for the second line.
		_, err := run(ctx, t, srv, "table=5,priority=1,actions=drop\ntable=1,priority=90,ip,actions=drop\n", "add-flows", "--module", "pod", "-")
		if err == nil || !strings.Contains(err.Error(), "-:2") || !strings.Contains(err.Error(), `"pipeline"`) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("replace-flows and ready", func(t *testing.T) {
		out, err := run(ctx, t, srv, "table=1,priority=90,ip,actions=normal\n", "replace-flows", "--module", "pipeline", "--ready", "-")
		if err != nil || !strings.Contains(out, "module pipeline ready") {
			t.Fatalf("replace-flows: %v\n%s", err, out)
		}
		out, _ = run(ctx, t, srv, "", "dump-flows", "--module", "pipeline")
		if strings.Count(out, "\n") != 1 {
			t.Fatalf("after replace-flows:\n%s", out)
		}
	})
	t.Run("diff exits 2 on a difference", func(t *testing.T) {
		if out, err := run(ctx, t, srv, "", "wait"); err != nil || !strings.HasSuffix(out, "converged\n") {
			t.Fatalf("wait: %v %q", err, out)
		}
		out, _ := run(ctx, t, srv, "", "status", "-o", "json")
		// protojson varies its spacing on purpose.
		if !regexp.MustCompile(`"converged":\s*true`).MatchString(out) {
			t.Fatalf("status after wait:\n%s", out)
		}
		if out, err := sb.Ofctl(ctx, "add-flow", "br-int", "table=7,actions=drop"); err != nil {
			t.Fatal(err, out)
		}
		out, err = run(ctx, t, srv, "", "diff")
		var ec exitCode
		if !errors.As(err, &ec) || ec.code != 2 || !strings.Contains(out, "- table=7, actions=drop") {
			t.Fatalf("diff: %v\n%s", err, out)
		}
		if _, err := run(ctx, t, srv, "", "reconcile"); err != nil {
			t.Fatal(err)
		}
		if out, err := run(ctx, t, srv, "", "diff"); err != nil || out != "" {
			t.Fatalf("diff after reconcile: %v\n%s", err, out)
		}
	})
	t.Run("groups and meters", func(t *testing.T) {
		if _, err := run(ctx, t, srv, "meter=1,kbps,band=type=drop,rate=1000\n", "add-meters", "--module", "lb", "-"); err != nil {
			t.Fatal(err)
		}
		if _, err := run(ctx, t, srv, "group_id=5,type=select,bucket=weight:10,actions=output:1\n", "add-groups", "--module", "lb", "-"); err != nil {
			t.Fatal(err)
		}
		out, err := run(ctx, t, srv, "", "dump-groups")
		if err != nil || !strings.Contains(out, "group_id=5,type=select") {
			t.Fatalf("dump-groups: %v\n%s", err, out)
		}
		out, err = run(ctx, t, srv, "", "dump-meters")
		if err != nil || !strings.Contains(out, "meter=1,kbps") {
			t.Fatalf("dump-meters: %v\n%s", err, out)
		}
		// A flow using an undeclared group is refused.
		_, err = run(ctx, t, srv, "table=2,priority=1,actions=group:6\n", "add-flows", "--module", "lb", "-")
		if err == nil || !strings.Contains(err.Error(), "group 6") {
			t.Fatalf("flow with an undeclared group: %v", err)
		}
		if _, err := run(ctx, t, srv, "group_id=5\n", "del-groups", "--module", "lb", "-"); err != nil {
			t.Fatal(err)
		}
		groups, err := sb.DumpGroups(ctx, "br-int")
		if err != nil || len(groups) != 0 {
			t.Fatalf("groups on the switch after del-groups: %q %v", groups, err)
		}
	})
	t.Run("a group of 2000 buckets and a selection method", func(t *testing.T) {
		var g strings.Builder
		g.WriteString("group_id=9,type=select,selection_method=hash,fields(ip_dst,ip_src)")
		for i := range 2000 {
			fmt.Fprintf(&g, ",bucket=bucket_id:%d,weight:100,actions=set_field:%#x->reg3,resubmit(,42)", i, 0x0a000000+i)
		}
		if _, err := run(ctx, t, srv, g.String()+"\n", "add-groups", "--module", "lb", "-"); err != nil {
			t.Fatal(err)
		}
		out, err := run(ctx, t, srv, "", "dump-groups")
		if err != nil || !strings.Contains(out, "group_id=9,type=select,selection_method=hash,fields(ip_src,ip_dst),bucket=bucket_id:0,") ||
			strings.Count(out, "bucket=") != 2000 {
			t.Fatalf("dump-groups: %v, %d buckets\n%.300s", err, strings.Count(out, "bucket="), out)
		}
		if out, err := run(ctx, t, srv, "", "diff"); err != nil || out != "" {
			t.Fatalf("diff: %v\n%.300s", err, out)
		}
	})
	t.Run("wait names what is missing", func(t *testing.T) {
		if err := sb.StopVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := sb.StartVswitchd(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		root := newRoot()
		root.SetArgs([]string{"--server", srv, "--timeout", "1s", "wait"})
		root.SetOut(&bytes.Buffer{})
		err := root.ExecuteContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "br-int not connected") {
			t.Fatalf("wait with vswitchd down: %v", err)
		}
	})
	t.Run("watch", func(t *testing.T) {
		wctx, stop := context.WithCancel(ctx)
		out := &lockedBuffer{}
		root := newRoot()
		root.SetOut(out)
		root.SetArgs([]string{"--server", srv, "watch"})
		done := make(chan error, 1)
		go func() { done <- root.ExecuteContext(wctx) }()
		// Watch streams events from now: mark ready until one shows up.
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), "module_ready module=pipeline") {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("no module_ready event; watch printed:\n%s", out.String())
			}
			if _, err := run(ctx, t, srv, "", "ready", "--module", "pipeline"); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("watch ended: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		stop()
		// An interrupted watch has done its job: exit status 0.
		if err := <-done; err != nil {
			t.Fatalf("watch after interrupt: %v", err)
		}
		if !regexp.MustCompile(`#\d+ module_ready module=pipeline "module ready for this boot"`).MatchString(out.String()) {
			t.Fatalf("watch line format:\n%s", out.String())
		}
	})
	t.Run("replace-flows counts adds and removals", func(t *testing.T) {
		in := "table=3,priority=1,actions=drop\ntable=3,priority=2,actions=drop\ntable=3,priority=3,actions=drop\n"
		if _, err := run(ctx, t, srv, in, "replace-flows", "--module", "counts", "-"); err != nil {
			t.Fatal(err)
		}
		in = "table=3,priority=1,actions=drop\ntable=3,priority=2,actions=normal\ntable=3,priority=4,actions=drop\n"
		out, err := run(ctx, t, srv, in, "replace-flows", "--module", "counts", "-")
		if err != nil || !strings.Contains(out, "counts: 3 flows: 1 added, 1 changed, 1 removed, 1 unchanged") {
			t.Fatalf("replace-flows: %v\n%s", err, out)
		}
		out, err = run(ctx, t, srv, "", "replace-flows", "--module", "counts", "-")
		if err != nil || !strings.Contains(out, "counts: 0 flows: 0 added, 0 changed, 3 removed, 0 unchanged") {
			t.Fatalf("replace-flows with an empty file: %v\n%s", err, out)
		}
	})
	t.Run("exit codes, hints, version, examples", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			args   []string
			code   int
			stdout string // a prefix
			stderr string // a substring
		}{
			{"version", []string{"--version"}, 0, "flowctl ", ""},
			{"unknown command", []string{"nosuch"}, 2, "", `unknown command "nosuch"`},
			{"unknown flag", []string{"status", "--nosuch"}, 2, "", "unknown flag: --nosuch"},
			{"bad -o", []string{"--server", srv, "status", "-o", "xml"}, 2, "", `-o "xml": want text or json`},
			{"bad --since", []string{"--server", srv, "wait", "--released", "--since", "yesterday"}, 2, "", `--since "yesterday"`},
			{"unknown bridge", []string{"--server", srv, "--bridge", "br-nope", "dump-flows"}, 1, "",
				`not found: bridge "br-nope" is not managed by flowstated (it manages br-int)`},
			{"daemon not running", []string{"--server", filepath.Join(sb.Dir(), "none.sock"), "status"}, 1, "",
				"is flowstated running? check `systemctl status flowstated`"},
			{"bare socket path", []string{"--server", strings.TrimPrefix(srv, "unix://"), "dump-flows", "--module", "pipeline"}, 0, "table=1, priority=90,ip actions=NORMAL", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				stdout, stderr, code := flowctl(ctx, "", tc.args...)
				if code != tc.code || !strings.HasPrefix(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
					t.Fatalf("flowctl %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, stdout, stderr)
				}
				if strings.Contains(stderr, "rpc error") || strings.Contains(stderr, "produced zero addresses") {
					t.Fatalf("raw gRPC error:\n%s", stderr)
				}
			})
		}
		// The kind of a refusal is said once, not once by flowstated and
		// again by the client.
		_, stderr, code := flowctl(ctx, "table=1,priority=90,ip,actions=drop\n", "--server", srv, "add-flows", "--module", "pod", "-")
		if code != 1 || strings.Count(stderr, "failed precondition") != 1 {
			t.Fatalf("refusal: exit %d, stderr:\n%s", code, stderr)
		}
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			if c.Example == "" && c.Name() != "help" && c.Name() != "completion" && c.HasParent() && c.Parent().Name() != "completion" {
				t.Errorf("%s has no examples in --help", c.CommandPath())
			}
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(newRoot())
	})
	t.Run("prestart, wait --released, release", func(t *testing.T) {
		flag := func(want bool) {
			t.Helper()
			if on, err := sb.FlowRestoreWait(ctx); err != nil || on != want {
				t.Fatalf("flow-restore-wait %v (%v), want %v", on, err, want)
			}
		}
		ovsdb := []string{"--ovsdb", sb.DBAddr()}
		stdout, stderr, code := flowctl(ctx, "", append([]string{"--server", srv, "prestart"}, ovsdb...)...)
		if code != 0 || !strings.Contains(stdout, "flow-restore-wait armed") {
			t.Fatalf("prestart: exit %d\n%s%s", code, stdout, stderr)
		}
		flag(true)
		// Armed, and no release since: not released. (3 s: the first
		// Status must come back within it to give the reason, which a
		// loaded 2-core CI machine did not manage in 1 s.)
		_, stderr, code = flowctl(ctx, "", "--server", srv, "--timeout", "3s", "wait", "--released", "--since", "now")
		if code != 1 || !strings.Contains(stderr, "not released after 3s: flow-restore-wait is set") {
			t.Fatalf("wait --released while armed: exit %d\n%s", code, stderr)
		}
		stdout, stderr, code = flowctl(ctx, "", append([]string{"--server", srv, "release"}, ovsdb...)...)
		if code != 0 || !strings.Contains(stdout, "flow-restore-wait cleared by flowstated; ovs-vswitchd read it after") {
			t.Fatalf("release: exit %d\n%s%s", code, stdout, stderr)
		}
		flag(false)
		if stdout, stderr, code = flowctl(ctx, "", "--server", srv, "wait", "--converged", "--released", "--since", "1m"); code != 0 || stdout != "converged and released\n" {
			t.Fatalf("wait --converged --released: exit %d\n%s%s", code, stdout, stderr)
		}

		// flowstated does not answer: prestart clears the flag in OVSDB
		// and never fails, unless --strict; release clears it there too.
		none := filepath.Join(sb.Dir(), "none.sock")
		for _, strict := range []bool{false, true} {
			if err := sb.SetFlowRestoreWait(ctx, true); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"--server", none, "prestart"}, ovsdb...)
			want := 0
			if strict {
				args, want = append(args, "--strict"), 1
			}
			stdout, stderr, code = flowctl(ctx, "", args...)
			if code != want || !strings.Contains(stderr, "flow-restore-wait NOT ARMED: cannot reach flowstated") ||
				!strings.Contains(stderr, "cleared it in ovsdb-server at "+sb.DBAddr()) {
				t.Fatalf("prestart (strict %v) without flowstated: exit %d, want %d\n%s%s", strict, code, want, stdout, stderr)
			}
			flag(false)
		}
		if err := sb.SetFlowRestoreWait(ctx, true); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code = flowctl(ctx, "", append([]string{"--server", none, "release"}, ovsdb...)...)
		if code != 0 || !strings.Contains(stderr, "flowstated did not release the node") ||
			!strings.Contains(stdout, "flow-restore-wait cleared in ovsdb-server directly; ovs-vswitchd read it after") {
			t.Fatalf("release without flowstated: exit %d\n%s%s", code, stdout, stderr)
		}
		flag(false)
	})
	t.Run("status", func(t *testing.T) {
		out, err := run(ctx, t, srv, "", "status")
		if err != nil || !strings.Contains(out, "br-int") || !strings.Contains(out, "pipeline") {
			t.Fatalf("status: %v\n%s", err, out)
		}
		// flowctl's own connection is not listed as a client session.
		// This process holds the env's client too, whose session
		// flowctl lists and its own Status does not: one more, not two.
		st, err := e.Client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		others := 0
		for _, s := range st.Sessions {
			if int(s.PID) == os.Getpid() {
				others++
			}
		}
		out, err = run(ctx, t, srv, "", "status", "-o", "json")
		pid := regexp.MustCompile(`"pid":\s*` + strconv.Itoa(os.Getpid()) + `\b`)
		if n := len(pid.FindAllString(out, -1)); err != nil || n != others+1 {
			t.Fatalf("status -o json lists %d sessions of pid %d, want %d (the env's client, not itself): %v\n%s",
				n, os.Getpid(), others+1, err, out)
		}
	})
}

// flowctl runs flowctl as main does: stdout, stderr and the exit status.
func flowctl(ctx context.Context, stdin string, args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = execute(ctx, args, strings.NewReader(stdin), &o, &e)
	return o.String(), e.String(), code
}

// lockedBuffer is written by the command under test and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
