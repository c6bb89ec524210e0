package ovsconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// testTimeout bounds each test; the whole package stays well under a minute.
const testTimeout = 30 * time.Second

// checkLeaks fails t if goroutines started during t outlive it. Call it
// first: cleanups run last-in first-out, so this check runs after the
// Client and the sandbox are closed.
func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func startSandbox(ctx context.Context, t *testing.T) *sandbox.Sandbox {
	t.Helper()
	s, err := sandbox.Start(ctx, sandbox.Options{Logger: testLogger(t)})
	if err != nil {
		// Missing OVS must fail, not skip; the error carries the install hint.
		t.Fatalf("start OVS sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	return s
}

func dial(ctx context.Context, t *testing.T, addr string, opts Options) *Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitFor re-evaluates cond at every change the Client reports, and every
// 20ms for conditions on state outside it, until cond holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, c *Client, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ch := c.Changed()
		ok, detail := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		case <-ch:
		case <-tick.C:
		}
	}
}

func vsctl(ctx context.Context, t *testing.T, s *sandbox.Sandbox, args ...string) string {
	t.Helper()
	out, err := s.Vsctl(ctx, args...)
	if err != nil {
		t.Fatalf("ovs-vsctl %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out)
}

func dbCfg(ctx context.Context, t *testing.T, s *sandbox.Sandbox) (next, cur int) {
	t.Helper()
	n, c, err := s.Cfg(ctx)
	if err != nil {
		t.Fatalf("read next_cfg/cur_cfg: %v", err)
	}
	return int(n), int(c)
}

func TestSetFlowRestoreWait(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})

	// Each step starts from the state the previous one left, so true->true
	// and false->false (idempotent writes) are covered too.
	steps := []struct {
		name string
		on   bool
	}{
		{"set", true},
		{"set again", true},
		{"clear", false},
		{"clear again", false},
		{"set after clear", true},
		{"clear after set", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			next0, _ := dbCfg(ctx, t, s)
			if err := c.SetFlowRestoreWait(ctx, st.on, true); err != nil {
				t.Fatalf("SetFlowRestoreWait(%v, wait): %v", st.on, err)
			}

			oc := vsctl(ctx, t, s, "--no-wait", "get", "Open_vSwitch", ".", "other_config")
			if st.on && !strings.Contains(oc, `flow-restore-wait="true"`) {
				t.Errorf("other_config = %s, want flow-restore-wait=\"true\"", oc)
			}
			if !st.on && strings.Contains(oc, "flow-restore-wait") {
				t.Errorf("other_config = %s, want no flow-restore-wait key", oc)
			}

			next, cur := dbCfg(ctx, t, s)
			if next != next0+1 {
				t.Errorf("next_cfg = %d, want exactly one increment from %d", next, next0)
			}
			if cur != next {
				t.Errorf("cur_cfg = %d after an acknowledged write, want next_cfg %d", cur, next)
			}

			// The wait returned on the cache's cur_cfg, which arrives with or
			// after the flag, so the cache already shows both.
			got, err := c.FlowRestoreWait()
			if err != nil || got != st.on {
				t.Errorf("FlowRestoreWait() = %v, %v; want %v", got, err, st.on)
			}
			cn, cc, err := c.Config()
			if err != nil || cn != next || cc != cur {
				t.Errorf("Config() = %d, %d, %v; want %d, %d", cn, cc, err, next, cur)
			}
		})
	}
}

