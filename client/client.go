package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
)

// DefaultTarget is flowstated's default socket.
const DefaultTarget = "unix:///run/flowstate/flowstate.sock"

// Retries on UNAVAILABLE only: every RPC is atomic, so a retry cannot apply
// a request twice in part.
const serviceConfig = `{"methodConfig":[{"name":[{"service":"flowstate.v1.FlowStateService"}],
 "retryPolicy":{"maxAttempts":4,"initialBackoff":"0.2s","maxBackoff":"2s","backoffMultiplier":2,
 "retryableStatusCodes":["UNAVAILABLE"]}}]}`

// Client talks to one flowstated.
type Client struct {
	conn *grpc.ClientConn
	api  flowstatev1.FlowStateServiceClient
}

// Option changes how New dials.
type Option func(*[]grpc.DialOption)

// WithDialOptions adds gRPC dial options (e.g. TLS credentials for a TCP
// target).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *[]grpc.DialOption) { *o = append(*o, opts...) }
}

// New connects to target ("unix:///path" or any gRPC target). It does not
// wait for the server; the first call does.
func New(target string, opts ...Option) (*Client, error) {
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// Detect a frozen server: ping after 10 s idle, give up after 5 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		// flowstated is local: reconnect quickly after it restarts rather
		// than with gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	for _, o := range opts {
		o(&dopts)
	}
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return NewWithConn(conn), nil
}

// NewWithConn wraps an existing connection; Close closes it.
func NewWithConn(conn *grpc.ClientConn) *Client {
	return &Client{conn: conn, api: flowstatev1.NewFlowStateServiceClient(conn)}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Entry is an entry to declare: a flow in ovs-ofctl syntax or encoded.
type Entry struct {
	Kind entry.Kind
	// Text is the entry in ovs-ofctl syntax; or
	Text string
	// OpenFlow is the encoded OpenFlow 1.5 message, command ADD.
	OpenFlow []byte
}

// FlowText is a flow in ovs-ofctl syntax, e.g. "table=0,priority=100,ip,actions=drop".
func FlowText(s string) Entry { return Entry{Kind: entry.KindFlow, Text: s} }

// FlowBytes is an encoded OpenFlow 1.5 FLOW_MOD (command ADD).
func FlowBytes(b []byte) Entry { return Entry{Kind: entry.KindFlow, OpenFlow: b} }

func toProto(es []Entry) []*flowstatev1.Entry {
	out := make([]*flowstatev1.Entry, len(es))
	for i, e := range es {
		pe := &flowstatev1.Entry{Kind: flowstatev1.EntryKind(e.Kind)}
		if e.OpenFlow != nil {
			pe.Body = &flowstatev1.Entry_Openflow{Openflow: e.OpenFlow}
		} else {
			pe.Body = &flowstatev1.Entry_Text{Text: e.Text}
		}
		out[i] = pe
	}
	return out
}

// Put declares entries of module on bridge. applied reports whether the switch
// already holds them (false: stored, applied at the next replay).
func (c *Client) Put(ctx context.Context, bridge, module string, es ...Entry) (applied bool, err error) {
	resp, err := c.api.Put(ctx, &flowstatev1.PutRequest{Bridge: bridge, Module: module, Entries: toProto(es)})
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

// Delete removes entries of module on bridge, named by identity (for flows:
// table, priority and match; actions may be omitted).
func (c *Client) Delete(ctx context.Context, bridge, module string, es ...Entry) (applied bool, err error) {
	resp, err := c.api.Delete(ctx, &flowstatev1.DeleteRequest{Bridge: bridge, Module: module, Entries: toProto(es)})
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

// Filter selects entries for List; zero fields match everything.
type Filter struct {
	Bridge, Module string
	Kind           entry.Kind
	Table          *uint8
}

// StoredEntry is a desired entry as flowstated holds it.
type StoredEntry struct {
	Bridge, Module string
	Kind           entry.Kind
	// Text is the entry in ovs-ofctl dump syntax.
	Text string
	// OpenFlow is its canonical OpenFlow 1.5 encoding.
	OpenFlow []byte
}

// List returns the desired entries that match f.
func (c *Client) List(ctx context.Context, f Filter) ([]StoredEntry, error) {
	req := &flowstatev1.ListRequest{Bridge: f.Bridge, Module: f.Module, Kind: flowstatev1.EntryKind(f.Kind)}
	if f.Table != nil {
		t := uint32(*f.Table)
		req.Table = &t
	}
	stream, err := c.api.List(ctx, req)
	if err != nil {
		return nil, fromGRPC(err)
	}
	var out []StoredEntry
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fromGRPC(err)
		}
		for _, se := range resp.GetEntries() {
			out = append(out, StoredEntry{
				Bridge: se.GetBridge(), Module: se.GetModule(), Kind: entry.Kind(se.GetKind()),
				Text: se.GetText(), OpenFlow: se.GetOpenflow(),
			})
		}
	}
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (*flowstatev1.StatusResponse, error) {
	resp, err := c.api.Status(ctx, &flowstatev1.StatusRequest{})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return resp, nil
}

// fromGRPC maps a gRPC status back to the errdefs kinds.
func fromGRPC(err error) error { return errgrpc.ToNative(err) }
