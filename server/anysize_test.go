package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// largeSet is the size of the sets below: beyond both limits the API had
// (100,000 entries per request, gRPC's 4 MiB per message: about 50,000 of
// these flows), still quick on two cores. With -race, 70,000: beyond 4 MiB
// (6 MB of text, and of diff), in about the time 150,000 take without it.
var largeSet = map[bool]int{false: 150_000, true: 70_000}[raceEnabled]

// manyFlows returns n distinct flows of table, each about 80 bytes of text.
func manyFlows(table, n, from int) []client.Entry {
	es := make([]client.Entry, n)
	for i := range n {
		j := from + i
		es[i] = client.FlowText(fmt.Sprintf("table=%d,priority=100,tcp,nw_src=10.%d.%d.%d,tp_dst=80,actions=resubmit(,20)",
			table, j>>16, (j>>8)&255, j&255))
	}
	return es
}

// moduleCount is the number of entries List returns for module on br-int.
func (e *env) moduleCount(ctx context.Context, module string) int {
	e.t.Helper()
	es, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Module: module})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(es)
}

// rawAPI is the generated client on a connection with gRPC's default limits
// (4 MiB per message received), to see the API as any client sees it.
func (e *env) rawAPI(ctx context.Context) flowstatev1.FlowStateServiceClient {
	cc, err := grpc.NewClient(e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cc.Close() })
	return flowstatev1.NewFlowStateServiceClient(cc)
}

// TestAnySize: sets beyond one gRPC message go through Put and Sync in one
// call each, all or nothing; Diff of a divergence of that size comes in
// messages any client accepts. (The switch holding what was applied is
// shown by the other tests; here the sets are large, so the checks are
// counts: about 20 s, with -race too.)
func TestAnySize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	api := e.rawAPI(ctx)

	set := manyFlows(10, largeSet, 0)
	applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "policy"}, set...)
	if err != nil || !applied {
		t.Fatalf("put of %d flows: applied=%v err=%v", largeSet, applied, err)
	}
	if n := e.bridgeStatus(ctx, "br-int").Flows; n != largeSet {
		t.Fatalf("desired flows after the put: %d, want %d", n, largeSet)
	}

	t.Run("sync replaces a large set", func(t *testing.T) {
		half := largeSet / 2
		next := append(set[half:], manyFlows(10, half, largeSet)...)
		res, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "policy"}, false, next...)
		if err != nil {
			t.Fatal(err)
		}
		want := client.SyncResult{Applied: true, Stored: largeSet, Added: half, Removed: half}
		if res != want {
			t.Fatalf("sync: %+v, want %+v", res, want)
		}
	})

	t.Run("diff streams", func(t *testing.T) {
		if out, err := e.sb.Ofctl(ctx, "del-flows", "br-int", "table=10"); err != nil {
			t.Fatal(err, out)
		}
		stream, err := api.Diff(ctx, &flowstatev1.DiffRequest{Bridge: "br-int"})
		if err != nil {
			t.Fatal(err)
		}
		changes, msgs := 0, 0
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("diff of %d changes with a 4 MiB client after %d messages: %v", largeSet, msgs, err)
			}
			msgs++
			for _, c := range resp.GetChanges() {
				if c.GetOp() == flowstatev1.Change_OP_ADD {
					changes++
				}
			}
		}
		if changes != largeSet || msgs < 2 {
			t.Fatalf("diff: %d adds in %d messages, want %d adds", changes, msgs, largeSet)
		}
	})

	// An entry refused in the 37th message of a stream: nothing of the
	// request is stored, and the error names the entry's index in the whole
	// stream. Messages of 100 entries keep it quick; the client's own
	// chunking is checked with a bad entry in its third message.
	t.Run("a bad entry deep in a stream stores nothing", func(t *testing.T) {
		bad := 36*100 + 7
		es := manyFlows(11, 40*100, 0)
		es[bad] = client.FlowText("table=11,priority=1,nosuchfield=1,actions=drop")
		for name, open := range map[string]func(context.Context) (func([]*flowstatev1.Entry, bool) error, func() error, error){
			"putstream": openPutStream(api, "bad"), "sync": openSync(api, "bad"),
		} {
			send, closeAndRecv, err := open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(es); i += 100 {
				if err := send(protoFlows(es[i:i+100]), i == 0); err != nil {
					break // the server ended the stream: closeAndRecv says why
				}
			}
			err = closeAndRecv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nosuchfield") {
				t.Fatalf("%s with a bad entry %d: %v", name, bad, err)
			}
			if n := e.moduleCount(ctx, "bad"); n != 0 {
				t.Fatalf("%s refused but stored %d entries", name, n)
			}
		}
		bad = 2*4096 + 7
		es = manyFlows(11, 3*4096, 0)
		es[bad] = client.FlowText("table=11,priority=1,nosuchfield=1,actions=drop")
		for name, write := range map[string]func() error{
			"put": func() error { _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "bad"}, es...); return err },
			"sync": func() error {
				_, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "bad"}, false, es...)
				return err
			},
		} {
			err := write()
			var ee *errdefs.EntryError
			if !errors.As(err, &ee) || ee.Index != bad || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%s with a bad entry %d: %v", name, bad, err)
			}
			if n := e.moduleCount(ctx, "bad"); n != 0 {
				t.Fatalf("%s refused but stored %d entries", name, n)
			}
		}
	})

	// A client that goes away in the middle of its stream stores nothing.
	t.Run("a stream cancelled midway stores nothing", func(t *testing.T) {
		for name, open := range map[string]func(context.Context) (func([]*flowstatev1.Entry, bool) error, func() error, error){
			"putstream": openPutStream(api, "gone"), "sync": openSync(api, "gone"),
		} {
			sctx, scancel := context.WithCancel(ctx)
			send, _, err := open(sctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if err := send(protoFlows(manyFlows(12, 500, i*500)), i == 0); err != nil {
					t.Fatalf("%s: send %d: %v", name, i, err)
				}
			}
			scancel()
			// A write queued behind it on the same bridge: once it is done,
			// the cancelled stream has had every chance to be written.
			if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "after"}, manyFlows(13, 1, 0)...); err != nil {
				t.Fatal(err)
			}
			if n := e.moduleCount(ctx, "gone"); n != 0 {
				t.Fatalf("%s cancelled midway stored %d entries", name, n)
			}
		}
		if st := e.status(ctx); moduleReady(st, "gone") {
			t.Fatal("a cancelled sync marked its module ready")
		}
	})

	t.Run("a message over the limit names it", func(t *testing.T) {
		s, err := api.PutStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		big := make([]client.Entry, 270) // 270 × 64,000 bytes: over 16 MiB
		pad := "table=14,priority=%d,ip,actions=note:" + strings.Repeat("00.", 63990/3)
		for i := range big {
			big[i] = client.FlowText(fmt.Sprintf(pad, i)[:64000])
		}
		_ = s.Send(&flowstatev1.PutStreamRequest{Bridge: "br-int", Module: "big", Entries: protoFlows(big)})
		_, err = s.CloseAndRecv()
		// gRPC answers before the handler runs; its message names the limit.
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "vs. 16777216") {
			t.Fatalf("a message over 16 MiB: %v", err)
		}
		if n := e.moduleCount(ctx, "big"); n != 0 {
			t.Fatalf("stored %d entries of a refused stream", n)
		}
	})
}

