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

// OpenFlow 1.5 action types OVS keeps field for field.
const (
	actionOutput = 0
	actionGroup  = 22
	actionMeter  = 29
)

// isExactAction reports whether OVS stores action a as it is sent, with its
// padding zeroed: output (its max_len, which the text does not show for a
// port, is kept), group and meter.
func isExactAction(a []byte) bool {
	switch typ := be.Uint16(a); {
	case typ == actionOutput && len(a) == 16:
		return true
	case (typ == actionGroup || typ == actionMeter) && len(a) == 8:
		return true
	}
	return false
}

// appendExactAction appends an action isExactAction accepts in OVS's form.
func appendExactAction(out, a []byte) []byte {
	if be.Uint16(a) == actionOutput {
		return append(append(out, a[:10]...), 0, 0, 0, 0, 0, 0)
	}
	return append(out, a...)
}
