package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
)

// Retry backoff: a flowstated restarted by systemd (RestartSec=2s) answers
// again within a few seconds; calls wait for it, polling at most every
// RetryMaxBackoff, until their context ends.
const (
	RetryBaseBackoff = 50 * time.Millisecond
	RetryMaxBackoff  = time.Second
)

// retryDelay is the wait before retry n (0-based): exponential, capped, with
// jitter in [d/2, d) so that many controllers do not reconnect in step.
func retryDelay(n int) time.Duration {
	d := RetryBaseBackoff << min(n, 10)
	d = min(d, RetryMaxBackoff)
	return d/2 + rand.N(d/2)
}

// transient reports whether err, a gRPC status, is worth resending: the
// connection is missing, refused, lost or draining. flowstated's own
// UNAVAILABLE answers (a bridge or OVSDB not connected, flowstated stopping)
// carry errgrpc's mark and are its verdict: they return at once, like every
// other code. A socket the caller may not open (EACCES) is no passing state.
func transient(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && !verdict(st) && !dialDenied(st)
}

// verdict reports whether st carries errgrpc's mark: flowstated's own answer.
func verdict(st *status.Status) bool {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == errgrpc.Domain {
			return true
		}
	}
	return false
}

// dialDenied reports whether st is gRPC's UNAVAILABLE for a socket the
// kernel would not let the client open (EACCES, EPERM on connect).
func dialDenied(st *status.Status) bool {
	return st.Code() == codes.Unavailable && !verdict(st) &&
		(strings.Contains(st.Message(), "permission denied") || strings.Contains(st.Message(), "operation not permitted"))
}

// unreachableError is a call whose context ended while flowstated could not
// be reached: it wraps the context's error and the last UNAVAILABLE cause.
type unreachableError struct {
	ctx, last error
	attempts  int
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("client: %v after %d attempts; flowstated unreachable: %v", e.ctx, e.attempts, e.last)
}

func (e *unreachableError) Unwrap() []error { return []error{e.ctx, e.last} }

// retry runs call until it succeeds, fails with an error not transient, or
// ctx ends; resend says whether a failed attempt may be sent again (nil:
// always). It returns the last error as call returned it (a gRPC status,
// mapped by the Client's methods), or an *unreachableError.
//
// bound > 0 limits the retrying (WithRetryFor): once the next attempt would
// start past it, the last error is returned as it is.
func retry(ctx context.Context, bound time.Duration, resend func() bool, call func() error) error {
	var last error
	begin := time.Now()
	for n := 0; ; n++ {
		err := call()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil && last != nil {
			return &unreachableError{ctx: ctx.Err(), last: last, attempts: n + 1}
		}
		if !transient(err) || (resend != nil && !resend()) {
			return err
		}
		last = fromGRPC(err)
		wait := retryDelay(n)
		if bound > 0 && time.Since(begin)+wait > bound {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &unreachableError{ctx: ctx.Err(), last: last, attempts: n + 1}
		case <-t.C:
		}
	}
}

// unaryRetry resends a unary call that failed UNAVAILABLE. Every unary call
// but Delete is idempotent (flowstated's writes are declarations: a resent
// Put or MarkReady leaves the same state); a resent Delete of entries the
// first one removed fails NOT_FOUND, so Delete is resent only when it never
// left the client (no transport was picked: no peer).
func unaryRetry(bound time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var resend func() bool
		if strings.HasSuffix(method, "/Delete") {
			var p peer.Peer
			opts = append(opts, grpc.Peer(&p))
			resend = func() bool { sent := p.Addr != nil; p = peer.Peer{}; return !sent }
		}
		return retry(ctx, bound, resend, func() error { return invoker(ctx, method, req, reply, cc, opts...) })
	}
}

// streamRetry retries opening a stream: an open that fails has sent
// nothing. A stream that fails once open (flowstated lost in the middle of
// a List or a Sync) returns its error.
func streamRetry(bound time.Duration) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if strings.HasSuffix(method, "/Watch") {
			// Watch reconnects by itself, within WithWatchReconnect.
			return streamer(ctx, desc, cc, method, opts...)
		}
		var cs grpc.ClientStream
		err := retry(ctx, bound, nil, func() error {
			var err error
			cs, err = streamer(ctx, desc, cc, method, opts...)
			return err
		})
		return cs, err
	}
}
