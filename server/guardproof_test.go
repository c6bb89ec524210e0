package server_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/guard"
)

// TestGuardProofReported: a proven guard is replaced by one whose grace is
// longer than flowstated's. It holds the lock but is not trusted: status,
// the metrics, an event and Arm's refusal say so, naming the field, and the
// flag is disarmed. Once a guard that keeps flowstated's grace is back, the
// same say it is proven and the flag is armed again.
func TestGuardProofReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var lease string
	e := newEnv(ctx, t, func(c *server.Config) {
		lease = filepath.Join(filepath.Dir(c.DBPath), "run", "lease")
		c.RearmFlowRestoreWait = true
		c.MetricsListen = "127.0.0.1:0"
		c.Guard = server.GuardConfig{Mode: server.GuardExternal, Lease: lease, Grace: time.Second}
	})
	stopFirst := e.runGuardWith(ctx, lease, time.Second)
	e.Start(ctx)
	e.WaitConverged(ctx)

	events := make(chan client.Event, 256)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		watched <- e.c.Watch(wctx, client.Cursor{}, func(ev client.Event) error {
			select {
			case events <- ev:
			default:
			}
			return nil
		})
	}()
	defer func() {
		stopWatch()
		if err := <-watched; err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			t.Errorf("watch: %v", err)
		}
	}()
	waitEvent := func(typ client.EventType, attr, value string) {
		t.Helper()
		for {
			select {
			case ev := <-events:
				if ev.Type == typ && ev.Attrs[attr] == value {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %v event with %s=%s", typ, attr, value)
			}
		}
	}
	metric := func(series, want string) func() (bool, error) { return gaugeIs(ctx, e, series, want) }
	proven := func() {
		t.Helper()
		testenv.Poll(ctx, t, "status: guard proven, flag armed", func() (bool, error) {
			st, err := e.c.Status(ctx)
			if err != nil {
				return false, err
			}
			g := st.Guard
			return g.Proven && g.UnprovenField == "" && g.GuardOVSDB == g.OVSDB && g.OVSDB != "" && st.FlowRestoreWait, nil
		})
		testenv.Poll(ctx, t, "flowstate_guard_proven 1", metric("flowstate_guard_proven", "1"))
		testenv.Poll(ctx, t, `flowstate_guard_unproven{field="grace"} 0`, metric(`flowstate_guard_unproven{field="grace"}`, "0"))
	}
	proven()

	// 3 s, not more: a stopped guard watches its grace once more.
	stopFirst()
	stopLong := e.runGuardWith(ctx, lease, 3*time.Second)
	waitEvent(client.EventGuardUnproven, "field", guard.FieldGrace)
	testenv.Poll(ctx, t, "status: guard not proven (grace), flag disarmed", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, err
		}
		g := st.Guard
		on, err := e.sb.FlowRestoreWait(ctx)
		return g.Running && !g.Proven && g.UnprovenField == guard.FieldGrace && g.GuardGrace == 3*time.Second &&
			strings.Contains(g.Reason, "3s") && !st.FlowRestoreWait && !on, err
	})
	testenv.Poll(ctx, t, "flowstate_guard_proven 0", metric("flowstate_guard_proven", "0"))
	testenv.Poll(ctx, t, `flowstate_guard_unproven{field="grace"} 1`, metric(`flowstate_guard_unproven{field="grace"}`, "1"))
	if _, err := e.c.Arm(ctx); err == nil || !strings.Contains(err.Error(), "grace") {
		t.Fatalf("arm behind a guard with a longer grace: %v, want a refusal naming the grace", err)
	}

	stopLong()
	e.runGuardWith(ctx, lease, time.Second)
	waitEvent(client.EventGuardProven, "grace", "1s")
	proven()
}

