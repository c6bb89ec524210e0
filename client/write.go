package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"google.golang.org/protobuf/proto"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// Module names the entries one module declares on one bridge: what Put,
// Delete and Sync change. A module declares entries on several bridges as
// several Modules of the same Name; it is ready (MarkReady, Sync's ready)
// by Name, on every bridge at once, because the boot gate waits for names.
type Module struct {
	Bridge string
	Name   string
}

func (m Module) String() string { return m.Bridge + "/" + m.Name }

// Entry is an entry to declare: in ovs-ofctl syntax or encoded.
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

// GroupText is a group in ovs-ofctl add-group syntax.
func GroupText(s string) Entry { return Entry{Kind: entry.KindGroup, Text: s} }

// MeterText is a meter in ovs-ofctl add-meter syntax.
func MeterText(s string) Entry { return Entry{Kind: entry.KindMeter, Text: s} }

// GroupBytes is an encoded OpenFlow 1.5 GROUP_MOD (command ADD), optionally
// followed by the GROUP_MOD INSERT_BUCKET messages of a group too large for
// one message. An entry holding only INSERT_BUCKETs adds its buckets to the
// group of the entry before it in the same request.
func GroupBytes(b []byte) Entry { return Entry{Kind: entry.KindGroup, OpenFlow: b} }

// MeterBytes is an encoded OpenFlow 1.5 METER_MOD (command ADD).
func MeterBytes(b []byte) Entry { return Entry{Kind: entry.KindMeter, OpenFlow: b} }

// Requests are sent in messages of at most chunkEntries entries and about
// chunkBytes, a quarter of the 4 MiB a gRPC server accepts by default:
// small enough for any flowstated, large enough that a message's overhead
// does not count.
const (
	chunkEntries = 4096
	chunkBytes   = 1 << 20
)

// entrySize is an entry's share of a message, near enough.
func entrySize(e Entry) int { return len(e.Text) + len(e.OpenFlow) + 8 }

// chunks calls send with consecutive runs of the entries seq yields that
// each fit one message, at least once (with an empty run when there are
// none), and returns how many entries it sent. send must not keep the run:
// its memory is reused. It stops at the first error, seq's or send's.
func chunks(seq iter.Seq2[Entry, error], send func(first bool, part []Entry) error) (n int, err error) {
	part, size, first := make([]Entry, 0, chunkEntries), 0, true
	flush := func() error {
		err := send(first, part)
		clear(part)
		part, size, first = part[:0], 0, false
		return err
	}
	for e, err := range seq {
		if err != nil {
			return n, err
		}
		if len(part) > 0 && (len(part) == chunkEntries || size+entrySize(e) > chunkBytes) {
			if err := flush(); err != nil {
				return n, err
			}
		}
		part, size, n = append(part, e), size+entrySize(e), n+1
	}
	if first || len(part) > 0 {
		return n, flush()
	}
	return n, nil
}

