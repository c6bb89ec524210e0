package server

import "github.com/flowstate-io/flowstate/errdefs/errgrpc"

// toGRPC maps an error to a gRPC status at the server edge; the table is
// shared with the client (package errgrpc).
func toGRPC(err error) error { return errgrpc.ToGRPC(err) }
