package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
)

// toGRPC maps an error to a gRPC status at the server edge; the table is
// shared with the client (package errgrpc).
func toGRPC(err error) error { return errgrpc.ToGRPC(err) }

// noRetry is the gRPC server pushback that tells a client's retry policy not
// to send the call again (gRFC A6: a negative grpc-retry-pushback-ms).
var noRetry = metadata.Pairs("grpc-retry-pushback-ms", "-1")

// unaryVerdicts and streamVerdicts mark an UNAVAILABLE that flowstated
// itself answers (a bridge not connected, the store not writable) as not to
// be retried: it is flowstated's verdict, which a retry a few hundred
// milliseconds later only repeats, four times over. Clients retry the
// UNAVAILABLE of the transport (flowstated restarting) as before, and a
// write refused because flowstated is stopping, which a restarted
// flowstated takes.
func unaryVerdicts(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if verdict(err) {
		_ = grpc.SetTrailer(ctx, noRetry)
	}
	return resp, err
}

func streamVerdicts(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	if verdict(err) {
		ss.SetTrailer(noRetry)
	}
	return err
}

// verdict reports whether err is an UNAVAILABLE of flowstated's own that a
// retry would only repeat.
func verdict(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && !strings.Contains(st.Message(), "flowstated is stopping")
}
