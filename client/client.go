package client

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
)

// DefaultTarget is flowstated's default socket.
const DefaultTarget = "unix:///run/flowstate/flowstate.sock"

// Keepalive defaults: a server that stops answering is noticed at most
// KeepaliveTime+KeepaliveTimeout after its last frame. flowstated accepts
// pings every 5 s or slower; gRPC sends them at most every 10 s.
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// MaxMessageBytes is the largest message the client receives, and the
// largest flowstated receives (its MaxMessageBytes). Replies are batched
// far below it; requests above one message's worth are streamed (Put, Sync).
const MaxMessageBytes = 16 << 20

// DefaultWatchReconnect is how long Watch keeps reconnecting to an
// unreachable flowstated before it gives up (WithWatchReconnect).
const DefaultWatchReconnect = 30 * time.Second

// Client talks to one flowstated.
type Client struct {
	conn *grpc.ClientConn
	api  flowstatev1.FlowStateServiceClient
	// watchReconnect bounds Watch's reconnection attempts; negative: until
	// its context ends.
	watchReconnect time.Duration
}

type options struct {
	dial           []grpc.DialOption
	watchReconnect time.Duration
	failFast       bool
	retryFor       time.Duration
}

// Option changes how New connects.
type Option func(*options)

// WithDialOptions adds gRPC dial options, applied after the defaults: TLS
// credentials for a TCP target, or other keepalive parameters
// (grpc.WithKeepaliveParams).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithWatchReconnect sets how long Watch keeps reconnecting while flowstated
// cannot be reached before it returns an error wrapping
// errdefs.ErrUnavailable (default DefaultWatchReconnect; negative: until the
// Watch's context ends).
func WithWatchReconnect(d time.Duration) Option {
	return func(o *options) { o.watchReconnect = d }
}

// WithFailFast makes calls fail at once, with an error wrapping
// errdefs.ErrUnavailable, when flowstated cannot be reached, instead of
// waiting for it until their context ends: for an operator's command that
// should say so now, not for a controller.
func WithFailFast() Option {
	return func(o *options) { o.failFast = true }
}

// WithRetryFor bounds the waiting: a call retries an unreachable
// flowstated for at most d (from its start, within its context), then
// fails as WithFailFast would. For a command line tool (flowctl: a
// flowstated that is starting answers within it).
func WithRetryFor(d time.Duration) Option {
	return func(o *options) { o.retryFor = d }
}

// New connects to target: "unix:///path", a bare socket path ("/path"), or
// any gRPC target. It does not wait for the server; the first call does.
func New(target string, opts ...Option) (*Client, error) {
	if strings.HasPrefix(target, "/") {
		target = "unix://" + target
	}
	o := options{watchReconnect: DefaultWatchReconnect}
	o.dial = []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// gRPC's default is 4 MiB; flowstated's replies stay far below
		// either, this is the margin for one large entry list.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
		// Notice a frozen server (SIGSTOP, a peer gone without a FIN) even
		// while no call is in flight: a Watch waits on it for ever otherwise.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
		// flowstated is local: reconnect quickly after it restarts rather
		// than with gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: RetryMaxBackoff},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	user := options{watchReconnect: DefaultWatchReconnect}
	for _, opt := range opts {
		opt(&user)
	}
	if !user.failFast {
		// Calls wait for flowstated until their context ends, or for
		// retryFor (retry.go).
		o.dial = append(o.dial, retryDialOptions(user.retryFor)...)
	}
	o.dial = append(o.dial, user.dial...)
	o.watchReconnect = user.watchReconnect
	conn, err := grpc.NewClient(target, o.dial...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := NewWithConn(conn)
	c.watchReconnect = o.watchReconnect
	return c, nil
}

// NewWithConn wraps an existing connection; Close closes it. Its calls are
// retried (see the package documentation) only if conn was dialed with
// RetryDialOptions.
func NewWithConn(conn *grpc.ClientConn) *Client {
	return &Client{conn: conn, api: flowstatev1.NewFlowStateServiceClient(conn), watchReconnect: DefaultWatchReconnect}
}

// RetryDialOptions are the interceptors that make a connection's calls wait
// for flowstated until their context ends, for a connection dialed outside
// New (NewWithConn).
func RetryDialOptions() []grpc.DialOption { return retryDialOptions(0) }

func retryDialOptions(bound time.Duration) []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unaryRetry(bound)), grpc.WithChainStreamInterceptor(streamRetry(bound))}
}

// Conn returns the underlying connection, for the other services flowstated
// serves on it (gRPC health, reflection). It stays owned by the Client.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// fromGRPC maps a gRPC status back to the errdefs kinds. gRPC reports a
// socket the client may not open (EACCES) as UNAVAILABLE: it is mapped to
// errdefs.ErrPermissionDenied here, the one place, since no wait cures it.
func fromGRPC(err error) error {
	if st, ok := status.FromError(err); ok && dialDenied(st) {
		return fmt.Errorf("client: %s: %w", st.Message(), errdefs.ErrPermissionDenied)
	}
	return errgrpc.ToNative(err)
}
