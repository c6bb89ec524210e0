package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/guard"
)

// TestNothingHoldsTheOthers: a managed bridge that is missing from OVSDB
// holds nothing, and one that cannot be restored (its protocols lack
// OpenFlow 1.5) holds the others at most --max-hold; status names both.
func TestNothingHoldsTheOthers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bridge  string
		maxHold time.Duration
		setup   func(ctx context.Context, e *env)
		// heldFor bounds how long br-int may stay held after the restart.
		minHeld, maxHeld time.Duration
		excused, reason  string
	}{{
		name: "missing", bridge: "br-gone", maxHold: time.Minute,
		setup:   func(context.Context, *env) {},
		maxHeld: 10 * time.Second,
		excused: "does not exist in OVSDB", reason: "OpenFlow connection",
	}, {
		name: "no OpenFlow 1.5", bridge: "br-ref", maxHold: 3 * time.Second,
		setup: func(ctx context.Context, e *env) {
			if out, err := e.sb.Vsctl(ctx, "set", "bridge", "br-ref", "protocols=OpenFlow13"); err != nil {
				t.Fatal(err, out)
			}
		},
		minHeld: 2 * time.Second, maxHeld: 3*time.Second + 10*time.Second,
		excused: "could not be restored within --max-hold 3s", reason: "OpenFlow",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			e := newEnv(ctx, t, func(c *server.Config) {
				c.Bridges = []string{"br-int", tc.bridge}
				c.MaxHold = tc.maxHold
				c.RearmFlowRestoreWait = true
				c.MetricsListen = "127.0.0.1:0"
			})
			tc.setup(ctx, e)
			e.Start(ctx)
			if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
				t.Fatal(err)
			}
			// The first start may itself be held for max-hold: wait for it.
			poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })

			e.Stop()
			if err := e.sb.RestartVswitchd(ctx, true); err != nil {
				t.Fatal(err)
			}
			e.Start(ctx)
			start := time.Now()
			poll(ctx, t, "br-int converged", func() (bool, error) { return e.bridgeStatus(ctx, "br-int").Converged, nil })
			var held time.Duration
			tx0 := e.txOf(ctx, "br-int", "p2")
			poll(ctx, t, "br-int forwards", func() (bool, error) {
				held = time.Since(start)
				e.inject(ctx, sandbox.Packet{SrcPort: uint16(40000 + time.Now().UnixMilli()%1000)})
				return e.txOf(ctx, "br-int", "p2") > tx0, nil
			})
			t.Logf("br-int forwarded %v after flowstated started (max-hold %v)", held.Round(time.Millisecond), tc.maxHold)
			if held < tc.minHeld || held > tc.maxHeld {
				t.Fatalf("br-int held for %v, want between %v and %v", held, tc.minHeld, tc.maxHeld)
			}
			st := e.bridgeStatus(ctx, tc.bridge)
			if st.Converged || !strings.Contains(st.Excused, tc.excused) || !strings.Contains(st.Reason, tc.reason) {
				t.Fatalf("status of %s: excused %q reason %q; want %q and %q", tc.bridge, st.Excused, st.Reason, tc.excused, tc.reason)
			}
			if ex := e.bridgeStatus(ctx, "br-int").Excused; ex != "" {
				t.Fatalf("br-int is converged but excused: %q", ex)
			}
			body := e.Metrics(ctx)
			if want := `flowstate_bridge_not_restored{bridge="` + tc.bridge + `"} 1`; !strings.Contains(body, want) {
				t.Fatalf("metrics lack %s", want)
			}
		})
	}
}

