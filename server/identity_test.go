package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server"
)

// putPipeline declares the pipeline on a live br-int and returns the dump.
func (e *env) putPipeline(ctx context.Context) []string {
	e.t.Helper()
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil || !applied {
		e.t.Fatalf("put: applied=%v err=%v", applied, err)
	}
	got := e.dump(ctx, "br-int")
	if len(got) != len(pipeline) {
		e.t.Fatalf("br-int holds %d flows, want %d", len(got), len(pipeline))
	}
	return got
}

// waitStandingAside polls until status says br-int stands aside, and returns
// the reason.
func (e *env) waitStandingAside(ctx context.Context, want string) string {
	e.t.Helper()
	var reason string
	poll(ctx, e.t, "br-int standing aside", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, nil
		}
		b := st.Bridges[0]
		reason = b.Reason
		if b.Converged && strings.Contains(reason, "stands aside") {
			return false, errors.New("converged while standing aside")
		}
		return strings.Contains(reason, want), nil
	})
	return reason
}

func (e *env) externalID(ctx context.Context, key string) string {
	e.t.Helper()
	out, err := e.sb.Vsctl(ctx, "--if-exists", "get", "Bridge", "br-int", "external_ids:"+key)
	if err != nil {
		e.t.Fatal(err, out)
	}
	return strings.Trim(strings.TrimSpace(out), `"`)
}

var storeIDInReason = regexp.MustCompile(`not this one \(([0-9a-f-]{36})\)`)

// TestStoreLost: the store is truncated to 0 bytes (a bad restore), or
// deleted, while br-int holds the pipeline of the earlier store. The new
// flowstated stands aside: every flow stays, status says what to do, and
// each recovery it names works.
func TestStoreLost(t *testing.T) {
	cases := []struct {
		name string
		lose func(path string) error
		// recover follows one of the steps the reason names; the store
		// then manages br-int again with the pipeline.
		recover func(ctx context.Context, e *env, backup []byte, reason string)
	}{
		{"truncated to 0 bytes", func(p string) error { return os.Truncate(p, 0) },
			func(ctx context.Context, e *env, backup []byte, _ string) {
				// Restore the backup, as the reason says.
				e.Stop()
				if err := os.WriteFile(e.Config.DBPath, backup, 0o600); err != nil {
					e.t.Fatal(err)
				}
				e.Start(ctx)
			}},
		{"deleted", os.Remove,
			func(ctx context.Context, e *env, _ []byte, reason string) {
				// Controllers re-sync into the new store (stored, not
				// applied), then the operator adopts the bridge.
				if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil || applied {
					e.t.Fatalf("put while standing aside: applied=%v err=%v, want stored only", applied, err)
				}
				m := storeIDInReason.FindStringSubmatch(reason)
				if m == nil {
					e.t.Fatalf("reason names no store id: %s", reason)
				}
				if !strings.Contains(reason, "ovs-vsctl set Bridge br-int external_ids:flowstate-store="+m[1]) {
					e.t.Fatalf("reason does not give the adoption command: %s", reason)
				}
				if out, err := e.sb.Vsctl(ctx, "set", "Bridge", "br-int", "external_ids:flowstate-store="+m[1]); err != nil {
					e.t.Fatal(err, out)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			e := newEnv(ctx, t)
			e.Start(ctx)
			e.WaitConverged(ctx)
			want := e.putPipeline(ctx)
			first := e.externalID(ctx, "flowstate-store")
			if len(first) != 36 || !strings.Contains(e.externalID(ctx, "flowstate-instance"), "pid=") {
				t.Fatalf("OVSDB records store %q, instance %q", first, e.externalID(ctx, "flowstate-instance"))
			}
			e.Stop()
			backup, err := os.ReadFile(e.Config.DBPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.lose(e.Config.DBPath); err != nil {
				t.Fatal(err)
			}

			e.Start(ctx)
			reason := e.waitStandingAside(ctx, "was last managed by another flowstate store ("+first)
			for _, w := range []string{"stands aside and deletes nothing", "restore the store's backup to " + e.Config.DBPath, "--take-over"} {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q does not say %q", reason, w)
				}
			}
			if _, err := e.c.Reconcile(ctx, "br-int"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("Reconcile while standing aside: %v, want FAILED_PRECONDITION", err)
			}
			if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
				t.Fatalf("standing aside, br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}

			tc.recover(ctx, e, backup, reason)
			e.WaitConverged(ctx)
			if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
				t.Fatalf("after recovery, br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestSecondInstanceRefused: a second flowstated with its own store and
// socket, aimed at br-int while the first runs, refuses to start and names
// the first; nothing changes on the switch and the first stays converged.
// Once the first is gone, the second still stands aside (another store
// managed br-int) until told to take over.
func TestSecondInstanceRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	want := e.putPipeline(ctx)

	cfg2 := e.Config
	cfg2.DBPath = filepath.Join(e.dir, "second", "flowstate.db")
	cfg2.Listen = "unix://" + filepath.Join(e.dir, "fs2.sock")
	_, err := server.Start(ctx, cfg2)
	if err == nil {
		t.Fatal("a second flowstated started on a bridge the first manages")
	}
	for _, w := range []string{"managed by another live flowstated", "pid=", "store=" + e.externalID(ctx, "flowstate-store"), "listen=" + e.sock} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not name %q", err, w)
		}
	}
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("after the second start, br-int holds %q", got)
	}
	if st, err := e.c.Status(ctx); err != nil || !st.Bridges[0].Converged {
		t.Fatalf("first flowstated after the second's attempt: %v, %v", st, err)
	}

	// The first is gone: the lock is free, but the store is another one.
	e.Stop()
	// A second Env on the same sandbox: its own store, socket and client.
	te2 := *e.Env
	te2.Config, te2.Sock, te2.Client = cfg2, strings.TrimPrefix(cfg2.Listen, "unix://"), e.Dial(cfg2.Listen)
	t.Cleanup(te2.Stop)
	e2 := &env{Env: &te2, t: t, sb: e.sb, c: te2.Client, dir: e.dir, sock: cfg2.Listen}
	e2.Start(ctx)
	e2.waitStandingAside(ctx, "was last managed by another flowstate store")
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("second flowstated standing aside, br-int holds %q", got)
	}
	e2.Stop()

	// Asked explicitly, it takes over: its empty store wins.
	e2.Config.TakeOver = true
	e2.Start(ctx)
	e2.WaitConverged(ctx)
	if got := e.dump(ctx, "br-int"); len(got) != 0 {
		t.Fatalf("after --take-over with an empty store, br-int holds %q", got)
	}
	e2.Stop()
}
