package errdefs

import "errors"

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
	// ErrUnavailable: a dependency (OVS, the store) cannot be reached now;
	// the caller may retry.
	ErrUnavailable = errors.New("unavailable")
)

// Kind returns the kind sentinel err wraps, or nil.
func Kind(err error) error {
	for _, k := range []error{ErrInvalidArgument, ErrNotFound, ErrAlreadyExists, ErrFailedPrecondition, ErrUnavailable} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}
