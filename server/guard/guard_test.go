package guard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

func startOVS(t *testing.T) (context.Context, *sandbox.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return ctx, sb
}

func logger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func pollUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestGuard: a renewed lease keeps the flag; a lease that stops changing
// for the grace gets it cleared; a second guard with ExitWhenIdle exits at
// once; the first exits once flowstated is gone and the flag is clear.
func TestGuard(t *testing.T) {
	ctx, sb := startOVS(t)
	lease := filepath.Join(sb.Dir(), "run", "lease")
	l, err := OpenLease(lease)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if present, err := Present(lease); err != nil || present {
		t.Fatalf("guard present before one runs: %v %v", present, err)
	}
	if err := sb.SetFlowRestoreWait(ctx, true); err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	cfg := Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: grace, ExitWhenIdle: true, Logger: logger(t)}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	pollUntil(ctx, t, "guard holds the lock", func() bool { p, _ := Present(lease); return p })

	// A second guard sees the first and leaves.
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("second guard: %v", err)
	}
	// Renewed for three graces: the flag stays.
	var renewed time.Time // the last renewal
	for end := time.Now().Add(3 * grace); time.Now().Before(end); {
		renewed = time.Now() // before: the guard counts from its own reading after it
		if _, err := l.Renew(""); err != nil {
			t.Fatal(err)
		}
		time.Sleep(grace / 10)
		if on, err := sb.FlowRestoreWait(ctx); err != nil || !on {
			t.Fatalf("flag cleared while the lease was renewed (%v)", err)
		}
	}
	// Silent: cleared after the grace, counted from the last renewal, and
	// the guard exits.
	pollUntil(ctx, t, "flag cleared", func() bool { on, _ := sb.FlowRestoreWait(ctx); return !on })
	if d := time.Since(renewed); d < grace {
		t.Fatalf("flag cleared %v after the last renewal, before the grace %v", d, grace)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("idle guard did not exit")
	}
	if p, _ := Present(lease); p {
		t.Fatal("lock still held after the guard exited")
	}
}

// TestGuardStop: a standby guard (no ExitWhenIdle) stopped while flowstated
// still renews waits up to its grace, then releases a flag left armed, as
// when a pod with both containers is deleted.
func TestGuardStop(t *testing.T) {
	ctx, sb := startOVS(t)
	lease := filepath.Join(sb.Dir(), "run", "lease")
	l, err := OpenLease(lease)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Renew(""); err != nil {
		t.Fatal(err)
	}
	if err := sb.SetFlowRestoreWait(ctx, true); err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	gctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(gctx, Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: grace, Logger: logger(t)})
	}()
	pollUntil(ctx, t, "guard holds the lock", func() bool { p, _ := Present(lease); return p })
	stop()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("stopped guard did not exit")
	}
	if d := time.Since(stopped); d < grace/2 {
		t.Fatalf("guard exited %v after stop, without waiting for flowstated", d)
	}
	if on, err := sb.FlowRestoreWait(ctx); err != nil || on {
		t.Fatalf("flag after the guard stopped: %v %v; want released", on, err)
	}
}

// TestHeartbeatCheck: each way a heartbeat fails the proof names its field.
func TestHeartbeatCheck(t *testing.T) {
	const id, other = "7c269566-1ba4-4649-8cd5-0a3d519d2917", "0d3c1a7e-52f1-4f0b-9d55-000000000000"
	want := Want{OVSDB: id, Grace: 10 * time.Second}
	hb := Heartbeat{PID: 42, Grace: 10 * time.Second, OVSDB: id, Addr: "unix:/db.sock", Writable: true}
	for _, tc := range []struct {
		name   string
		edit   func(h *Heartbeat, w *Want)
		age    time.Duration
		holder int
		field  string   // "" proven
		says   []string // in the message
	}{
		{name: "proven", age: time.Second, holder: 42},
		{name: "holder unknown", age: time.Second},
		{name: "shorter grace", edit: func(h *Heartbeat, _ *Want) { h.Grace = time.Second }, holder: 42},
		{name: "stale", age: StaleAfter(want.Grace) + time.Millisecond, holder: 42, field: FieldHeartbeat},
		{name: "not the holder's", holder: 43, field: FieldHeartbeat},
		{name: "own ovsdb unknown", edit: func(_ *Heartbeat, w *Want) { w.OVSDB = "" }, field: FieldOVSDB},
		{name: "other ovsdb", edit: func(h *Heartbeat, _ *Want) { h.OVSDB = other }, field: FieldOVSDB},
		{name: "longer grace", edit: func(h *Heartbeat, _ *Want) { h.Grace = 45 * time.Second }, field: FieldGrace},
		{name: "write refused", edit: func(h *Heartbeat, _ *Want) { h.Writable, h.WriteRefused = false, "not allowed: read only" },
			field: FieldWritable, says: []string{"unix:/db.sock", "not allowed: read only"}},
		{name: "older guard: a read only", edit: func(h *Heartbeat, _ *Want) { h.Writable = false },
			field: FieldWritable, says: []string{"unix:/db.sock", "older guard"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, w := hb, want
			if tc.edit != nil {
				tc.edit(&h, &w)
			}
			err := h.Check(w, tc.age, tc.holder)
			var perr *ProofError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("want proven, got %v", err)
			case tc.field != "" && (!errors.As(err, &perr) || perr.Field != tc.field):
				t.Fatalf("want a %s failure, got %v", tc.field, err)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("%v: does not say %q", err, want)
				}
			}
		})
	}
}

