package server

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowstate-io/flowstate/errdefs"
)

// withDecodeErrors returns a copy of desc whose handlers report a request
// that does not decode for a reason of the caller's (a string field with
// invalid UTF-8) as INVALID_ARGUMENT naming the field. grpc-go decodes
// inside the generated handler, before any interceptor runs, and reports
// every decoding failure as INTERNAL.
func withDecodeErrors(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return decodeError(dec(v)) }, in)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		h := s.Handler
		s.Handler = func(srv any, stream grpc.ServerStream) error {
			return h(srv, decodingStream{stream})
		}
		d.Streams[i] = s
	}
	return &d
}

type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error { return decodeError(s.ServerStream.RecvMsg(m)) }

// decodeError maps protobuf's "field X contains invalid UTF-8", which grpc-go
// wraps in an INTERNAL status, to INVALID_ARGUMENT.
func decodeError(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || st.Code() != codes.Internal {
		return err
	}
	msg := st.Message()
	i := strings.Index(msg, "field ")
	if i < 0 || !strings.Contains(msg, "invalid UTF-8") {
		return err
	}
	return toGRPC(fmt.Errorf("request: %s: strings must be UTF-8 (send raw bytes as an encoded entry, Entry.openflow): %w", msg[i:], errdefs.ErrInvalidArgument))
}