// openPutStream and openSync open a raw stream for module on br-int: send
// sends one message (the first names the target), closeAndRecv ends it.
func openPutStream(api flowstatev1.FlowStateServiceClient, module string) func(context.Context) (func([]*flowstatev1.Entry, bool) error, func() error, error) {
	return func(ctx context.Context) (func([]*flowstatev1.Entry, bool) error, func() error, error) {
		s, err := api.PutStream(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(es []*flowstatev1.Entry, first bool) error {
				req := &flowstatev1.PutStreamRequest{Entries: es}
				if first {
					req.Bridge, req.Module = "br-int", module
				}
				return s.Send(req)
			}, func() error {
				_, err := s.CloseAndRecv()
				return err
			}, nil
	}
}

func openSync(api flowstatev1.FlowStateServiceClient, module string) func(context.Context) (func([]*flowstatev1.Entry, bool) error, func() error, error) {
	return func(ctx context.Context) (func([]*flowstatev1.Entry, bool) error, func() error, error) {
		s, err := api.Sync(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(es []*flowstatev1.Entry, first bool) error {
				req := &flowstatev1.SyncRequest{Entries: es, Ready: true}
				if first {
					req.Bridge, req.Module = "br-int", module
				}
				return s.Send(req)
			}, func() error {
				_, err := s.CloseAndRecv()
				return err
			}, nil
	}
}

func protoFlows(es []client.Entry) []*flowstatev1.Entry {
	out := make([]*flowstatev1.Entry, len(es))
	for i, e := range es {
		out[i] = &flowstatev1.Entry{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Text{Text: e.Text}}
	}
	return out
}

func moduleReady(st *client.Status, name string) bool {
	for _, m := range st.Modules {
		if m.Name == name && m.Ready {
			return true
		}
	}
	return false
}