// entries yields es.
func entries(es []Entry) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for _, e := range es {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// Put declares entries of m. applied reports whether the switch
// already holds them (false: stored, applied at the next replay). A set of any
// size (up to flowstated's limit of 2,000,000 entries per request) goes in
// one call: above one message's worth, the entries are streamed (PutStream)
// and still written all or nothing.
func (c *Client) Put(ctx context.Context, m Module, es ...Entry) (applied bool, err error) {
	if len(es) > chunkEntries || !oneMessage(es) {
		return c.putStream(ctx, m, es)
	}
	resp, err := c.api.Put(ctx, &flowstatev1.PutRequest{Bridge: m.Bridge, Module: m.Name, Entries: toProtoEntries(es)})
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

func oneMessage(es []Entry) bool {
	size := 0
	for _, e := range es {
		size += entrySize(e)
	}
	return size <= chunkBytes
}

func (c *Client) putStream(ctx context.Context, m Module, es []Entry) (bool, error) {
	applied, _, err := c.PutSeq(ctx, m, entries(es))
	return applied, err
}

// PutSeq is Put of the entries seq yields, streamed as they come (PutStream)
// so that a set read from a file is never held whole, and returns how many it
// sent. An error from seq ends the stream before it is complete: flowstated
// stores nothing, and PutSeq returns that error.
func (c *Client) PutSeq(ctx context.Context, m Module, seq iter.Seq2[Entry, error]) (applied bool, n int, err error) {
	// Cancelled on return, so a failed send ends the stream and flowstated
	// stores nothing of it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.PutStream(ctx)
	if err != nil {
		return false, 0, fromGRPC(err)
	}
	var sendErr error
	n, err = chunks(seq, func(first bool, part []Entry) error {
		req := &flowstatev1.PutStreamRequest{Entries: toProtoEntries(part)}
		if first {
			req.Bridge, req.Module = m.Bridge, m.Name
		}
		sendErr = stream.Send(req)
		return sendErr
	})
	if err != nil && sendErr == nil {
		return false, n, err // seq's
	}
	if err != nil && !errors.Is(err, io.EOF) { // io.EOF: the server ended the stream; CloseAndRecv says why
		return false, n, fromGRPC(err)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return false, n, fromGRPC(err)
	}
	return resp.GetApplied(), n, nil
}

// Delete removes entries of m, named by identity (for flows:
// table, priority and match; actions may be omitted). The request is one
// message: at most MaxMessageBytes, about 100,000 flows.
func (c *Client) Delete(ctx context.Context, m Module, es ...Entry) (applied bool, err error) {
	req := &flowstatev1.DeleteRequest{Bridge: m.Bridge, Module: m.Name, Entries: toProtoEntries(es)}
	if n := proto.Size(req); n > MaxMessageBytes {
		return false, fmt.Errorf("client: a delete of %d entries is %d bytes, over the %d bytes of one message: "+
			"split it into several deletes, or replace the module's set with Sync: %w", len(es), n, MaxMessageBytes, errdefs.ErrInvalidArgument)
	}
	resp, err := c.api.Delete(ctx, req)
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

// SyncResult is the outcome of a Sync or SyncSeq.
type SyncResult struct {
	// Applied is true when the switch already holds the new set (false:
	// stored, applied at the next replay).
	Applied bool
	// Stored is the size of the new set; Added counts its entries the module
	// did not declare before, Changed those it declared with other content
	// (the rest were unchanged), Removed those of the old set that are gone.
	Stored, Added, Changed, Removed int
}

// Sync replaces the complete set of m's entries with es: what the module
// declared on m.Bridge before and is not in es is removed, on the switch in
// the same bundle. ready also marks m.Name ready for this boot (MarkReady).
// The set may have any size up to flowstated's limit of 2,000,000 entries: it
// is streamed in messages of a few thousand entries, and written all or
// nothing. The result says what changed.
func (c *Client) Sync(ctx context.Context, m Module, ready bool, es ...Entry) (SyncResult, error) {
	return c.SyncSeq(ctx, m, ready, entries(es))
}

// SyncSeq is Sync of the entries seq yields, streamed as they come, like
// PutSeq: an error from seq ends the stream, nothing changes, and SyncSeq
// returns that error.
func (c *Client) SyncSeq(ctx context.Context, m Module, ready bool, seq iter.Seq2[Entry, error]) (SyncResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.Sync(ctx)
	if err != nil {
		return SyncResult{}, fromGRPC(err)
	}
	var sendErr error
	_, err = chunks(seq, func(first bool, part []Entry) error {
		req := &flowstatev1.SyncRequest{Entries: toProtoEntries(part)}
		if first {
			req.Bridge, req.Module, req.Ready = m.Bridge, m.Name, ready
		}
		sendErr = stream.Send(req)
		return sendErr
	})
	if err != nil && sendErr == nil {
		return SyncResult{}, err // seq's
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return SyncResult{}, fromGRPC(err)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return SyncResult{}, fromGRPC(err)
	}
	return SyncResult{Applied: resp.GetApplied(), Stored: int(resp.GetStored()), Added: int(resp.GetAdded()),
		Changed: int(resp.GetChanged()), Removed: int(resp.GetRemoved())}, nil
}

// MarkReady marks the module named module ready for this boot without
// changing its entries. Readiness is the module's on every bridge (the boot
// gate waits for module names, --required-module), so it takes the Name of a
// Module, not a bridge.
func (c *Client) MarkReady(ctx context.Context, module string) error {
	_, err := c.api.MarkReady(ctx, &flowstatev1.MarkReadyRequest{Module: module})
	return fromGRPC(err)
}

// ForgetModule removes the record of a module that declares no entries,
// such as a name marked ready by mistake. It fails wrapping
// errdefs.ErrFailedPrecondition when the module is required or declares
// entries, and errdefs.ErrNotFound when flowstated has no record of it.
func (c *Client) ForgetModule(ctx context.Context, module string) error {
	_, err := c.api.ForgetModule(ctx, &flowstatev1.ForgetModuleRequest{Module: module})
	return fromGRPC(err)
}
