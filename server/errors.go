package server

import (
	"errors"

	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
	"github.com/flowstate-io/flowstate/store"
)

// toGRPC maps an error to a gRPC status at the server edge; the table is
// shared with the client (package errgrpc). A group or meter in use is named
// with its first user in ovs-ofctl syntax, which only the server can print.
func toGRPC(err error) error {
	var iu *store.InUseError
	if errors.As(err, &iu) && iu.FirstText == "" && iu.First.Payload != nil {
		iu.FirstText = formatEntry(iu.First.Kind, iu.First.Payload)
	}
	return errgrpc.ToGRPC(err)
}