func TestSetFlowRestoreWaitWithoutVswitchd(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatalf("stop vswitchd: %v", err)
	}

	t.Run("no wait succeeds", func(t *testing.T) {
		if err := c.SetFlowRestoreWait(ctx, true, false); err != nil {
			t.Fatalf("SetFlowRestoreWait(true, no wait): %v", err)
		}
		if on, err := s.FlowRestoreWait(ctx); err != nil || !on {
			t.Fatalf("flag in OVSDB = %v, %v; want true", on, err)
		}
		if next, cur := dbCfg(ctx, t, s); cur >= next {
			t.Fatalf("cur_cfg %d >= next_cfg %d without vswitchd", cur, next)
		}
	})

	t.Run("wait is not acknowledged", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := c.SetFlowRestoreWait(short, false, true)
		if !errors.Is(err, ErrNotAcknowledged) {
			t.Fatalf("SetFlowRestoreWait(false, wait) = %v; want ErrNotAcknowledged", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned after %v; the context allowed 300ms", d)
		}
		// The write itself happened; only the acknowledgement is missing.
		if on, err := s.FlowRestoreWait(ctx); err != nil || on {
			t.Fatalf("flag in OVSDB = %v, %v; want cleared", on, err)
		}
	})

	t.Run("vswitchd catches up at start", func(t *testing.T) {
		if err := s.StartVswitchd(ctx); err != nil {
			t.Fatalf("start vswitchd: %v", err)
		}
		if err := c.WaitConfigured(ctx); err != nil {
			t.Fatalf("WaitConfigured: %v", err)
		}
		if next, cur := dbCfg(ctx, t, s); cur != next {
			t.Fatalf("cur_cfg %d != next_cfg %d after WaitConfigured", cur, next)
		}
	})
}

func TestFlowRestoreWaitFollowsExternalChanges(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})

	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"set true", []string{"set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true"}, true},
		{"set false", []string{"set", "Open_vSwitch", ".", "other_config:flow-restore-wait=false"}, false},
		{"set TRUE", []string{"set", "Open_vSwitch", ".", "other_config:flow-restore-wait=TRUE"}, true},
		{"remove key", []string{"remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait"}, false},
		{"set garbage", []string{"set", "Open_vSwitch", ".", "other_config:flow-restore-wait=yes"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vsctl(ctx, t, s, append([]string{"--no-wait"}, tt.args...)...)
			waitFor(ctx, t, c, fmt.Sprintf("FlowRestoreWait() == %v", tt.want), func() (bool, string) {
				got, err := c.FlowRestoreWait()
				return err == nil && got == tt.want, fmt.Sprintf("got %v, %v", got, err)
			})
		})
	}
}

func TestBridges(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatalf("add bridge: %v", err)
	}

	waitFor(ctx, t, c, "bridge br0 in the cache", func() (bool, string) {
		bs, err := c.Bridges()
		return err == nil && len(bs) == 1 && bs[0].Name == "br0", fmt.Sprintf("%+v, %v", bs, err)
	})
	bs, _ := c.Bridges()
	if bs[0].DatapathType != "dummy" {
		t.Errorf("datapath_type = %q, want dummy", bs[0].DatapathType)
	}
	if p, ok := c.BridgeProtocols("br0"); !ok || len(p) != 0 {
		t.Errorf("BridgeProtocols(br0) = %v, %v; want empty (default), true", p, ok)
	}
	if _, ok := c.BridgeProtocols("nope"); ok {
		t.Errorf("BridgeProtocols(nope) found a bridge")
	}

	vsctl(ctx, t, s, "--no-wait", "set", "Bridge", "br0", "protocols=OpenFlow13,OpenFlow15", "fail_mode=secure")
	want := []string{"OpenFlow13", "OpenFlow15"}
	waitFor(ctx, t, c, "protocols of br0", func() (bool, string) {
		p, ok := c.BridgeProtocols("br0")
		slices.Sort(p)
		return ok && slices.Equal(p, want), fmt.Sprintf("%v, %v", p, ok)
	})
	if bs, _ := c.Bridges(); bs[0].FailMode != "secure" {
		t.Errorf("fail_mode = %q, want secure", bs[0].FailMode)
	}

	// Flow limits: a table without flow_limit has none, evict is told apart
	// from refuse (the default).
	vsctl(ctx, t, s, "--no-wait",
		"--", "--id=@a", "create", "Flow_Table", "flow_limit=1000",
		"--", "--id=@b", "create", "Flow_Table", "flow_limit=5", "overflow_policy=evict",
		"--", "--id=@c", "create", "Flow_Table", "name=named",
		"--", "set", "Bridge", "br0", "flow_tables:7=@a", "flow_tables:3=@b", "flow_tables:9=@c")
	wantLimits := []TableLimit{{Table: 3, FlowLimit: 5, Evict: true}, {Table: 7, FlowLimit: 1000}}
	waitFor(ctx, t, c, "table limits of br0", func() (bool, string) {
		l, err := c.TableLimits("br0")
		return err == nil && slices.Equal(l, wantLimits), fmt.Sprintf("%v, %v", l, err)
	})
	if l, err := c.TableLimits("nope"); err != nil || len(l) != 0 {
		t.Errorf("TableLimits(nope) = %v, %v", l, err)
	}
}