// TestHeartbeatEncoding: a heartbeat reads back as written; a partial one
// is refused, not taken for a guard with zero values.
func TestHeartbeatEncoding(t *testing.T) {
	hb := Heartbeat{PID: 7, Grace: 2 * time.Second, OVSDB: "u", Addr: "unix:/x", RoundTrip: time.Unix(1700000000, 123).UTC(),
		Seq: 9, LeaseMissing: true, WriteRefused: "not allowed: mutate operation not allowed when database server is in read only mode"}
	for _, writable := range []bool{false, true} {
		hb.Writable = writable
		got, err := parseHeartbeat(hb.encode())
		if err != nil || got != hb {
			t.Fatalf("round trip: %+v %v, want %+v", got, err, hb)
		}
	}
	// An older guard's heartbeat has neither: it proves no write.
	if got, err := parseHeartbeat([]byte("pid=1\ngrace=1s\novsdb=u\nround_trip=2023-11-14T22:13:20Z\nseq=1\n")); err != nil || got.Writable || got.WriteRefused != "" {
		t.Fatalf("an older guard's heartbeat: %+v %v, want no write proof", got, err)
	}
	b := hb.encode()
	if _, err := parseHeartbeat(b[:bytes.Index(b, []byte("seq="))]); err == nil {
		t.Fatal("half a heartbeat parsed")
	}
	// Cut after seq it reads as an older guard's: unproven all the same.
	if got, err := parseHeartbeat(b[:bytes.Index(b, []byte("writable="))]); err != nil || got.Check(Want{OVSDB: "u", Grace: time.Minute}, 0, 0) == nil {
		t.Fatalf("a heartbeat cut before its write proof: %+v %v, want parsed and unproven", got, err)
	}
	if id := leaseOVSDB([]byte("flowstated pid=1 seq=2 ovsdb=abc\n")); id != "abc" {
		t.Fatalf("lease ovsdb %q", id)
	}
	if id := leaseOVSDB([]byte("flowstated pid=1 seq=2 ovsdb=ab")); id != "" {
		t.Fatalf("a partial lease line gave ovsdb %q", id)
	}
}

// TestLeaseRecreated: a lease path unlinked or replaced under flowstated is
// re-created by the next renewal, which the guard then reads.
func TestLeaseRecreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "lease")
	l, err := OpenLease(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if re, err := l.Renew("a"); err != nil || re {
		t.Fatalf("first renewal: recreated %v, %v", re, err)
	}
	for _, fault := range []func() error{
		func() error { return os.Remove(path) },
		func() error {
			tmp := path + ".new"
			if err := os.WriteFile(tmp, []byte("stale\n"), 0o600); err != nil {
				return err
			}
			return os.Rename(tmp, path)
		},
	} {
		if err := fault(); err != nil {
			t.Fatal(err)
		}
		if re, err := l.Renew("a"); err != nil || !re {
			t.Fatalf("renewal after the path went: recreated %v, %v", re, err)
		}
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasPrefix(string(b), "flowstated pid=") || leaseOVSDB(b) != "a" {
			t.Fatalf("lease after re-creation: %q %v", b, err)
		}
		if re, err := l.Renew("a"); err != nil || re {
			t.Fatalf("renewal of the re-created lease: recreated %v, %v", re, err)
		}
	}
}

