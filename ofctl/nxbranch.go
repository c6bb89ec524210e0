// The Nicira actions that branch or choose: clone and check_pkt_larger (nested
// actions), sample (a probability) and multipath (a hash; its hash arguments
// are bundle's too), parsed and printed.

package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// parseClone parses clone(ACTIONS). What the nested actions do to the flow
// (a pushed VLAN header) does not outlast the clone.
func (cx *actx) parseClone(p kv) ([]byte, error) {
	is, err := cx.nested("clone").parseActions(p.val, p.valOff)
	if err != nil {
		return nil, err
	}
	b := append(nxHeader(nxastClone), make([]byte, 6)...)
	for _, a := range is.apply {
		b = append(b, a...)
	}
	return setLen16(b), nil
}

func formatClone(a []byte) (string, error) {
	if len(a) < 16 {
		return "", errors.New("bad clone length")
	}
	s, err := formatActionList(a[16:])
	if err != nil {
		return "", fmt.Errorf("clone: %w", err)
	}
	if s == "" {
		s = "drop"
	}
	return "clone(" + s + ")", nil
}

// Sample directions.
const (
	sampleDefault = 0
	sampleIngress = 1
	sampleEgress  = 2
)

// parseSample parses sample(...) into NXAST_SAMPLE, or SAMPLE2 with a
// sampling port, or SAMPLE3 with a direction, as OVS's encode_SAMPLE does.
func parseSample(p kv) ([]byte, error) {
	var prob uint64
	var ids [3]uint32
	port, dir := uint16(portNone), byte(sampleDefault)
	for q, err := range args(p.val, p.valOff) {
		if err != nil {
			return nil, err
		}
		switch q.key {
		case "probability":
			v, err := parseUint(q.val, 16)
			if err != nil || v == 0 {
				return nil, errAt(q.valOff, q.val, "invalid probability value (want 1 to 65535)")
			}
			prob = v
		case "collector_set_id", "obs_domain_id", "obs_point_id":
			v, err := parseUint(q.val, 32)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "bad %s (want a 32-bit number)", q.key)
			}
			ids[map[string]int{"collector_set_id": 0, "obs_domain_id": 1, "obs_point_id": 2}[q.key]] = uint32(v)
		case "sampling_port":
			if port, err = parsePort(q.val); err != nil {
				return nil, errAt(q.valOff, q.val, "%v", err)
			}
		case "ingress":
			dir = sampleIngress
		case "egress":
			dir = sampleEgress
		default:
			return nil, errAt(q.keyOff, q.key, "invalid key in sample argument")
		}
	}
	if prob == 0 {
		return nil, errAt(p.keyOff, p.text(), "non-zero \"probability\" must be specified on sample")
	}
	sub := uint16(nxastSample)
	switch {
	case dir != sampleDefault:
		sub = nxastSample3
	case port != portNone:
		sub = nxastSample2
	}
	b := nxHeader(sub)
	b = binary.BigEndian.AppendUint16(b, uint16(prob))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint32(b, id)
	}
	if sub != nxastSample {
		b = binary.BigEndian.AppendUint16(b, port)
		b = append(b, dir, 0, 0, 0, 0, 0)
	}
	return setLen16(b), nil
}

func formatSample(a []byte) (string, error) {
	sub := binary.BigEndian.Uint16(a[8:])
	if sub == nxastSample && len(a) != 24 || sub != nxastSample && len(a) != 32 {
		return "", errors.New("bad sample length")
	}
	s := fmt.Sprintf("sample(probability=%d,collector_set_id=%d,obs_domain_id=%d,obs_point_id=%d",
		binary.BigEndian.Uint16(a[10:]), binary.BigEndian.Uint32(a[12:]),
		binary.BigEndian.Uint32(a[16:]), binary.BigEndian.Uint32(a[20:]))
	if sub != nxastSample {
		if port := binary.BigEndian.Uint16(a[24:]); port != portNone {
			s += ",sampling_port=" + formatPort(port)
		}
		if sub == nxastSample3 {
			switch a[26] {
			case sampleIngress:
				s += ",ingress"
			case sampleEgress:
				s += ",egress"
			}
		}
	}
	return s + ")", nil
}

// parseCheckPktLarger parses check_pkt_larger(LEN)->DST, whose value the
// scanner hands over as "LEN)->DST".
func (cx *actx) parseCheckPktLarger(p kv) ([]byte, error) {
	ls, ds, ok := strings.Cut(p.val, ")->")
	if !ok {
		return nil, errAt(p.keyOff, p.text(), "check_pkt_larger needs (LEN)->DST[BIT]")
	}
	n, err := parseUint(ls, 16)
	if err != nil {
		return nil, errAt(p.valOff, ls, "bad packet length (want 0 to 65535)")
	}
	dOff := p.valOff + len(ls) + 3
	sf, err := parseSubfield(ds)
	if err != nil {
		return nil, errAt(dOff, ds, "%v", err)
	}
	if sf.bits != 1 {
		return nil, errAt(dOff, ds, "Only 1-bit destination field is allowed")
	}
	if !sf.f.writable {
		return nil, errAt(dOff, ds, "field %s is not writable", sf.f.name)
	}
	b := nxHeader(nxastCheckPktLarger)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	b = binary.BigEndian.AppendUint16(b, uint16(sf.ofs))
	b = binary.BigEndian.AppendUint32(b, cx.nxmHdrOf(sf.f))
	b = append(b, make([]byte, 6)...)
	return setLen16(b), nil
}