// TestGuardProofReadOnlyCopy is issue 31's "the guard's proof is a read": an
// external guard pointed at a read-only replica of the node's database
// (ovsdb-server --sync-from, the same Open_vSwitch _uuid) reads everything a
// proof used to need, yet could never clear the flag. Its proof is a write
// the replica refuses: status, the metrics, an event and Arm's refusal name
// the writable field, the replica's address and OVSDB's refusal, and the
// flag is never armed. The control: a guard on the node's own database is
// proven and the flag armed.
func TestGuardProofReadOnlyCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var lease string
	e := newEnv(ctx, t, func(c *server.Config) {
		lease = filepath.Join(filepath.Dir(c.DBPath), "run", "lease")
		c.RearmFlowRestoreWait = true
		c.MetricsListen = "127.0.0.1:0"
		c.Guard = server.GuardConfig{Mode: server.GuardExternal, Lease: lease, Grace: time.Second, StartTimeout: 500 * time.Millisecond}
	})
	replica, err := e.sb.StartReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := replica.Close(); err != nil {
			t.Error(err)
		}
	})
	stopCopy := e.runGuardAt(ctx, lease, replica.DBAddr(), time.Second)
	e.Start(ctx)
	e.WaitConverged(ctx)

	unproven := func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, err
		}
		g := st.Guard
		on, err := e.sb.FlowRestoreWait(ctx)
		return g.Running && !g.Proven && g.UnprovenField == guard.FieldWritable && g.PID != 0 &&
			g.GuardOVSDB == g.OVSDB && g.OVSDB != "" && strings.Contains(g.Reason, replica.DBAddr()) &&
			strings.Contains(g.Reason, "read only mode") && !st.FlowRestoreWait && !on, err
	}
	testenv.Poll(ctx, t, "status: guard on the read-only copy not proven (writable), flag disarmed", unproven)
	testenv.Poll(ctx, t, `flowstate_guard_unproven{field="writable"} 1`, gaugeIs(ctx, e, `flowstate_guard_unproven{field="writable"}`, "1"))
	testenv.Poll(ctx, t, "flowstate_guard_proven 0", gaugeIs(ctx, e, "flowstate_guard_proven", "0"))
	if _, err := e.c.Arm(ctx); err == nil || !strings.Contains(err.Error(), guard.FieldWritable) {
		t.Fatalf("arm behind a guard on a read-only copy: %v, want a refusal naming %s", err, guard.FieldWritable)
	}
	// Several renewals and heartbeats later the verdict stands: a guard
	// that keeps reading its copy never proves itself.
	for end := time.Now().Add(3 * guard.StaleAfter(time.Second) / 2); time.Now().Before(end); {
		if ok, err := unproven(); err != nil || !ok {
			st, _ := e.c.Status(ctx)
			t.Fatalf("the guard on the read-only copy came to be trusted (%v): %+v", err, st.Guard)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	st, err := e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: %s: %s", st.Guard.UnprovenField, st.Guard.Reason)

	// The control: the same guard on the node's own database is proven.
	stopCopy()
	e.runGuardAt(ctx, lease, e.sb.DBAddr(), time.Second)
	testenv.Poll(ctx, t, "status: guard on the node's database proven, flag armed", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, err
		}
		on, err := e.sb.FlowRestoreWait(ctx)
		return st.Guard.Proven && st.Guard.UnprovenField == "" && st.FlowRestoreWait && on, err
	})
	testenv.Poll(ctx, t, `flowstate_guard_unproven{field="writable"} 0`, gaugeIs(ctx, e, `flowstate_guard_unproven{field="writable"}`, "0"))
}

// gaugeIs reports whether the metrics series has the value want.
func gaugeIs(ctx context.Context, e *env, series, want string) func() (bool, error) {
	return func() (bool, error) {
		for _, l := range strings.Split(e.Metrics(ctx), "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				return v == want, nil
			}
		}
		return false, nil
	}
}

// runGuardWith runs a guard with grace on lease in this process, on the
// sandbox's OVSDB; stop ends it (also at the end of the test) and waits for
// it: up to grace, since a stopped guard waits that long for a flowstated
// still renewing.
func (e *env) runGuardWith(ctx context.Context, lease string, grace time.Duration) (stop func()) {
	return e.runGuardAt(ctx, lease, e.sb.DBAddr(), grace)
}

// runGuardAt is runGuardWith on the OVSDB at addr.
func (e *env) runGuardAt(ctx context.Context, lease, addr string, grace time.Duration) (stop func()) {
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- guard.Run(gctx, guard.Config{Lease: lease, OVSDB: addr, Grace: grace,
			Logger: testenv.Logger(e.t, slog.LevelInfo)})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}
