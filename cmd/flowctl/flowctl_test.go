package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
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
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	bootID := filepath.Join(sb.Dir(), "boot_id")
	if err := os.WriteFile(bootID, []byte("b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := "unix://" + filepath.Join(sb.Dir(), "fs.sock")
	d, err := server.Start(ctx, server.Config{
		Listen: srv, DBPath: filepath.Join(sb.Dir(), "fs.db"), BootIDFile: bootID,
		RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{"br-int"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	}()

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
		if out, err := run(ctx, t, srv, "", "wait"); err != nil || out != "converged\n" {
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
		<-done
		if !regexp.MustCompile(`#\d+ module_ready module=pipeline "module ready for this boot"`).MatchString(out.String()) {
			t.Fatalf("watch line format:\n%s", out.String())
		}
	})
	t.Run("status", func(t *testing.T) {
		out, err := run(ctx, t, srv, "", "status")
		if err != nil || !strings.Contains(out, "br-int") || !strings.Contains(out, "pipeline") {
			t.Fatalf("status: %v\n%s", err, out)
		}
	})
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