// TestWedgedEngine: an operation on the switch that hangs (vswitchd frozen
// during a replay) makes the engine wedged: health NOT_SERVING, /healthz
// 503, status says why, and the guard lease is no longer renewed, so the
// guard releases the node. Once the operation ends everything recovers and
// the flag is armed again. The log says so once when it wedges and once
// when it recovers, although the reason's duration grows every second.
func TestWedgedEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var lease string
	logs := &logBuffer{}
	e := newEnv(ctx, t, func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		lease = filepath.Join(filepath.Dir(c.DBPath), "run", "lease")
		c.RearmFlowRestoreWait = true
		c.MetricsListen = "127.0.0.1:0"
		c.WedgeAfter = 300 * time.Millisecond
		c.EchoInterval, c.EchoTimeout = time.Second, 3*time.Second
		c.Guard = server.GuardConfig{Mode: server.GuardExternal, Lease: lease, Grace: time.Second}
	})
	e.runGuard(ctx, lease)
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "armed with a guard", func() (bool, error) {
		st := e.status(ctx)
		return st.Guard.Running && st.FlowRestoreWait && st.Bridges[0].Converged, nil
	})
	hc := healthpb.NewHealthClient(e.conn(ctx))
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if s := serving(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v before the fault", s)
	}

	if err := e.sb.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	reconciled := make(chan error, 1)
	go func() { _, err := e.c.Reconcile(ctx, "br-int"); reconciled <- err }()
	poll(ctx, t, "wedged: NOT_SERVING, /healthz 503, status says why", func() (bool, error) {
		code := e.healthz(ctx)
		return serving() == healthpb.HealthCheckResponse_NOT_SERVING && code == http.StatusServiceUnavailable &&
			strings.Contains(e.status(ctx).Wedged, "bridge br-int busy"), nil
	})
	poll(ctx, t, "the guard released the node", func() (bool, error) {
		on, err := e.sb.FlowRestoreWait(ctx)
		return !on, err
	})
	if err := e.sb.ThawVswitchd(); err != nil {
		t.Fatal(err)
	}
	// Fails or succeeds: the connection may have died meanwhile.
	t.Logf("reconcile under the frozen switch: %v", <-reconciled)
	poll(ctx, t, "recovered: SERVING, converged, re-armed", func() (bool, error) {
		st := e.status(ctx)
		return serving() == healthpb.HealthCheckResponse_SERVING && e.healthz(ctx) == http.StatusOK && st.Wedged == "" &&
			st.Bridges[0].Converged && st.FlowRestoreWait, nil
	})
	out := logs.String()
	if n, m := strings.Count(out, "engine wedged"), strings.Count(out, "engine responsive again"); n != 1 || m != 1 ||
		!strings.Contains(out, "wedged_for=") {
		t.Fatalf("%d \"engine wedged\" and %d \"engine responsive again\" lines, want one each:\n%s", n, m, out)
	}
}

// logBuffer collects a daemon's log for a test to read.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (e *env) healthz(ctx context.Context) int {
	e.t.Helper()
	code, _ := e.Get(ctx, "/healthz")
	return code
}

