package errdefs

import (
	"errors"
	"fmt"
)

// The kinds. Each maps to one gRPC code (server/errors.go).
var (
	// ErrInvalidArgument: the request is malformed or OVS rejected an entry.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the named object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the object exists and may not be replaced.
	ErrAlreadyExists = errors.New("already exists")
	// ErrFailedPrecondition: the request conflicts with the state, e.g. an
	// identity owned by another module.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrPermissionDenied: the caller may not write this module.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnavailable: a dependency (OVS, the store) cannot be reached now;
	// the caller may retry.
	ErrUnavailable = errors.New("unavailable")
	// ErrResourceExhausted: the store cannot grow (its disk or quota is
	// full); the caller may retry once an operator made room.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrInternal: a bug in flowstated (a recovered panic); the request did
	// not complete and retrying it may fail the same way.
	ErrInternal = errors.New("internal error")
)

// Kind returns the kind sentinel err wraps, or nil.
func Kind(err error) error {
	for _, k := range []error{ErrInvalidArgument, ErrNotFound, ErrAlreadyExists, ErrFailedPrecondition, ErrPermissionDenied, ErrUnavailable, ErrResourceExhausted, ErrInternal} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// EntryError says which entry of a request failed; Index is its position in the
// request. The server sends the index as a gRPC BadRequest field violation
// ("entries[3]") and the client turns it back into an EntryError.
type EntryError struct {
	Index int
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %d: %v", e.Index, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }
