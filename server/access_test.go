package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
)

// wireCodec sends requests as the bytes given ([]byte), so a test can send
// what the Go protobuf library refuses to encode; replies decode as usual.
type wireCodec struct{}

func (wireCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (wireCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (wireCodec) Name() string                    { return "proto" }

// withBadUTF8 encodes m and replaces the marker (a string of m) with bytes of
// the same length that are not UTF-8.
func withBadUTF8(t *testing.T, m proto.Message, marker string) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(marker)) {
		t.Fatalf("marker %q not in the encoding", marker)
	}
	return bytes.Replace(b, []byte(marker), bytes.Repeat([]byte{0xff}, len(marker)), 1)
}

// TestInvalidUTF8: a request whose strings are not UTF-8 (which grpc-go
// reports as INTERNAL) gets INVALID_ARGUMENT naming the field, for unary and
// streaming calls; nothing is stored.
func TestInvalidUTF8(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	conn, err := grpc.NewClient(e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wireCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	flow := func(text string) []*flowstatev1.Entry {
		return []*flowstatev1.Entry{{Kind: flowstatev1.EntryKind_ENTRY_KIND_FLOW, Body: &flowstatev1.Entry_Text{Text: text}}}
	}
	wantField := func(what string, err error, field string) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), field) || !strings.Contains(st.Message(), "invalid UTF-8") ||
			strings.Count(st.Message(), "invalid argument") != 1 {
			t.Fatalf("%s: %v, want INVALID_ARGUMENT naming %s", what, err, field)
		}
	}
	put := withBadUTF8(t, &flowstatev1.PutRequest{Bridge: "br-int", Module: "pod", Entries: flow("table=0,priority=1,ip,actions=drop,MARK")}, "MARK")
	err = conn.Invoke(ctx, flowstatev1.FlowStateService_Put_FullMethodName, put, new(flowstatev1.PutResponse))
	wantField("put", err, "field entries[0].text")

	stream, err := conn.NewStream(ctx, &flowstatev1.FlowStateService_ServiceDesc.Streams[1], flowstatev1.FlowStateService_Sync_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(withBadUTF8(t, &flowstatev1.SyncRequest{Bridge: "br-int", Module: "MARK"}, "MARK")); err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	err = stream.RecvMsg(new(flowstatev1.SyncResponse))
	wantField("sync", err, "field module")

	if es, err := e.c.List(ctx, client.Filter{}); err != nil || len(es) != 0 {
		t.Fatalf("store after refused requests: %d entries (%v)", len(es), err)
	}
}