// conn is a raw gRPC connection to the daemon, for the health service.
func (e *env) conn(ctx context.Context) *grpc.ClientConn {
	e.t.Helper()
	cc, err := grpc.NewClient(e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestArmAndRelease: Arm sets the flag only when a guard would release the
// node; Release clears it and returns once vswitchd has read it.
func TestArmAndRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lease string
	e := newEnv(ctx, t, func(c *server.Config) {
		lease = filepath.Join(filepath.Dir(c.DBPath), "run", "lease")
		// No guard yet: serve without waiting long for one.
		c.Guard = server.GuardConfig{Mode: server.GuardExternal, Lease: lease, Grace: time.Second, StartTimeout: 100 * time.Millisecond}
	})
	e.Start(ctx)
	e.WaitConverged(ctx)
	if _, err := e.c.Arm(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "no guard") {
		t.Fatalf("arm without a guard: %v, want FAILED_PRECONDITION naming the missing guard", err)
	}
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || on {
		t.Fatalf("flag after a refused arm: %v %v", on, err)
	}
	e.runGuard(ctx, lease)
	poll(ctx, t, "guard proven", func() (bool, error) { return e.status(ctx).Guard.Proven, nil })
	if was, err := e.c.Arm(ctx); err != nil || was {
		t.Fatalf("arm: was %v, %v", was, err)
	}
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || !on {
		t.Fatalf("flag after arm: %v %v", on, err)
	}
	was, ack, err := e.c.Release(ctx)
	if err != nil || !was {
		t.Fatalf("release: was %v, %v", was, err)
	}
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || on {
		t.Fatalf("flag after release: %v %v", on, err)
	}
	if next, cur, err := e.sb.Cfg(ctx); err != nil || cur < next {
		t.Fatalf("release returned (ack %v) before vswitchd read it: next_cfg %d cur_cfg %d %v", ack, next, cur, err)
	}
}

// TestMetricsFromTheStart: every state gauge exists from the first scrape,
// for a bridge that never connected too.
func TestMetricsFromTheStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.Bridges = []string{"br-int", "br-never"}
		c.MetricsListen = "127.0.0.1:0"
		c.RequiredModules = []string{"pipeline"}
	})
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	body := e.Metrics(ctx)
	for _, want := range []string{
		`flowstate_bridge_connected{bridge="br-never"} 0`,
		`flowstate_bridge_not_restored{bridge="br-never"} 0`,
		`flowstate_replays_total{bridge="br-never",result="error"} 0`,
		`flowstate_flow_restore_wait `,
		`flowstate_ovsdb_connected `,
		`flowstate_vswitchd_acknowledged `,
		`flowstate_gate{state="waiting"} 1`,
		`flowstate_gate{state="open"} 0`,
		`flowstate_module_ready{module="pipeline",required="true"} 0`,
		`flowstate_desired_entries{bridge="br-int",kind="flow",module="pipeline"} 6`,
		`flowstate_guard_running 1`,
		`flowstate_engine_wedged 0`,
		`flowstate_build_info{`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestClearCountsReleases: flowstate_flow_restore_wait_cleared_total and
// last_release count only clears that released a held vswitchd; a
// restarted flowstated beside the vswitchd it released before leaves the
// armed flag alone (no clear and re-arm: a vswitchd restart in between
// would come back ungated).
func TestClearCountsReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.RearmFlowRestoreWait = true
		c.MetricsListen = "127.0.0.1:0"
	})
	cleared := func() string {
		for _, l := range strings.Split(e.Metrics(ctx), "\n") {
			if strings.HasPrefix(l, "flowstate_flow_restore_wait_cleared_total ") {
				return strings.TrimPrefix(l, "flowstate_flow_restore_wait_cleared_total ")
			}
		}
		t.Fatal("no flowstate_flow_restore_wait_cleared_total")
		return ""
	}
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	poll(ctx, t, "restored and re-armed", func() (bool, error) {
		st := e.status(ctx)
		return st.Bridges[0].Converged && st.FlowRestoreWait && !st.LastRelease.IsZero(), nil
	})
	if n := cleared(); n != "1" {
		t.Fatalf("cleared_total %s after releasing a gated vswitchd, want 1", n)
	}
	released := e.status(ctx).LastRelease
	// flowstated restarts beside the same running vswitchd, the flag still
	// armed (as a crash leaves it).
	e.Stop()
	if err := e.sb.SetFlowRestoreWait(ctx, true); err != nil {
		t.Fatal(err)
	}
	next0, _, err := e.sb.Cfg(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	e.WaitConverged(ctx)
	// Through two periodic flag checks, the flag is never touched.
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); {
		next, _, err := e.sb.Cfg(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if on, _ := e.sb.FlowRestoreWait(ctx); next != next0 || !on {
			t.Fatalf("flag %v, next_cfg %d -> %d: flowstated cleared the flag of a vswitchd it had released", on, next0, next)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := cleared(); n != "0" {
		t.Fatalf("cleared_total %s after a clear beside a running vswitchd, want 0", n)
	}
	// The store keeps the release of the previous flowstated; nothing
	// was released since.
	if lr := e.status(ctx).LastRelease; !lr.Equal(released) {
		t.Fatalf("last_release %v, want %v (the previous flowstated's): nothing was released since", lr, released)
	}
}

// runGuard runs a guard on lease in this process until the test ends.
func (e *env) runGuard(ctx context.Context, lease string) {
	gctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- guard.Run(gctx, guard.Config{Lease: lease, OVSDB: e.sb.DBAddr(), Grace: time.Second,
			Logger: testenv.Logger(e.t, slog.LevelInfo)})
	}()
	e.t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	})
}
