package clienttest_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestErrorKinds: the client returns the errdefs kinds, so a controller can
// tell a conflict from a malformed entry with errors.Is and find the entry
// with errors.As.
func TestErrorKinds(t *testing.T) {
	t.Parallel() // overlaps TestFrozenServer's wait
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, quiet)
	e.Start(ctx)
	c := e.Dial(e.Sock) // a bare path works as a target
	if _, err := c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.FlowText("table=0,priority=100,ip,actions=drop")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		kind  error
		index int // of the *errdefs.EntryError; -1: none
		say   string
	}{
		{"identity of another module", func() error {
			_, err := c.Put(ctx, client.Module{Bridge: "br-int", Name: "route"}, client.FlowText("table=0,priority=100,ip,actions=normal"))
			return err
		}, errdefs.ErrFailedPrecondition, 0, `owned by module "pod"`},
		{"malformed entry", func() error {
			_, err := c.Put(ctx, client.Module{Bridge: "br-int", Name: "route"}, client.FlowText("table=1,priority=1,actions=drop"),
				client.FlowText("table=1,priority=2,no_such_field=1,actions=drop"))
			return err
		}, errdefs.ErrInvalidArgument, 1, "no_such_field"},
		{"delete of an undeclared identity", func() error {
			_, err := c.Delete(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.FlowText("table=5,priority=5,ip"))
			return err
		}, errdefs.ErrNotFound, 0, "not declared"},
		{"unmanaged bridge", func() error {
			_, err := c.Diff(ctx, "br-none")
			return err
		}, errdefs.ErrFailedPrecondition, -1, "br-none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.kind) {
				t.Fatalf("got %v, want %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.say) {
				t.Errorf("%q does not say %q", err, tc.say)
			}
			var ee *errdefs.EntryError
			switch {
			case tc.index < 0 && errors.As(err, &ee):
				t.Errorf("entry error %v for a request-wide error", ee)
			case tc.index >= 0 && (!errors.As(err, &ee) || ee.Index != tc.index):
				t.Errorf("got %v, want an EntryError for entry %d", err, tc.index)
			}
		})
	}
	// Nothing of the refused requests was stored.
	stored, err := c.List(ctx, client.Filter{Bridge: "br-int"})
	if err != nil || len(stored) != 1 || stored[0].Module != "pod" {
		t.Fatalf("stored after refusals: %+v (%v)", stored, err)
	}
}

// TestWaitConverged: WaitConverged rides out a flowstated that is not up
// yet, says what it waits for when its context ends, and returns once the
// gate opens and the bridge is restored.
func TestWaitConverged(t *testing.T) {
	t.Parallel() // overlaps TestFrozenServer's wait
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, quiet, testenv.Configure(func(c *server.Config) {
		c.RequiredModules, c.ReadinessTimeout = []string{"pod"}, time.Hour
	}))
	c := e.Dial("unix://" + e.Sock)

	// Long enough for a Status call to give up: it retries UNAVAILABLE.
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	_, err := c.WaitConverged(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "flowstated unreachable") {
		t.Fatalf("without flowstated: %v", err)
	}

	e.Start(ctx) // a new store: a cold start, gated on pod
	// A new client: c may wait out gRPC's reconnect backoff (up to 3 s).
	short, cancelShort = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = e.Dial(e.Sock).WaitConverged(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "gate closed, waiting for modules pod") {
		t.Fatalf("with the gate closed: %v", err)
	}

	type result struct {
		st  *client.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := c.WaitConverged(ctx)
		done <- result{st, err}
	}()
	// The gate's opening is an event.
	w := watch(ctx, t, e.Dial(e.Sock), client.Cursor{})
	w.next(ctx, t, isType(client.EventHeartbeat))
	if _, err := e.Dial(e.Sock).Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, true, client.FlowText("table=0,priority=100,ip,actions=drop")); err != nil {
		t.Fatal(err)
	}
	if ev := w.next(ctx, t, isType(client.EventGateOpened)); ev.TypeName != "gate_opened" || ev.Attrs["timed_out"] != "false" ||
		!strings.Contains(ev.Message, "every required module is ready") {
		t.Fatalf("gate event: %+v", ev)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if b := r.st.Bridges; !r.st.Gate.Open || len(b) != 1 || !b[0].Converged || b[0].Flows != 1 || len(r.st.Pending()) != 0 {
		t.Fatalf("converged status: %+v", r.st)
	}
}

