package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// writeFlows writes n distinct flows of table 10, from flow number from on,
// to a file in dir, about 80 bytes a line.
func writeFlows(t *testing.T, dir, name string, n, from int) string {
	t.Helper()
	var b strings.Builder
	for j := from; j < from+n; j++ {
		fmt.Fprintf(&b, "table=10,priority=100,tcp,nw_src=10.%d.%d.%d,tp_dst=80,actions=resubmit(,20)\n", j>>16, (j>>8)&255, j&255)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLargeFiles: add-flows and replace-flows take a file beyond what one
// gRPC message holds (4 MiB by default, about 50,000 of these flows) and
// beyond the 100,000 entries a request once allowed, in one command each,
// and diff prints a divergence of that size.
func TestLargeFiles(t *testing.T) {
	n := map[bool]int{false: 150_000, true: 70_000}[raceEnabled]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	sb, srv := e.Sandbox, e.Config.Listen
	if out, err := run(ctx, t, srv, "", "wait"); err != nil {
		t.Fatalf("wait: %v %q", err, out)
	}
	long := []string{"--timeout", "100s"}

	first := writeFlows(t, sb.Dir(), "first.flows", n, 0)
	out, err := run(ctx, t, srv, "", append(long, "add-flows", "--module", "policy", first)...)
	if want := fmt.Sprintf("%d flows applied", n); err != nil || !strings.Contains(out, want) {
		t.Fatalf("add-flows of %d flows: %v\n%s", n, err, out)
	}

	// Half the set changes: n/2 kept, n/2 new, n/2 removed.
	next := writeFlows(t, sb.Dir(), "next.flows", n, n/2)
	out, err = run(ctx, t, srv, "", append(long, "replace-flows", "--module", "policy", next)...)
	want := fmt.Sprintf("policy: %d flows: %d added, 0 changed, %d removed, %d unchanged\napplied\n", n, n/2, n/2, n/2)
	if err != nil || out != want {
		t.Fatalf("replace-flows of %d flows: %v\n%s\nwant\n%s", n, err, out, want)
	}

	if out, err := sb.Ofctl(ctx, "del-flows", "br-int", "table=10"); err != nil {
		t.Fatal(err, out)
	}
	out, err = run(ctx, t, srv, "", append(long, "diff")...)
	var ec exitCode
	if !errors.As(err, &ec) || ec.code != exitUsage || ec.msg != fmt.Sprintf("%d differences: %d to add, 0 to change, 0 to delete", n, n) ||
		strings.Count(out, "\n+ table=10,") != n-1 {
		t.Fatalf("diff of %d missing flows: %v (%d lines)", n, err, strings.Count(out, "\n"))
	}
}
