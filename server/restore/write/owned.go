package write

import (
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// CheckOwned refuses the flows of a write whose cookie lies outside space,
// naming the first one; base is the position of es[0] in the request. Put
// and Sync check their entries so; the server checks a request's as they
// arrive, before it spools them.
func CheckOwned(space entry.CookieSpace, es []entry.Entry, base int) error {
	if space.All() {
		return nil
	}
	for i, d := range es {
		if d.Kind != entry.KindFlow {
			continue
		}
		if c := entry.FlowCookie(d.Payload); !space.Owns(c) {
			return &errdefs.EntryError{Index: base + i, Err: fmt.Errorf(
				"restore: cookie 0x%x lies outside the owned cookie space %s (flowstated --owned-cookie): flows there belong to another controller, flowstated leaves them alone: %w",
				c, space, errdefs.ErrInvalidArgument)}
		}
	}
	return nil
}
