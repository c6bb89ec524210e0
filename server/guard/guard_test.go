package guard

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
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