// TestHeartbeatFollowsOVSDB: a guard heartbeats with its database's
// identity, one that cannot reach its OVSDB writes none, and a guard
// flowstated spawned for another OVSDB than the lease's releases its own
// node and steps aside.
func TestHeartbeatFollowsOVSDB(t *testing.T) {
	ctx, sb := startOVS(t)
	c, err := ovsconfig.Dial(ctx, sb.DBAddr(), ovsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reached", func(t *testing.T) {
		lease := filepath.Join(sb.Dir(), "run", "lease-a")
		gctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(gctx, Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: time.Second, Logger: logger(t)})
		}()
		var first Heartbeat
		pollUntil(ctx, t, "a heartbeat", func() bool {
			var err error
			first, err = ReadHeartbeat(HeartbeatPath(lease))
			return err == nil
		})
		if first.OVSDB != id || first.Grace != time.Second || first.Addr != sb.DBAddr() || !first.Writable || first.WriteRefused != "" {
			t.Fatalf("heartbeat %+v, want ovsdb %s, grace 1s and a write taken", first, id)
		}
		pollUntil(ctx, t, "the next beat", func() bool {
			h, err := ReadHeartbeat(HeartbeatPath(lease))
			return err == nil && h.Seq > first.Seq && h.RoundTrip.After(first.RoundTrip)
		})
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(HeartbeatPath(lease)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a guard that left kept its heartbeat (%v)", err)
		}
	})
	t.Run("read-only copy", func(t *testing.T) {
		// The same _uuid, reached and answering: only a write tells.
		r, err := sb.StartReplica(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := r.Close(); err != nil {
				t.Error(err)
			}
		}()
		lease := filepath.Join(sb.Dir(), "run", "lease-r")
		gctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(gctx, Config{Lease: lease, OVSDB: r.DBAddr(), Grace: time.Second, Logger: logger(t)})
		}()
		var h Heartbeat
		pollUntil(ctx, t, "a heartbeat", func() bool {
			var err error
			h, err = ReadHeartbeat(HeartbeatPath(lease))
			return err == nil
		})
		if h.OVSDB != id || h.Writable || !strings.Contains(h.WriteRefused, "not allowed") {
			t.Fatalf("heartbeat %+v, want ovsdb %s and the replica's refusal", h, id)
		}
		err = h.Check(Want{OVSDB: id, Grace: time.Second}, 0, 0)
		var perr *ProofError
		if !errors.As(err, &perr) || perr.Field != FieldWritable || !strings.Contains(perr.Msg, r.DBAddr()) || !strings.Contains(perr.Msg, "read only mode") {
			t.Fatalf("proof of a guard on a read-only copy: %v, want a %s failure naming %s and OVSDB's refusal", err, FieldWritable, r.DBAddr())
		}
		t.Logf("%v", err)
		stop()
		if err := <-done; err != nil {
			t.Logf("guard on a read-only copy: %v", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		lease := filepath.Join(sb.Dir(), "run", "lease-b")
		logs := &lockedBuffer{}
		gctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(gctx, Config{Lease: lease, OVSDB: "unix:" + filepath.Join(sb.Dir(), "nope.sock"), Grace: time.Second,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
		}()
		pollUntil(ctx, t, "the guard reports it has no round trip", func() bool { return strings.Contains(logs.String(), "heartbeat stopped") })
		if _, err := os.Stat(HeartbeatPath(lease)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a guard that never reached its OVSDB left a heartbeat (%v)", err)
		}
		stop()
		// It cannot release anything: whatever it returns, it must return.
		if err := <-done; err != nil {
			t.Logf("guard without OVSDB: %v", err)
		}
	})
	t.Run("another OVSDB's lease", func(t *testing.T) {
		lease := filepath.Join(sb.Dir(), "run", "lease-c")
		l, err := OpenLease(lease)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := sb.SetFlowRestoreWait(ctx, true); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: 10 * time.Second, ExitWhenIdle: true, Logger: logger(t)})
		}()
		// A flowstated of another database renews the lease, well within
		// the grace: only the identity tells this guard it is not its own.
		for {
			if _, err := l.Renew("0d3c1a7e-52f1-4f0b-9d55-000000000000"); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if on, err := sb.FlowRestoreWait(ctx); err != nil || on {
					t.Fatalf("flag %v (%v) after the guard stepped aside, want its node released", on, err)
				}
				return
			case <-ctx.Done():
				t.Fatal("the guard of another OVSDB did not step aside")
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// lockedBuffer is a bytes.Buffer a logger and the test share.
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