// TestConcurrentUse runs writers and readers at once; with -race it checks
// the Client's locking, and the counters check that no write was lost.
func TestConcurrentUse(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})
	next0, _ := dbCfg(ctx, t, s)

	const writers, writes = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*writes+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range writes {
				if err := c.SetFlowRestoreWait(ctx, (w+i)%2 == 0, true); err != nil {
					errs <- err
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.FlowRestoreWait(); err != nil {
				errs <- err
				return
			}
			if _, _, err := c.Config(); err != nil {
				errs <- err
				return
			}
			if _, err := c.Bridges(); err != nil {
				errs <- err
				return
			}
			c.Connected()
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent use: %v", err)
	}
	next, cur := dbCfg(ctx, t, s)
	if next != next0+writers*writes || cur != next {
		t.Errorf("next_cfg, cur_cfg = %d, %d; want both %d", next, cur, next0+writers*writes)
	}
}

// TestReconnect breaks the connection between Client and ovsdb-server with a
// proxy: once by closing it (as a server restart does) and once by silencing
// it (a peer that is gone without a FIN), and checks that the Client notices,
// redials and serves fresh state again.
func TestReconnect(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	p := newFaultProxy(t, strings.TrimPrefix(s.DBAddr(), "unix:"))
	c := dial(ctx, t, p.addr(), Options{InactivityTimeout: 200 * time.Millisecond, ReconnectTimeout: time.Second})

	// recovered proves the new connection carries a live monitor and accepts
	// writes.
	recovered := func(t *testing.T, flag bool) {
		t.Helper()
		waitFor(ctx, t, c, "reconnection", func() (bool, string) {
			return c.Connected(), "still disconnected"
		})
		vsctl(ctx, t, s, "--no-wait", "set", "Open_vSwitch", ".", fmt.Sprintf("other_config:flow-restore-wait=%v", flag))
		waitFor(ctx, t, c, "external change seen after reconnect", func() (bool, string) {
			got, err := c.FlowRestoreWait()
			return err == nil && got == flag, fmt.Sprintf("got %v, %v", got, err)
		})
		if err := c.SetFlowRestoreWait(ctx, !flag, true); err != nil {
			t.Fatalf("SetFlowRestoreWait after reconnect: %v", err)
		}
		if on, err := s.FlowRestoreWait(ctx); err != nil || on != !flag {
			t.Fatalf("flag in OVSDB = %v, %v; want %v", on, err, !flag)
		}
	}

	t.Run("connection closed", func(t *testing.T) {
		before := p.accepted()
		p.cut()
		waitFor(ctx, t, c, "a new connection", func() (bool, string) {
			return p.accepted() > before, fmt.Sprintf("%d connections accepted", p.accepted())
		})
		recovered(t, true)
	})

	t.Run("peer silent", func(t *testing.T) {
		p.freeze()
		start := time.Now()
		waitFor(ctx, t, c, "disconnection of a silent peer", func() (bool, string) {
			return !c.Connected(), "still connected"
		})
		// Two probe intervals plus scheduling slack.
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("silent peer detected after %v, want about 400ms", d)
		}
		if _, err := c.FlowRestoreWait(); !errors.Is(err, ErrNotConnected) {
			t.Errorf("FlowRestoreWait while disconnected: %v, want ErrNotConnected", err)
		}
		if err := c.SetFlowRestoreWait(ctx, true, false); !errors.Is(err, ErrNotConnected) {
			t.Errorf("SetFlowRestoreWait while disconnected: %v, want ErrNotConnected", err)
		}
		p.thaw()
		recovered(t, false)
	})
}

