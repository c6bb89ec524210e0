package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowstate-io/flowstate/errdefs"
)

// toGRPC maps an error to a gRPC status, in one place: it follows the wrap
// chain to an errdefs kind, passes context cancellation and deadlines through,
// and keeps the full message (which names the entry and the reason).
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	default:
		switch errdefs.Kind(err) {
		case errdefs.ErrInvalidArgument:
			code = codes.InvalidArgument
		case errdefs.ErrNotFound:
			code = codes.NotFound
		case errdefs.ErrAlreadyExists:
			code = codes.AlreadyExists
		case errdefs.ErrFailedPrecondition:
			code = codes.FailedPrecondition
		case errdefs.ErrUnavailable:
			code = codes.Unavailable
		}
	}
	st := status.New(code, err.Error())
	var ee *errdefs.EntryError
	if errors.As(err, &ee) {
		if d, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: fmt.Sprintf("entries[%d]", ee.Index), Description: ee.Err.Error(),
		}}}); derr == nil {
			st = d
		}
	}
	return st.Err()
}
