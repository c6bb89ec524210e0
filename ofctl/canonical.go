package ofctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// This file is what package canon needs of ofctl's models to bring encoded
// entries that the text syntax cannot wholly express to OVS's canonical
// form: the match (a finite field set, re-encoded in OVS's order) and each
// action on its own (printed and parsed back when the printer knows it,
// reported unknown otherwise, so canon keeps it as opaque bytes).

// CanonicalMatch returns OXM fields (the body of an ofp_match, without its
// header or padding) encoded as OVS encodes the same match: in nx_put_raw's
// order, all-ones masks as exact matches, values masked. It refuses what
// OVS refuses rather than dropping it: an unknown field, a field given
// twice (OFPBMC_DUP_FIELD), a field without its prerequisites
// (OFPBMC_BAD_PREREQ).
func CanonicalMatch(oxms []byte) ([]byte, error) {
	var fm FlowMatch
	return fm.Canonical(nil, oxms, 0)
}

// FlowMatch is the match of an encoded flow, decoded once for both its
// canonical encoding and the context of the flow's actions. It is large
// (two matches): reuse one rather than allocate one per flow.
type FlowMatch struct {
	mt, back match
	enc      oxmList
	table    uint8
	acx      ActionContext // Actions' result, reused: a context is kilobytes
}

// Canonical appends to dst the canonical encoding of the OXM fields oxms,
// as CanonicalMatch returns it, and keeps the match for the actions of a
// flow in table (Actions, AppendActionKey) until the next call.
func (fm *FlowMatch) Canonical(dst, oxms []byte, table uint8) ([]byte, error) {
	fm.mt.reset()
	fm.back.reset()
	fm.table = table
	fm.enc.fs, fm.enc.buf = fm.enc.fs[:0], fm.enc.buf[:0]
	if err := checkDupFields(oxms); err != nil {
		return nil, err
	}
	if err := fm.mt.decodeOXMs(oxms); err != nil {
		// Where OVS puts a field in a match decides the flow's identity,
		// so a field ofctl does not know cannot be kept as sent.
		return nil, fmt.Errorf("ofctl: match: %w (a field flowstate does not know yet cannot be declared: its place in OVS's order decides the flow's identity)", err)
	}
	fm.mt.encodeTo(&fm.enc)
	n := len(dst)
	dst = appendOXMs(dst, fm.enc.fs)
	if err := fm.back.decodeOXMs(dst[n:]); err != nil {
		return nil, fmt.Errorf("ofctl: match: re-encoded match does not decode: %w", err)
	}
	if !sameMatch(&fm.back, &fm.mt) {
		return nil, fmt.Errorf("ofctl: match: %s: OVS refuses a match field without its prerequisites (OFPBMC_BAD_PREREQ)", lostFields(&fm.mt, &fm.back))
	}
	return dst, nil
}

// Actions returns the context of the flow's apply_actions, as FlowActions
// does for the canonical match. It is fm's own, valid until the next call
// of Canonical or Actions.
func (fm *FlowMatch) Actions() *ActionContext {
	fm.acx.cx = actx{mt: fm.back, table: fm.table}
	return &fm.acx
}

// actionSlots are the match slots that parsing an action reads, through
// prerequisites (prereqOK) and the VLAN header, packet type and protocol
// that actions track: nothing else of a flow's match changes its actions.
var actionSlots = [...]slot{sPacketType, sDlType, sNwProto, sNwFrag, sTpSrc, sTpDst, sVlanTCI, sCtState, sCtNwProto}

// AppendActionKey appends to b, at a fixed length, all that the context
// of the flow's actions (Actions and its WriteActions) depends on: the
// table and the values and masks of actionSlots (a decoded match has no
// TLV map). Two flows with equal keys get the same canonical actions for
// the same action bytes.
func (fm *FlowMatch) AppendActionKey(b []byte) []byte {
	return appendSlotsKey(append(b, fm.table), &fm.back)
}

// appendSlotsKey appends the values and masks of mt's actionSlots to b.
func appendSlotsKey(b []byte, mt *match) []byte {
	for _, s := range actionSlots {
		b = append(append(b, mt.val(s)...), mt.mask(s)...)
	}
	return b
}

// AppendKey appends to b all that Canonical's result for the next action
// depends on: the kind of list, the table and actionSlots of the context
// as the list's earlier actions left it (push_vlan, encap...). Equal keys
// and equal action bytes give equal results, and an action that leaves
// the key as it was leaves the context as it was, so a caller may memoise
// Canonical by key and action bytes for such actions.
func (c *ActionContext) AppendKey(b []byte) []byte {
	var flags byte
	if c.cx.anyMatch {
		flags = 1
	}
	b = append(b, flags, c.cx.table, byte(len(c.cx.outer)))
	b = append(b, c.cx.outer...)
	return appendSlotsKey(b, &c.cx.mt)
}

// ctxSlots holds actionSlots of a context: all that parsing an action
// changes of it (the VLAN header, packet type, dl_type, nw_proto).
type ctxSlots [len(actionSlots)][2][16]byte

func (s *ctxSlots) save(mt *match) {
	for i, sl := range actionSlots {
		s[i] = [2][16]byte{mt.v[sl], mt.m[sl]}
	}
}

