package canon

import (
	"bytes"
	"fmt"

	"github.com/flowstate-io/flowstate/ofctl"
)

// canonicalActions returns an encoded action list with every action ofctl
// knows in OVS's encoding and every other action as it was sent: OVS decodes
// and re-encodes those itself, and what it dumps back is its own business,
// not something to re-implement here. kept is set when an action is kept as
// sent.
func canonicalActions(b []byte, cx *ofctl.ActionContext, kept *bool) ([]byte, error) {
	return appendCanonicalActions(make([]byte, 0, len(b)), b, cx, kept, nil)
}

// appendCanonicalActions is canonicalActions appending to out, through am
// unless it is nil. cx may be nil when allExact(b).
func appendCanonicalActions(out, b []byte, cx *ofctl.ActionContext, kept *bool, am *actionMemo) ([]byte, error) {
	for i := 0; len(b) > 0; i++ {
		if len(b) < 8 {
			return nil, fmt.Errorf("action %d: truncated (%d bytes)", i, len(b))
		}
		n := int(be.Uint16(b[2:]))
		if n < 8 || n%8 != 0 || n > len(b) {
			return nil, fmt.Errorf("action %d: length %d (want a multiple of 8, at most the %d bytes left)", i, n, len(b))
		}
		if isExactAction(b[:n]) {
			out = appendExactAction(out, b[:n])
		} else if c, ok := am.canonical(cx, b[:n]); ok {
			out = append(out, c...)
		} else {
			out = append(out, b[:n]...)
			*kept = true
		}
		b = b[n:]
	}
	return out, nil
}

// actionMemo is cx.Canonical memoised in a cache by the context's key
// (ofctl.ActionContext.AppendKey) and the action's bytes, for the actions
// of one list in turn.
type actionMemo struct {
	cache *listCache
	key   []byte // the context's key, then the action's
	plen  int    // length of the context's key; 0 until computed
	after []byte // the context's key after a miss
}

// start readies m for a list in a new context.
func (m *actionMemo) start(cache *listCache) {
	m.cache, m.plen = cache, 0
}

// canonical returns what cx.Canonical(a) returns, from the cache when it
// can. A result from the cache is shared: read only. A nil m only calls
// cx.Canonical.
func (m *actionMemo) canonical(cx *ofctl.ActionContext, a []byte) ([]byte, bool) {
	if m == nil {
		return cx.Canonical(a)
	}
	if m.plen == 0 {
		m.key = cx.AppendKey(m.key[:0])
		m.plen = len(m.key)
	}
	m.key = append(m.key[:m.plen], a...)
	h := m.cache.hash(m.key)
	if l, ok := m.cache.lookup(h, m.key); ok {
		return l.acts, !l.kept
	}
	c, ok := cx.Canonical(a)
	m.after = cx.AppendKey(m.after[:0])
	if bytes.Equal(m.after, m.key[:m.plen]) {
		m.cache.offer(h, m.key, c, !ok)
	} else {
		// The action changed the context (push_vlan, encap...): its result
		// is not all it does, so it is not memoised, and the actions after
		// it are keyed by the new context.
		m.key = append(m.key[:0], m.after...)
		m.plen = len(m.key)
	}
	return c, ok
}

// allExact reports whether b is a well-formed action list of exact actions
// only, which canonicalActions brings to the canonical form without a
// context.
func allExact(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 8 {
			return false
		}
		n := int(be.Uint16(b[2:]))
		if n < 8 || n%8 != 0 || n > len(b) || !isExactAction(b[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// OpenFlow 1.5 action types whose canonical form follows from their bytes.
const (
	actionOutput   = 0
	actionGroup    = 22
	actionSetField = 25
	actionMeter    = 29
)

// OXM classes of the registers: NXM_NX_REG0..15 (32 bits) and
// OXM_OF_PKT_REG0..7 (xreg, 64 bits).
const (
	classNXM1   = 0x0001
	classPktReg = 0x8001
)

// isExactAction reports whether OVS's form of action a follows from its
// bytes alone, whatever the context: output (its max_len, which the text
// does not show for a port, is kept), group and meter as sent with their
// padding zeroed, and a set_field of a whole register, which every CNI
// flow carries with a per-flow value and which would otherwise be printed
// and parsed back one value at a time. TestExactActionsAsParsed holds each
// to what printing and parsing back gives.
func isExactAction(a []byte) bool {
	switch typ := be.Uint16(a); {
	case typ == actionOutput && len(a) == 16:
		return true
	case (typ == actionGroup || typ == actionMeter) && len(a) == 8:
		return true
	case typ == actionSetField:
		return regWidth(a) > 0
	}
	return false
}

// regWidth returns the width in bytes of the register that set_field
// action a sets whole: unmasked, or with a mask of all ones, which OVS
// stores unmasked. It returns 0 for any other set_field.
func regWidth(a []byte) int {
	if len(a) < 8 {
		return 0
	}
	h := be.Uint32(a[4:])
	class, field, masked, n := h>>16, h>>9&0x7f, h&0x100 != 0, int(h&0xff)
	var w int
	switch {
	case class == classNXM1 && field < 16:
		w = 4
	case class == classPktReg && field < 8:
		w = 8
	default:
		return 0
	}
	if masked {
		if n != 2*w || len(a) < 8+2*w || !bytes.Equal(a[8+w:8+2*w], ones[:w]) {
			return 0
		}
	} else if n != w {
		return 0
	}
	if len(a) != pad8(8+n) {
		return 0
	}
	return w
}

// ones is the all-ones mask of the widest register.
var ones = bytes.Repeat([]byte{0xff}, 8)

// appendExactAction appends an action isExactAction accepts in OVS's form.
func appendExactAction(out, a []byte) []byte {
	switch be.Uint16(a) {
	case actionOutput:
		return append(append(out, a[:10]...), 0, 0, 0, 0, 0, 0)
	case actionSetField:
		w := regWidth(a)
		n := len(out)
		out = append(out, 0, actionSetField, 0, byte(pad8(8+w)))
		out = be.AppendUint32(out, be.Uint32(a[4:])&^0x1ff|uint32(w)) // unmasked
		out = append(out, a[8:8+w]...)
		return append(out, make([]byte, pad8(8+w)-(len(out)-n))...)
	}
	return append(out, a...)
}