// TestWatchAcrossRestart: a Watch outlives a short outage of flowstated
// within its reconnect window, and when flowstated comes back as a new
// stream it returns ErrResync rather than skip what the new run did.
func TestWatchAcrossRestart(t *testing.T) {
	t.Parallel() // overlaps TestFrozenServer's wait
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, quiet)
	e.Start(ctx)
	patient := e.Dial(e.Sock)
	hasty := e.Dial(e.Sock, client.WithWatchReconnect(500*time.Millisecond))
	declare(ctx, t, patient, "pod")
	if _, err := patient.WaitConverged(ctx); err != nil { // start-up events are over
		t.Fatal(err)
	}

	wp := watch(ctx, t, patient, client.Cursor{})
	wh := watch(ctx, t, hasty, client.Cursor{})
	wp.next(ctx, t, isType(client.EventHeartbeat))
	hb := wh.next(ctx, t, isType(client.EventHeartbeat))
	if err := patient.MarkReady(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	ready := wh.next(ctx, t, isType(client.EventModuleReady))
	wp.next(ctx, t, isType(client.EventModuleReady))
	if ready.StreamID != hb.StreamID || ready.Revision != hb.Revision+1 || ready.Module != "pod" || ready.TypeName != "module_ready" {
		t.Fatalf("after heartbeat %+v: %+v", hb, ready)
	}

	e.Stop()
	// The hasty watch gives up while flowstated is away; its position stays
	// valid until flowstated restarts.
	err := wh.end(ctx, t)
	if !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, client.ErrResync) {
		t.Fatalf("hasty watch with flowstated down: %v", err)
	}
	e.Start(ctx)
	// The patient watch reconnects to a new stream: resync.
	if err := wp.end(ctx, t); !errors.Is(err, client.ErrResync) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("patient watch across a restart: %v", err)
	}
	err = hasty.Watch(ctx, ready.Cursor(), func(ev client.Event) error {
		t.Errorf("event of another stream delivered: %+v", ev)
		return nil
	})
	if !errors.Is(err, client.ErrResync) {
		t.Fatalf("resume from before the restart: %v", err)
	}
	// Resync: read the state, watch from now.
	st, err := patient.Status(ctx)
	if err != nil || !st.Modules[0].Ready {
		t.Fatalf("status after restart: %+v (%v)", st, err)
	}
	w := watch(ctx, t, patient, client.Cursor{})
	if hb2 := w.next(ctx, t, isType(client.EventHeartbeat)); hb2.StreamID == hb.StreamID {
		t.Fatalf("stream id %s survived a restart", hb2.StreamID)
	}
}

// TestFrozenServer: a server that stops answering (a proxy that forwards
// nothing) is noticed by keepalive: a call keeps waiting for it only until
// its context ends, then fails wrapping UNAVAILABLE, and a Watch reconnects once it answers again and delivers the
// event published meanwhile, without a gap.
func TestFrozenServer(t *testing.T) {
	t.Parallel() // it waits for gRPC's keepalive, 10 s at least
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, quiet)
	e.Start(ctx)
	p := newProxy(t, filepath.Join(e.Sandbox.Dir(), "px.sock"), e.Sock)
	direct := e.Dial(e.Sock)
	viaProxy := e.Dial(filepath.Join(e.Sandbox.Dir(), "px.sock"), fastFail)
	declare(ctx, t, direct, "pod")
	if _, err := direct.WaitConverged(ctx); err != nil { // start-up events are over
		t.Fatal(err)
	}

	w := watch(ctx, t, viaProxy, client.Cursor{})
	hb := w.next(ctx, t, isType(client.EventHeartbeat))

	p.pause()
	frozen := time.Now()
	statusErr := make(chan error, 1)
	statusCtx, cancelStatus := context.WithTimeout(ctx, 20*time.Second)
	defer cancelStatus()
	go func() {
		_, err := viaProxy.Status(statusCtx)
		statusErr <- err
	}()
	if err := direct.MarkReady(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-statusErr:
		// It waits for flowstated until its context ends, then says why
		// it could not reach it.
		if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Status of a frozen server: %v", err)
		}
		t.Logf("Status failed after %v: %v", time.Since(frozen).Round(time.Millisecond), err)
	case <-ctx.Done():
		t.Fatal("Status of a frozen server hangs past its context")
	}
	select {
	case at := <-p.gone:
		// 10 s of silence, then 1 s for the ping's answer.
		if took := at.Sub(frozen); took > 13*time.Second {
			t.Fatalf("frozen connection closed after %v", took)
		} else {
			t.Logf("frozen connection closed after %v", took.Round(time.Millisecond))
		}
	case <-ctx.Done():
		t.Fatal("the client kept the frozen connection")
	}

	p.resume()
	ev := w.next(ctx, t, func(ev client.Event) bool { return ev.Type != client.EventHeartbeat })
	if ev.Type != client.EventModuleReady || ev.Module != "pod" || ev.StreamID != hb.StreamID || ev.Revision != hb.Revision+1 {
		t.Fatalf("after the freeze, next event after %+v is %+v", hb, ev)
	}
	if _, err := viaProxy.Status(ctx); err != nil {
		t.Fatalf("Status after the freeze: %v", err)
	}
}
