package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
)

func TestTransient(t *testing.T) {
	verdict := errgrpc.ToGRPC(fmt.Errorf("bridge br-int is not connected: %w", errdefs.ErrUnavailable))
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"socket missing", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix /run/x.sock: connect: no such file or directory"`), true},
		{"connection lost", status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{"EACCES", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix /run/x.sock: connect: permission denied"`), false},
		{"flowstated's verdict", verdict, false},
		{"invalid argument", errgrpc.ToGRPC(fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument)), false},
		{"not a status", errors.New("x"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("%s: transient = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRetryUntilContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls := 0
	err := retry(ctx, 0, nil, func() error {
		calls++
		return status.Error(codes.Unavailable, "connect: no such file or directory")
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errdefs.ErrUnavailable) || calls < 3 {
		t.Fatalf("after %d calls: %v, want the deadline wrapping the last UNAVAILABLE", calls, err)
	}
	t.Logf("%d calls: %v", calls, err)

	calls = 0
	err = retry(context.Background(), 0, nil, func() error {
		calls++
		return errgrpc.ToGRPC(fmt.Errorf("no: %w", errdefs.ErrFailedPrecondition))
	})
	if calls != 1 || !errors.Is(fromGRPC(err), errdefs.ErrFailedPrecondition) {
		t.Fatalf("a verdict was retried (%d calls) or lost: %v", calls, err)
	}

	// resend false (a Delete that reached flowstated): one attempt.
	calls = 0
	err = retry(context.Background(), 0, func() bool { return false }, func() error {
		calls++
		return status.Error(codes.Unavailable, "error reading from server: EOF")
	})
	if calls != 1 || !errors.Is(fromGRPC(err), errdefs.ErrUnavailable) {
		t.Fatalf("a call not to resend was resent (%d calls): %v", calls, err)
	}

	calls = 0
	err = retry(context.Background(), 0, nil, func() error {
		if calls++; calls < 3 {
			return status.Error(codes.Unavailable, "error reading from server: EOF")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("after %d calls: %v", calls, err)
	}
}

func TestRetryDelay(t *testing.T) {
	for n := range 20 {
		d := retryDelay(n)
		limit := min(RetryBaseBackoff<<min(n, 10), RetryMaxBackoff)
		if d < limit/2 || d >= limit {
			t.Fatalf("retry %d waits %v, want in [%v, %v)", n, d, limit/2, limit)
		}
	}
}

// TestRetryBound: WithRetryFor's bound ends the retrying of an unreachable
// flowstated well before the context, with the UNAVAILABLE itself.
func TestRetryBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := 0
	start := time.Now()
	err := retry(ctx, 300*time.Millisecond, nil, func() error {
		calls++
		return status.Error(codes.Unavailable, "connect: no such file or directory")
	})
	if took := time.Since(start); took > 2*time.Second || calls < 2 {
		t.Fatalf("bounded retry: %d calls in %v", calls, took)
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.Unavailable {
		t.Fatalf("bounded retry returned %v, want the last UNAVAILABLE", err)
	}
}
