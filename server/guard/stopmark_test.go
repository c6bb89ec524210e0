package guard

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStoppedMark: a flowstated that stops in order marks its lease, and the
// guard, releasing after the same grace, logs it at INFO; a lease that just
// stops changing (SIGKILL, a freeze) is still an ERROR.
func TestStoppedMark(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mark      bool
		want, not string
	}{
		{"clean stop", true, `level=INFO msg="flowstated stopped in order: releasing the node`, "level=ERROR"},
		{"killed", false, `level=ERROR msg="flowstated has not renewed its lease: releasing the node`, "stopped in order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			logs := &lockedBuffer{}
			const grace = 400 * time.Millisecond
			cfg := Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: grace, ExitWhenIdle: true,
				Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))}
			gctx, stop := context.WithCancel(ctx)
			defer stop()
			done := make(chan error, 1)
			go func() { done <- Run(gctx, cfg) }()
			pollUntil(ctx, t, "guard holds the lock", func() bool { p, _ := Present(lease); return p })
			time.Sleep(grace / 4) // let the guard read the renewed lease first
			renewed := time.Now()
			if _, err := l.Renew(""); err != nil {
				t.Fatal(err)
			}
			if tc.mark {
				time.Sleep(grace / 4) // the mark comes later than the renewal
				if err := l.MarkStopped(""); err != nil {
					t.Fatal(err)
				}
			}
			pollUntil(ctx, t, "flag cleared", func() bool { on, _ := sb.FlowRestoreWait(ctx); return !on })
			took := time.Since(renewed)
			if took < grace || took > grace+grace/2+500*time.Millisecond {
				t.Errorf("flag cleared %v after the last renewal, want the grace %v (plus a poll)", took, grace)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("idle guard did not exit")
			}
			if out := logs.String(); !strings.Contains(out, tc.want) || strings.Contains(out, tc.not) {
				t.Errorf("guard log lacks %q or has %q:\n%s", tc.want, tc.not, out)
			}
		})
	}
}