func formatCheckPktLarger(a []byte) (string, error) {
	if len(a) != 24 {
		return "", errors.New("bad check_pkt_larger length")
	}
	f, err := fieldFromNXMHeader(binary.BigEndian.Uint32(a[14:]))
	if err != nil {
		return "", fmt.Errorf("check_pkt_larger: %w", err)
	}
	ofs := int(binary.BigEndian.Uint16(a[12:]))
	if ofs >= f.bits {
		return "", errors.New("check_pkt_larger: bad bit offset")
	}
	return fmt.Sprintf("check_pkt_larger(%d)->%s", binary.BigEndian.Uint16(a[10:]), subfield{f, ofs, 1}), nil
}

// Hash field sets and algorithms of multipath (and bundle), by their
// NX_HASH_FIELDS_* and NX_MP_ALG_* numbers.
var (
	hashFieldNames = []string{"eth_src", "symmetric_l4", "symmetric_l3l4", "symmetric_l3l4+udp", "nw_src", "nw_dst", "symmetric_l3"}
	mpAlgNames     = []string{"modulo_n", "hash_threshold", "hrw", "iter_hash"}
)

// splitArgs splits the value of an action at commas and blanks, with where
// each argument starts in the line, for errors.
func splitArgs(p kv) (args []string, off []int) {
	args = strings.FieldsFunc(p.val, func(r rune) bool { return r == ',' || r == ' ' })
	off = make([]int, len(args))
	for i, at := 0, 0; i < len(args); i++ {
		at += strings.Index(p.val[at:], args[i])
		off[i] = p.valOff + at
		at += len(args[i])
	}
	return args, off
}

// parseHashArgs parses the hash fields and basis that multipath and bundle
// take first. OVS reads the basis with atoi; flowstate insists on a plain
// number.
func parseHashArgs(args []string, off []int) (fields int, basis uint64, err error) {
	fields = indexOf(hashFieldNames, strings.ToLower(args[0]))
	if fields < 0 {
		return 0, 0, errAt(off[0], args[0], "unknown fields")
	}
	basis, perr := parseUint(args[1], 16)
	if perr != nil {
		return 0, 0, errAt(off[1], args[1], "bad basis (want 0 to 65535)")
	}
	return fields, basis, nil
}

// parseMultipath parses multipath(FIELDS,BASIS,ALGORITHM,N_LINKS,ARG,DST).
func (cx *actx) parseMultipath(p kv) ([]byte, error) {
	args, off := splitArgs(p)
	if len(args) < 6 {
		return nil, errAt(p.keyOff, p.text(), "not enough arguments to multipath action")
	}
	fields, basis, err := parseHashArgs(args, off)
	if err != nil {
		return nil, err
	}
	alg := indexOf(mpAlgNames, strings.ToLower(args[2]))
	if alg < 0 {
		return nil, errAt(off[2], args[2], "unknown algorithm")
	}
	links, err := parseUint(args[3], 32)
	if err != nil || links < 1 || links > 65536 {
		return nil, errAt(off[3], args[3], "n_links is not in valid range 1 to 65536")
	}
	arg, err := parseUint(args[4], 32)
	if err != nil {
		return nil, errAt(off[4], args[4], "bad argument (want a 32-bit number)")
	}
	sf, err := parseSubfield(args[5])
	if err != nil {
		return nil, errAt(off[5], args[5], "%v", err)
	}
	if sf.bits < 16 && links > 1<<sf.bits {
		return nil, errAt(off[5], args[5], "%d-bit destination field has %d possible values, less than specified n_links %d", sf.bits, 1<<sf.bits, links)
	}
	if !sf.f.writable {
		return nil, errAt(off[5], args[5], "field %s is not writable", sf.f.name)
	}
	b := nxHeader(nxastMultipath)
	b = binary.BigEndian.AppendUint16(b, uint16(fields))
	b = binary.BigEndian.AppendUint16(b, uint16(basis))
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(alg))
	b = binary.BigEndian.AppendUint16(b, uint16(links-1))
	b = binary.BigEndian.AppendUint32(b, uint32(arg))
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, ofsNbits(sf.ofs, sf.bits))
	b = binary.BigEndian.AppendUint32(b, cx.nxmHdrOf(sf.f))
	return setLen16(b), nil
}

func formatMultipath(a []byte) (string, error) {
	if len(a) != 32 {
		return "", errors.New("bad multipath length")
	}
	fields, alg := int(binary.BigEndian.Uint16(a[10:])), int(binary.BigEndian.Uint16(a[16:]))
	if fields >= len(hashFieldNames) || alg >= len(mpAlgNames) {
		return "", errors.New("multipath: unknown fields or algorithm")
	}
	sf, err := nxmSubfield(binary.BigEndian.Uint32(a[28:]), binary.BigEndian.Uint16(a[26:]))
	if err != nil {
		return "", fmt.Errorf("multipath: %w", err)
	}
	return fmt.Sprintf("multipath(%s,%d,%s,%d,%d,%s)", hashFieldNames[fields], binary.BigEndian.Uint16(a[12:]),
		mpAlgNames[alg], int(binary.BigEndian.Uint16(a[18:]))+1, binary.BigEndian.Uint32(a[20:]), sf), nil
}
