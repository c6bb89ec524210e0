package errgrpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Domain marks, in an errdetails.ErrorInfo, a status that flowstated's
// handlers returned: its verdict, as opposed to a status gRPC made up for a
// connection that failed. A client resends only the latter.
const Domain = "flowstate.io"

// kinds is the one table of kind <-> code.
var kinds = []struct {
	kind error
	code codes.Code
}{
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{errdefs.ErrInvalidArgument, codes.InvalidArgument},
	{errdefs.ErrNotFound, codes.NotFound},
	{errdefs.ErrAlreadyExists, codes.AlreadyExists},
	{errdefs.ErrFailedPrecondition, codes.FailedPrecondition},
	{errdefs.ErrPermissionDenied, codes.PermissionDenied},
	{errdefs.ErrUnavailable, codes.Unavailable},
	{errdefs.ErrResourceExhausted, codes.ResourceExhausted},
	{errdefs.ErrInternal, codes.Internal},
}

// ToGRPC maps err to a gRPC status error: the first kind in its wrap chain
// gives the code (Unknown if none), the message is kept whole, and an
// *errdefs.EntryError adds the entry's index as a field violation.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	for _, k := range kinds {
		if errors.Is(err, k.kind) {
			code = k.code
			break
		}
	}
	st := status.New(code, err.Error())
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Domain: Domain, Reason: code.String()}}
	var ee *errdefs.EntryError
	if errors.As(err, &ee) {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: fmt.Sprintf("entries[%d]", ee.Index), Description: ee.Err.Error(),
		}}})
	}
	if d, derr := st.WithDetails(details...); derr == nil {
		st = d
	}
	return st.Err()
}

// ToNative maps a gRPC status error back to an error wrapping its kind, and a
// field violation "entries[N]" to an *errdefs.EntryError. The message is the
// server's, which already states its kind and entry: they are not repeated.
func ToNative(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var kind error
	for _, k := range kinds {
		if k.code == st.Code() {
			kind = k.kind
			break
		}
	}
	if kind == nil {
		return fmt.Errorf("flowstated: %s (%s)", st.Message(), st.Code())
	}
	msg := st.Message()
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			if i, ok := entryIndex(v.GetField()); ok {
				// EntryError prints "entry N: " itself.
				msg = strings.Replace(msg, fmt.Sprintf("entry %d: ", i), "", 1)
				return &errdefs.EntryError{Index: i, Err: &kindError{msg: msg, kind: kind}}
			}
		}
	}
	return &kindError{msg: msg, kind: kind}
}

// kindError is a server's error message that wraps its kind without
// repeating it.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string {
	if strings.Contains(e.msg, e.kind.Error()) {
		return "flowstated: " + e.msg
	}
	return "flowstated: " + e.msg + ": " + e.kind.Error()
}

func (e *kindError) Unwrap() error { return e.kind }

func entryIndex(field string) (int, bool) {
	s, ok := strings.CutPrefix(field, "entries[")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil
}
