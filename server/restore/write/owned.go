package write

import (
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// checkOwned refuses the flows of a write whose cookie lies outside the
// owned space, naming the first one.
func (ws *Writes) checkOwned(es []entry.Entry) error {
	space := ws.cfg.OwnedCookie
	if space.All() {
		return nil
	}
	for i, d := range es {
		if d.Kind != entry.KindFlow {
			continue
		}
		if c := entry.FlowCookie(d.Payload); !space.Owns(c) {
			return &errdefs.EntryError{Index: i, Err: fmt.Errorf(
				"restore: cookie 0x%x lies outside the owned cookie space %s (flowstated --owned-cookie): flows there belong to another controller, flowstated leaves them alone: %w",
				c, space, errdefs.ErrInvalidArgument)}
		}
	}
	return nil
}
