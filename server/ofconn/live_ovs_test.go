package ofconn

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
)

// waitDone waits for c to die and returns how long it took.
func waitDone(t *testing.T, c *Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-c.Done():
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("connection still alive after %v", limit)
		return 0
	}
}

func TestKilledSwitchDetected(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	if err := s.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	took := waitDone(t, c, 2*time.Second)
	t.Logf("death noticed after %v: %v", took, c.Err())
	if c.Err() == nil {
		t.Error("Err() = nil for a connection that died")
	}
	err := c.Bundle(ctx, ipFlows(t, 0, 1, 0, 1))
	if !errors.Is(err, ErrClosed) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("bundle on a dead connection = %v, want ErrClosed and errdefs.ErrUnavailable", err)
	}
	if want := "ofconn: bundle: connection to the switch closed: read: EOF"; err.Error() != want {
		t.Errorf("bundle on a dead connection = %q, want %q", err, want)
	}
	if _, err := c.DumpFlows(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("dump on a dead connection = %v, want ErrClosed", err)
	}
}

func TestFrozenSwitchDetected(t *testing.T) {
	ctx, s := startOVS(t)
	const interval, timeout = time.Second, 2 * time.Second
	c := dial(ctx, t, s, Options{EchoInterval: interval, EchoTimeout: timeout})
	// An echo round trip happens while the switch is healthy, and keeps the connection up.
	deadline := time.Now().Add(3 * interval)
	for c.Stats().EchoRTT == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no echo answered within %v", 3*interval)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-c.Done():
		t.Fatalf("connection died while the switch was healthy: %v", c.Err())
	default:
	}

	if err := s.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	t.Cleanup(func() {
		if err := s.ThawVswitchd(); err != nil {
			t.Errorf("thaw: %v", err)
		}
	})
	// An operation on the frozen switch gives up when its context ends, long before the echo verdict.
	opCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := c.Bundle(opCtx, ipFlows(t, 0, 1, 0, 10)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("bundle on a frozen switch = %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(frozen); waited > time.Second {
		t.Errorf("bundle on a frozen switch returned after %v, want about 200ms", waited)
	}

	waitDone(t, c, interval+timeout+time.Second)
	took := time.Since(frozen)
	t.Logf("frozen switch noticed after %v: %v", took, c.Err())
	if took > interval+timeout+500*time.Millisecond {
		t.Errorf("frozen switch noticed after %v, want within %v", took, interval+timeout)
	}
	if !errors.Is(c.Err(), errEchoTimeout) {
		t.Errorf("Err() = %v, want the echo timeout", c.Err())
	}

	// Dialling the frozen switch gives up with the context: the socket accepts, nothing answers the HELLO.
	dialCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if c2, err := Dial(dialCtx, s.MgmtPath("br0"), Options{}); !errors.Is(err, context.DeadlineExceeded) {
		if c2 != nil {
			c2.Close()
		}
		t.Errorf("dial of a frozen switch = %v, want context.DeadlineExceeded", err)
	}
}

func TestVersionRefused(t *testing.T) {
	ctx, s := startOVS(t)
	// With 1.0 allowed too, a client offering 1.0 and 1.5 (libOpenflow's default HELLO) would get 1.0.
	for _, protocols := range []string{"OpenFlow13", "OpenFlow10,OpenFlow13", "OpenFlow14"} {
		t.Run(protocols, func(t *testing.T) {
			if _, err := s.Vsctl(ctx, "set", "bridge", "br0", "protocols="+protocols); err != nil {
				t.Fatal(err)
			}
			c, err := Dial(ctx, s.MgmtPath("br0"), Options{Logger: testLogger(t)})
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded on a bridge without OpenFlow 1.5")
			}
			if !errors.Is(err, ErrVersion) || !errors.Is(err, errdefs.ErrFailedPrecondition) ||
				err.Error() != "ofconn: bridge does not speak OpenFlow 1.5 (check the bridge's protocols column)" {
				t.Fatalf("dial = %v, want ErrVersion", err)
			}
		})
	}
	// Back to 1.5, the same socket works.
	if _, err := s.Vsctl(ctx, "set", "bridge", "br0", "protocols=OpenFlow15"); err != nil {
		t.Fatal(err)
	}
	if err := dial(ctx, t, s, Options{}).Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTooLargeRejectedBeforeSending(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	good := ipFlows(t, 0, 1, 0, 1)[0]
	for _, size := range []int{MaxBundledMessage + 1, 70000} {
		big := make(Message, size)
		copy(big, good)
		be.PutUint16(big[2:4], uint16(size)) // wraps for 70000, as libOpenflow's encoders do
		before := c.Stats().BytesSent
		err := c.Bundle(ctx, []Message{good, big})
		if !errors.Is(err, ErrTooLarge) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("bundle with a %d-byte message = %v, want ErrTooLarge", size, err)
		}
		if !strings.Contains(err.Error(), "bundle message 1") {
			t.Errorf("error %q does not name message 1", err)
		}
		if after := c.Stats().BytesSent; after != before {
			t.Errorf("%d bytes sent for a refused bundle", after-before)
		}
	}
	if err := c.Send(ctx, make(Message, MaxMessage+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("send of %d bytes = %v, want ErrTooLarge", MaxMessage+1, err)
	}
	flows, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 {
		t.Errorf("flows = %q, want only the bridge's default flow", flows)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("connection unusable after refusing messages: %v", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{EchoInterval: 20 * time.Millisecond})
	const workers, per = 4, 300
	var wg sync.WaitGroup
	errs := make(chan error, 3*workers)
	for w := range workers {
		wg.Go(func() {
			if err := c.Bundle(ctx, ipFlows(t, uint8(w), 10, 0, per)); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			if _, err := c.DumpFlows(ctx); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			if err := c.Barrier(ctx); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	flows, err := c.DumpFlows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(flows), workers*per+1; got != want {
		t.Errorf("%d flows, want %d", got, want)
	}
}

func TestContextInterruptsBlockedWrite(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	msgs := ipFlows(t, 0, 1, 0, 50000) // megabytes: more than the socket buffers hold
	if err := s.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.ThawVswitchd(); err != nil {
			t.Errorf("thaw: %v", err)
		}
	})
	opCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Bundle(opCtx, msgs)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("bundle = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("bundle returned after %v, want about 300ms", took)
	}
	// Part of a message may be on the wire: the connection cannot be used any more.
	waitDone(t, c, time.Second)
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Errorf("Err() = %v, want the interrupted write", c.Err())
	}
}
