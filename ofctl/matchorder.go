package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrBadPrereq is what CheckMatchOrder returns (wrapped) for a match field
// whose prerequisites the fields before it do not satisfy: vswitchd
// refuses the message with OFPBMC_BAD_PREREQ.
var ErrBadPrereq = errors.New("ofctl: match field without its prerequisites (OFPBMC_BAD_PREREQ)")

// CheckMatchOrder checks the OXM fields of an encoded match (the body of an
// ofp_match, without its header or padding) as vswitchd's nx_pull_raw
// reads them: one at a time, in the order sent, each field's prerequisites
// checked against the fields before it. A field whose prerequisites are
// missing, or come only after it (nw_dst before eth_type), is refused with
// ErrBadPrereq, even where the match as a whole would satisfy them
// (CanonicalMatch, which re-encodes in OVS's order, takes such a match).
//
// Only the order is checked: at a field or encoding that ofctl cannot
// decode, the check stops and returns nil, for the match's other decoders
// to refuse.
func CheckMatchOrder(oxms []byte) error {
	mt := new(match)
	for b := oxms; len(b) > 0; {
		if len(b) < 4 {
			return nil
		}
		class := uint32(binary.BigEndian.Uint16(b))
		fb, n := b[2], int(b[3])
		if len(b) < 4+n {
			return nil
		}
		body := b[4 : 4+n]
		b = b[4+n:]
		h := oxmHdr{class, fb >> 1}
		if class == 0xffff {
			var err error
			if h, body, err = pullExperimenter(fb>>1, body); err != nil {
				return nil
			}
		}
		var v, m []byte
		if fb&1 != 0 {
			if len(body)%2 != 0 {
				return nil
			}
			v, m = body[:len(body)/2], body[len(body)/2:]
		} else {
			v, m = body, allOnes[:len(body):len(body)]
		}
		if h.class == clsNXM1 && h.field >= tunMDFirstNX && h.field < tunMDFirstNX+tunMDFields {
			// tun_metadata: no prerequisites, and nothing that is one.
			continue
		}
		pre, name, ok := wirePrereq(h)
		if !ok {
			return nil
		}
		if !mt.prereqOK(pre) {
			return fmt.Errorf("%w: %s needs %s before it in the match", ErrBadPrereq, name, prereqText(pre))
		}
		if mt.decodeField(h, v, m) != nil {
			return nil
		}
	}
	return nil
}

// wirePrereq returns the prerequisites vswitchd (meta-flow.h) gives the
// field of an OXM header, and its name, where they differ from the
// prerequisites ofctl's text parser checks: vlan_pcp needs a VLAN header
// (the parser sets one for it), and the conntrack tuple fields need only a
// valid connection (vswitchd checks their IP version after the match).
func wirePrereq(h oxmHdr) (prereq, string, bool) {
	switch h {
	case oxmHdr{clsOXM, 7}:
		return preVLAN, "vlan_pcp", true
	case oxmHdr{clsNXM1, 120}, oxmHdr{clsNXM1, 121}, oxmHdr{clsNXM1, 122}, oxmHdr{clsNXM1, 123},
		oxmHdr{clsNXM1, 124}, oxmHdr{clsNXM1, 125}:
		return preCt, fieldByHdr[h].name, true
	}
	if h.class == clsPktRg && h.field < 8 || h.class == clsNXM1 && h.field < 16 {
		return preNone, "register", true
	}
	f, ok := fieldByHdr[h]
	if !ok {
		return preNone, "", false
	}
	return f.pre, f.name, true
}