func (s *ctxSlots) restore(mt *match) {
	for i, sl := range actionSlots {
		mt.v[sl], mt.m[sl] = s[i][0], s[i][1]
	}
}

// sameMatch reports whether two decoded matches hold the same fields.
func sameMatch(a, b *match) bool {
	if a.v != b.v || a.m != b.m || len(a.md) != len(b.md) {
		return false
	}
	for n, x := range a.md {
		y, ok := b.md[n]
		if !ok || x.masked != y.masked || !bytes.Equal(x.v, y.v) || !bytes.Equal(x.m, y.m) {
			return false
		}
	}
	return true
}

// checkDupFields refuses a match that names one field twice, which
// decodeOXMs would silently merge.
func checkDupFields(b []byte) error {
	// A match has a few fields: a linear search beats a map until it
	// has many.
	var small [32]uint32
	seen := small[:0]
	var many map[uint32]bool
	for len(b) >= 4 {
		h := binary.BigEndian.Uint32(b) &^ 0x1ff // class and field, without mask bit and length
		if many != nil && many[h] || many == nil && slices.Contains(seen, h) {
			return fmt.Errorf("ofctl: match: field %#04x:%d given twice: OVS refuses it (OFPBMC_DUP_FIELD)", h>>16, (h>>9)&0x7f)
		}
		switch {
		case many != nil:
			many[h] = true
		case len(seen) < cap(seen):
			seen = append(seen, h)
		default:
			many = make(map[uint32]bool, 2*len(seen))
			for _, x := range seen {
				many[x] = true
			}
			many[h] = true
		}
		n := 4 + int(b[3])
		if n > len(b) {
			return errors.New("ofctl: match: truncated match field")
		}
		b = b[n:]
	}
	return nil
}

// lostFields names the slots that differ between a decoded match and its
// re-encoding: the fields whose prerequisites are missing.
func lostFields(want, got *match) string {
	var names []string
	for s := slot(0); s < nSlots; s++ {
		if want.m[s] != got.m[s] || want.v[s] != got.v[s] {
			names = append(names, slotName(s))
		}
	}
	return strings.Join(names, ", ")
}

// slotName names a match slot by the first field that maps to it.
func slotName(s slot) string {
	for _, f := range fields {
		if f.slot == s && !f.special {
			return f.name
		}
	}
	return fmt.Sprintf("field slot %d", s)
}

// appendOXMs appends fields to b as they appear in an ofp_match body.
func appendOXMs(b []byte, fs []oxm) []byte {
	for _, f := range fs {
		b = appendOXMHeader(b, f.hdr, f.m != nil, len(f.v)+len(f.m))
		b = append(append(b, f.v...), f.m...)
	}
	return b
}

// ActionContext canonicalises the actions of one action list, one at a time,
// in the context the text parser checks them in: the flow's match and
// table, or a group bucket, or an action set (write_actions).
type ActionContext struct {
	cx actx
}

// FlowActions returns the context of the apply_actions of a flow in table
// with the given canonical match body.
func FlowActions(oxms []byte, table uint8) (*ActionContext, error) {
	mt, err := decodeOXMs(oxms)
	if err != nil {
		return nil, fmt.Errorf("ofctl: match: %w", err)
	}
	return &ActionContext{cx: actx{mt: *mt, table: table}}, nil
}

// WriteActions returns the context of the flow's write_actions.
func (c *ActionContext) WriteActions() *ActionContext {
	return &ActionContext{cx: *c.cx.nested("write_actions")}
}

// BucketActions returns the context of the actions of a group bucket.
func BucketActions() *ActionContext {
	return &ActionContext{cx: actx{anyMatch: true}}
}

// Canonical returns action a (one encoded action, as its header's length
// says) as OVS encodes it, and true, when ofctl can print it and parse the
// print back; otherwise it returns nil and false, and the caller keeps the
// bytes as they are. Actions are given in list order: the context follows
// the VLAN header through push_vlan and pop_vlan as the parser does.
func (c *ActionContext) Canonical(a []byte) ([]byte, bool) {
	text, err := formatAction(a)
	if err != nil {
		return nil, false
	}
	// A failed parse may have changed the context halfway: restore it.
	// Copying the slots actions change spares copying the whole match.
	var saved ctxSlots
	saved.save(&c.cx.mt)
	out, err := c.parse(text)
	if err != nil {
		saved.restore(&c.cx.mt)
		return nil, false
	}
	return out, true
}

func (c *ActionContext) parse(text string) ([]byte, error) {
	acts, err := parseEach(text, 0, func(p kv, key string) ([][]byte, error) {
		if c.cx.anyMatch && c.cx.outer == "" {
			return c.cx.bucketAction(p)
		}
		return c.cx.parseAction(p, key)
	})
	if len(acts) == 1 {
		return acts[0], err // one action, the usual case: no copy to join
	}
	return bytes.Join(acts, nil), err
}

// CanonicalGroupProperties returns the properties that follow a group's
// buckets as OVS encodes them (the selection method of a select group), and
// true, or nil and false when ofctl does not know them.
func CanonicalGroupProperties(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return nil, true
	}
	sel, err := decodeSelection(b)
	if err != nil || sel.check(0) != nil {
		return nil, false
	}
	return sel.encode(), true
}