// TestSilentServerTransaction checks that a transaction to a server that
// stopped answering (not yet detected by the probe) ends at RequestTimeout,
// and that Close does not hang on the silent connection.
func TestSilentServerTransaction(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	p := newFaultProxy(t, strings.TrimPrefix(s.DBAddr(), "unix:"))
	c := dial(ctx, t, p.addr(), Options{InactivityTimeout: time.Minute, RequestTimeout: 300 * time.Millisecond})

	p.freeze()
	start := time.Now()
	err := c.SetFlowRestoreWait(ctx, true, true)
	if err == nil {
		t.Fatalf("SetFlowRestoreWait to a silent server succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %v, want about the 300ms RequestTimeout", d)
	}
	start = time.Now()
	c.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v on a silent connection", d)
	}
}

// TestServerGone stops ovsdb-server for good: the Client must notice, fail
// calls with ErrNotConnected, and still Close promptly with no goroutine left
// in its redial loop.
func TestServerGone(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s, err := sandbox.Start(ctx, sandbox.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("start OVS sandbox: %v", err)
	}
	c, err := Dial(ctx, s.DBAddr(), Options{InactivityTimeout: 200 * time.Millisecond, ReconnectTimeout: time.Second, Logger: testLogger(t)})
	if err != nil {
		_ = s.Close()
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("close sandbox: %v", err)
	}

	waitFor(ctx, t, c, "disconnection", func() (bool, string) { return !c.Connected(), "still connected" })
	if _, err := c.FlowRestoreWait(); !errors.Is(err, ErrNotConnected) {
		t.Errorf("FlowRestoreWait: %v, want ErrNotConnected", err)
	}
	if _, _, err := c.Config(); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Config: %v, want ErrNotConnected", err)
	}
	if err := c.SetFlowRestoreWait(ctx, false, false); !errors.Is(err, ErrNotConnected) {
		t.Errorf("SetFlowRestoreWait: %v, want ErrNotConnected", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := c.WaitConfigured(short); !errors.Is(err, ErrNotConnected) {
		t.Errorf("WaitConfigured: %v, want ErrNotConnected", err)
	}

	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v while redialling", d)
	}
	if _, err := c.FlowRestoreWait(); !errors.Is(err, ErrClosed) {
		t.Errorf("FlowRestoreWait after Close: %v, want ErrClosed", err)
	}
	if c.Connected() {
		t.Errorf("Connected() after Close")
	}
	c.Close() // a second Close is a no-op
}

func TestDialErrors(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	tests := []struct {
		name    string
		addr    string
		timeout time.Duration
		wantErr error
	}{
		{"bad scheme", "/var/run/openvswitch/db.sock", time.Second, nil},
		{"ssl unsupported", "ssl:127.0.0.1:6640", time.Second, nil},
		{"nothing listening", "unix:/nonexistent-ovsconfig/db.sock", 300 * time.Millisecond, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dctx, cancel := context.WithTimeout(ctx, tt.timeout)
			defer cancel()
			c, err := Dial(dctx, tt.addr, Options{Logger: testLogger(t)})
			if err == nil {
				c.Close()
				t.Fatalf("Dial(%q) succeeded", tt.addr)
			}
			if !strings.HasPrefix(err.Error(), "ovsconfig: ") {
				t.Errorf("error %q lacks the ovsconfig: prefix", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v does not wrap %v", err, tt.wantErr)
			}
		})
	}
}

func TestFlagValue(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"true", true},
		{"TRUE", true},
		{"True", true},
		{"", false},
		{"false", false},
		{"yes", false},
		{"1", false},
		{" true", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			if got := flagValue(tt.in); got != tt.want {
				t.Errorf("flagValue(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
