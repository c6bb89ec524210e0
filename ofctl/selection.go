package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// selection is the selection method of a select group: OVS's Netronome
// group property (NTRT_SELECTION_METHOD), "hash" or "dp_hash", with an
// optional parameter and, for "hash", the fields hashed and their masks.
type selection struct {
	method string
	param  uint64
	fields []selField // in OVS's field order (mf_field_id)
}

type selField struct {
	f    *field
	mask []byte
}

const (
	ntrVendor             = 0x0000154d
	ntrSelectionMethod    = 1
	groupPropExperimenter = 0xffff
	selMethodLen          = 16
)

// mffOrder lists the fields a selection may hash in OVS's mf_field_id
// order, which is the order OVS encodes and prints them in.
// It is built on first use, after the field tables.
var mffOrder = sync.OnceValue(func() map[*field]int {
	names := []string{"conj_id", "tun_id", "tun_src", "tun_dst", "tun_ipv6_src", "tun_ipv6_dst", "tun_flags",
		"tun_gbp_id", "tun_gbp_flags", "metadata", "in_port", "pkt_mark", "ct_state", "ct_zone", "ct_mark", "ct_label",
		"ct_nw_proto", "ct_nw_src", "ct_nw_dst", "ct_ipv6_src", "ct_ipv6_dst", "ct_tp_src", "ct_tp_dst"}
	for i := 0; i < 16; i++ {
		names = append(names, "reg"+itoa(i))
	}
	for i := 0; i < 8; i++ {
		names = append(names, "xreg"+itoa(i))
	}
	for i := 0; i < 4; i++ {
		names = append(names, "xxreg"+itoa(i))
	}
	names = append(names, "eth_src", "eth_dst", "eth_type", "vlan_tci", "vlan_vid", "vlan_pcp",
		"ip_src", "ip_dst", "ipv6_src", "ipv6_dst", "ipv6_label", "nw_proto", "nw_tos", "ip_dscp", "nw_ecn", "nw_ttl",
		"ip_frag", "arp_op", "arp_spa", "arp_tpa", "arp_sha", "arp_tha", "tcp_src", "tcp_dst", "tcp_flags",
		"udp_src", "udp_dst", "sctp_src", "sctp_dst", "icmp_type", "icmp_code", "icmpv6_type", "icmpv6_code",
		"nd_target", "nd_sll", "nd_tll")
	m := map[*field]int{}
	for i, n := range names {
		m[fieldByName[n]] = i
	}
	return m
})

// parse handles one of the keys selection_method, selection_method_param
// and fields (fields=F or fields(F,F=MASK,...)).
func (sel *selection) parse(p kv) error {
	switch p.key {
	case "selection_method":
		if p.val != "hash" && p.val != "dp_hash" {
			return errAt(p.valOff, p.val, "unknown selection method (want hash or dp_hash)")
		}
		sel.method = p.val
	case "selection_method_param":
		v, err := parseUint(p.val, 64)
		if err != nil {
			return errAt(p.valOff, p.val, "bad selection_method_param (want a 64-bit number)")
		}
		sel.param = v
	case "fields":
		sc := newScanner(p.val, p.valOff)
		for {
			q, ok, err := sc.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			f := fieldByName[q.key]
			if _, known := mffOrder()[f]; f == nil || !known {
				return errAt(q.keyOff, q.key, "unknown field or one that cannot be hashed")
			}
			for _, sf := range sel.fields {
				if sf.f == f {
					return errAt(q.keyOff, q.key, "duplicate field")
				}
			}
			mask := ones(f.bytes)
			if q.val != "" {
				v, _, err := parseFieldValueMask(f, q.val, false)
				if err != nil {
					return errAt(q.valOff, q.val, "%v", err)
				}
				if isZero(v) {
					return errAt(q.valOff, q.val, "values are wildcards here and must not be all-zeros")
				}
				mask = v
			}
			sel.fields = append(sel.fields, selField{f, mask})
		}
	}
	return nil
}

// check applies OVS's rules between the keys once all are read.
func (sel *selection) check(off int) error {
	if len(sel.fields) > 0 && sel.method != "hash" {
		return errAt(off, "", "fields may only be specified with \"selection_method=hash\"")
	}
	if sel.method == "" && sel.param != 0 {
		return errAt(off, "", "selection_method_param is only allowed with \"selection_method\"")
	}
	// OVS keeps the fields in its own order.
	for i := 1; i < len(sel.fields); i++ {
		for j := i; j > 0 && mffOrder()[sel.fields[j].f] < mffOrder()[sel.fields[j-1].f]; j-- {
			sel.fields[j], sel.fields[j-1] = sel.fields[j-1], sel.fields[j]
		}
	}
	return nil
}

// encode returns the group property, or nothing without a method.
func (sel *selection) encode() []byte {
	if sel.method == "" {
		return nil
	}
	b := binary.BigEndian.AppendUint16(nil, groupPropExperimenter)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint32(b, ntrVendor)
	b = binary.BigEndian.AppendUint32(b, ntrSelectionMethod)
	b = append(b, 0, 0, 0, 0)
	m := make([]byte, selMethodLen)
	copy(m, sel.method)
	b = append(b, m...)
	b = binary.BigEndian.AppendUint64(b, sel.param)
	for _, sf := range sel.fields {
		b = appendOXMHeader(b, sf.f.hdr, false, len(sf.mask))
		b = append(b, sf.mask...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return pad8(b)
}

// decodeSelection reads the properties that follow a group's buckets.
func decodeSelection(b []byte) (selection, error) {
	var sel selection
	if len(b) == 0 {
		return sel, nil
	}
	if len(b) < 40 || binary.BigEndian.Uint16(b) != groupPropExperimenter ||
		binary.BigEndian.Uint32(b[4:]) != ntrVendor || binary.BigEndian.Uint32(b[8:]) != ntrSelectionMethod {
		return sel, errors.New("unsupported group property")
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if n < 40 || (n+7)/8*8 != len(b) {
		return sel, errors.New("bad selection method property length")
	}
	sel.method = strings.TrimRight(string(b[16:32]), "\x00")
	if sel.method != "hash" && sel.method != "dp_hash" {
		return sel, fmt.Errorf("unknown selection method %q", sel.method)
	}
	sel.param = binary.BigEndian.Uint64(b[32:])
	fs := b[40:n]
	for len(fs) > 0 {
		if len(fs) < 4 {
			return sel, errors.New("truncated selection field")
		}
		h := binary.BigEndian.Uint32(fs)
		f, err := fieldFromHeader(h)
		if err != nil || h&0x100 != 0 || 4+f.bytes > len(fs) {
			return sel, fmt.Errorf("unsupported selection field header %#08x", h)
		}
		sel.fields = append(sel.fields, selField{f, fs[4 : 4+f.bytes]})
		fs = fs[4+f.bytes:]
	}
	return sel, nil
}

// String prints the selection as OVS's dump-groups does, with a leading
// comma, or "" without a method.
func (sel selection) String() string {
	if sel.method == "" {
		return ""
	}
	s := ",selection_method=" + sel.method
	if sel.param != 0 {
		s += ",selection_method_param=" + strconv.FormatUint(sel.param, 10)
	}
	var parts []string
	for _, sf := range sel.fields {
		if isOnes(sf.mask) {
			parts = append(parts, sf.f.name)
		} else {
			parts = append(parts, sf.f.name+"="+formatValue(sf.f, sf.mask, nil))
		}
	}
	switch len(parts) {
	case 0:
	case 1:
		s += ",fields=" + parts[0]
	default:
		s += ",fields(" + strings.Join(parts, ",") + ")"
	}
	return s
}
