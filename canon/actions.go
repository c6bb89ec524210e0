package canon

import (
	"fmt"

	"github.com/flowstate-io/flowstate/ofctl"
)

// canonicalActions returns an encoded action list with every action ofctl
// knows in OVS's encoding and every other action as it was sent: OVS decodes
// and re-encodes those itself, and what it dumps back is its own business,
// not something to re-implement here. kept is set when an action is kept as
// sent.
func canonicalActions(b []byte, cx *ofctl.ActionContext, kept *bool) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; len(b) > 0; i++ {
		if len(b) < 8 {
			return nil, fmt.Errorf("action %d: truncated (%d bytes)", i, len(b))
		}
		n := int(be.Uint16(b[2:]))
		if n < 8 || n%8 != 0 || n > len(b) {
			return nil, fmt.Errorf("action %d: length %d (want a multiple of 8, at most the %d bytes left)", i, n, len(b))
		}
		if c, ok := exactAction(b[:n]); ok {
			out = append(out, c...)
		} else if c, ok := cx.Canonical(b[:n]); ok {
			out = append(out, c...)
		} else {
			out = append(out, b[:n]...)
			*kept = true
		}
		b = b[n:]
	}
	return out, nil
}

// OpenFlow 1.5 action types OVS keeps field for field.
const (
	actionOutput = 0
	actionGroup  = 22
	actionMeter  = 29
)

// exactAction returns the actions OVS stores as they are sent, with their
// padding zeroed: output (its max_len, which the text does not show for a
// port, is kept), group and meter.
func exactAction(a []byte) ([]byte, bool) {
	switch typ := be.Uint16(a); {
	case typ == actionOutput && len(a) == 16:
		out := make([]byte, 16)
		copy(out, a[:10])
		return out, true
	case (typ == actionGroup || typ == actionMeter) && len(a) == 8:
		return clone(a), true
	}
	return nil, false
}
