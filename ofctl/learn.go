package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Flags of the learn action.
const (
	learnSendFlowRem   = 1
	learnDeleteLearned = 2
	learnWriteResult   = 4
)

// Bits of a learn flow_mod_spec header.
const (
	learnSrcImmediate = 1 << 13
	learnDstLoad      = 1 << 11
	learnDstOutput    = 2 << 11
	learnNBitsMask    = 0x7ff
)

// learnAction is OVS's struct ofpact_learn without the specs, which are
// kept encoded.
type learnAction struct {
	idle, hard, prio uint16
	cookie           uint64
	flags            uint16
	table            uint8
	finIdle, finHard uint16
	limit            uint32
	resultDst        *subfield
	specs            []byte
}

// parseLearn parses learn(...) into NXAST_LEARN, or NXAST_LEARN2 when limit
// or result_dst is used, checking prerequisites as OVS's learn_check does.
func (cx *actx) parseLearn(p kv) ([]byte, error) {
	l := learnAction{prio: defaultPriority, table: 1}
	learned := new(match) // the learned flow's match, for its prerequisites
	for q, err := range args(p.val, p.valOff) {
		if err != nil {
			return nil, err
		}
		num := func(bits int) (uint64, error) {
			v, err := parseUint(q.val, bits)
			if err != nil {
				return 0, errAt(q.valOff, q.val, "bad %s: %v", q.key, err)
			}
			return v, nil
		}
		var v uint64
		switch q.key {
		case "table":
			if v, err = num(8); err != nil {
				return nil, err
			}
			if v == 255 {
				return nil, errAt(q.valOff, q.val, "table id 255 not valid for `learn' action")
			}
			l.table = uint8(v)
		case "priority", "idle_timeout", "hard_timeout", "fin_idle_timeout", "fin_hard_timeout":
			if v, err = num(16); err != nil {
				return nil, err
			}
			switch q.key {
			case "priority":
				l.prio = uint16(v)
			case "idle_timeout":
				l.idle = uint16(v)
			case "hard_timeout":
				l.hard = uint16(v)
			case "fin_idle_timeout":
				l.finIdle = uint16(v)
			default:
				l.finHard = uint16(v)
			}
		case "cookie":
			if l.cookie, err = num(64); err != nil {
				return nil, err
			}
		case "limit":
			if v, err = num(32); err != nil {
				return nil, err
			}
			l.limit = uint32(v)
		case "result_dst":
			sf, err := parseSubfield(q.val)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "%v", err)
			}
			if sf.bits != 1 {
				return nil, errAt(q.valOff, q.val, "result_dst must be a single bit")
			}
			if err := cx.checkWritable(sf.f, q.valOff, q.val); err != nil {
				return nil, err
			}
			l.resultDst = &sf
			l.flags |= learnWriteResult
		case "send_flow_rem":
			l.flags |= learnSendFlowRem
		case "delete_learned":
			l.flags |= learnDeleteLearned
		default:
			b, err := cx.parseLearnSpec(q, learned)
			if err != nil {
				return nil, err
			}
			l.specs = append(l.specs, b...)
		}
	}
	return l.encode(cx), nil
}

// parseLearnSpec encodes one flow_mod_spec.
func (cx *actx) parseLearnSpec(q kv, learned *match) ([]byte, error) {
	var b []byte
	put := func(hdr uint16) { b = binary.BigEndian.AppendUint16(b, hdr) }
	putField := func(sf subfield) {
		b = binary.BigEndian.AppendUint32(b, cx.nxmHdrOf(sf.f))
		b = binary.BigEndian.AppendUint16(b, uint16(sf.ofs))
	}
	putImm := func(v []byte, bits int) {
		n := 2 * ((bits + 15) / 16)
		imm := make([]byte, n)
		if len(v) >= n {
			copy(imm, v[len(v)-n:])
		} else {
			copy(imm[n-len(v):], v)
		}
		b = append(b, imm...)
	}
	checkSrc := func(sf subfield, off int, tok string) error {
		if !cx.ok(sf.f.pre) {
			return errAt(off, tok, "learn source %s requires %s in the flow's match", sf.f.name, prereqText(sf.f.pre))
		}
		return nil
	}
	checkDst := func(sf subfield, off int, tok string) error {
		if !learned.prereqOK(sf.f.pre) {
			return errAt(off, tok, "learned field %s requires %s earlier in the learn specification", sf.f.name, prereqText(sf.f.pre))
		}
		return nil
	}
	nxmOnly := func(sf subfield, off int, tok string) error {
		if sf.f.nxmHdr == (oxmHdr{}) && sf.f.name != "in_port" || sf.f.nxmHdr.class == clsOXM && sf.f.hdr.class == clsPktRg {
			return errAt(off, tok, "field %s cannot be used in learn", sf.f.name)
		}
		return nil
	}

	switch {
	case fieldByName[q.key] != nil && q.key != "tp_src" && q.key != "tp_dst":
		f := fieldByName[q.key]
		if f.kind == kPacketType {
			return nil, errAt(q.keyOff, q.text(), "packet_type in learn is not supported: OVS prints it as packet_type=packet_type=(NS,TYPE), which does not read back")
		}
		sf := subfield{f: f, bits: f.bits}
		if err := nxmOnly(sf, q.keyOff, q.key); err != nil {
			return nil, err
		}
		v, m, err := parseFieldValue(f, q.val)
		if err != nil {
			// FIELD=SRC copies a field, as FIELD[]=SRC does.
			if _, serr := parseSubfield(q.val); serr == nil {
				q.key += "[]"
				return cx.parseLearnSpec(q, learned)
			}
			return nil, errAt(q.valOff, q.val, "%v", err)
		}
		if !isOnes(m) {
			return nil, errAt(q.valOff, q.val, "learn cannot match a masked value")
		}
		if err := checkDst(sf, q.keyOff, q.key); err != nil {
			return nil, err
		}
		put(learnSrcImmediate | uint16(f.bits))
		putImm(v, f.bits)
		putField(sf)
		// Later specs may rely on this one for their prerequisites.
		_ = learned.setField(f, v, m)
	case strings.Contains(q.key, "["):
		dst, err := parseSubfield(q.key)
		if err != nil {
			return nil, errAt(q.keyOff, q.key, "%v", err)
		}
		if err := nxmOnly(dst, q.keyOff, q.key); err != nil {
			return nil, err
		}
		src := dst
		if q.val != "" && q.val[0] >= '0' && q.val[0] <= '9' {
			// An immediate value for part of a field.
			v, err := parseUintBytes(q.val, 16, dst.bits)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "%v (destination is %d bits)", err, dst.bits)
			}
			if err := checkDst(dst, q.keyOff, q.key); err != nil {
				return nil, err
			}
			put(learnSrcImmediate | uint16(dst.bits))
			putImm(v, dst.bits)
			putField(dst)
			break
		}
		if q.val != "" {
			if src, err = parseSubfield(q.val); err != nil {
				return nil, errAt(q.valOff, q.val, "%v", err)
			}
			if src.bits != dst.bits {
				return nil, errAt(q.keyOff, q.text(), "bit widths of %s (%d) and %s (%d) differ", q.key, dst.bits, q.val, src.bits)
			}
		}
		if err := checkSrc(src, q.keyOff, q.text()); err != nil {
			return nil, err
		}
		if err := checkDst(dst, q.keyOff, q.key); err != nil {
			return nil, err
		}
		put(uint16(src.bits))
		putField(src)
		putField(dst)
	case q.key == "load":
		vs, ds, ok := strings.Cut(q.val, "->")
		if !ok {
			return nil, errAt(q.valOff, q.val, "missing `->' in learn load")
		}
		dst, err := parseSubfield(ds)
		if err != nil {
			return nil, errAt(q.valOff+len(vs)+2, ds, "%v", err)
		}
		if err := nxmOnly(dst, q.valOff, q.val); err != nil {
			return nil, err
		}
		if !dst.f.writable {
			return nil, errAt(q.valOff, q.val, "field %s is not writable", dst.f.name)
		}
		if err := checkDst(dst, q.valOff, q.val); err != nil {
			return nil, err
		}
		// An immediate when the source reads as a number (OVS's
		// parse_int_string), else a field: load:in_port->reg1[16..31].
		if vs != "" && vs[0] >= '0' && vs[0] <= '9' {
			v, err := parseUintBytes(vs, 16, dst.bits)
			if err != nil {
				return nil, errAt(q.valOff, vs, "%v (destination is %d bits)", err, dst.bits)
			}
			put(learnSrcImmediate | learnDstLoad | uint16(dst.bits))
			putImm(v, dst.bits)
			putField(dst)
			break
		}
		src, err := parseSubfield(vs)
		if err != nil {
			return nil, errAt(q.valOff, vs, "%v", err)
		}
		if err := nxmOnly(src, q.valOff, vs); err != nil {
			return nil, err
		}
		if src.bits != dst.bits {
			return nil, errAt(q.valOff, q.val, "source field is %d bits wide but destination is %d bits wide", src.bits, dst.bits)
		}
		if err := checkSrc(src, q.valOff, vs); err != nil {
			return nil, err
		}
		put(learnDstLoad | uint16(src.bits))
		putField(src)
		putField(dst)
	case q.key == "output":
		src, err := parseSubfield(q.val)
		if err != nil {
			return nil, errAt(q.valOff, q.val, "%v", err)
		}
		if err := nxmOnly(src, q.valOff, q.val); err != nil {
			return nil, err
		}
		if err := checkSrc(src, q.valOff, q.val); err != nil {
			return nil, err
		}
		put(learnDstOutput | uint16(src.bits))
		putField(src)
	default:
		return nil, errAt(q.keyOff, q.text(), "unknown keyword in learn")
	}
	return b, nil
}

func (l *learnAction) encode(cx *actx) []byte {
	sub := uint16(nxastLearn)
	if l.limit != 0 || l.flags&learnWriteResult != 0 {
		sub = nxastLearn2
	}
	b := nxHeader(sub)
	b = binary.BigEndian.AppendUint16(b, l.idle)
	b = binary.BigEndian.AppendUint16(b, l.hard)
	b = binary.BigEndian.AppendUint16(b, l.prio)
	b = binary.BigEndian.AppendUint64(b, l.cookie)
	b = binary.BigEndian.AppendUint16(b, l.flags)
	b = append(b, l.table, 0)
	b = binary.BigEndian.AppendUint16(b, l.finIdle)
	b = binary.BigEndian.AppendUint16(b, l.finHard)
	if sub == nxastLearn2 {
		b = binary.BigEndian.AppendUint32(b, l.limit)
		ofs := uint16(0)
		if l.resultDst != nil {
			ofs = uint16(l.resultDst.ofs)
		}
		b = binary.BigEndian.AppendUint16(b, ofs)
		b = append(b, 0, 0)
		if l.resultDst != nil {
			b = binary.BigEndian.AppendUint32(b, cx.nxmHdrOf(l.resultDst.f))
		}
	}
	b = append(b, l.specs...)
	return setLen16(pad8(b))
}

// formatLearn prints NXAST_LEARN and NXAST_LEARN2 as OVS's learn_format.
func formatLearn(a []byte) (string, error) {
	if len(a) < 32 {
		return "", errors.New("bad learn action length")
	}
	l := learnAction{
		idle: binary.BigEndian.Uint16(a[10:]), hard: binary.BigEndian.Uint16(a[12:]),
		prio: binary.BigEndian.Uint16(a[14:]), cookie: binary.BigEndian.Uint64(a[16:]),
		flags: binary.BigEndian.Uint16(a[24:]), table: a[26],
		finIdle: binary.BigEndian.Uint16(a[28:]), finHard: binary.BigEndian.Uint16(a[30:]),
	}
	specs := a[32:]
	if binary.BigEndian.Uint16(a[8:]) == nxastLearn2 {
		if len(a) < 40 {
			return "", errors.New("bad learn2 action length")
		}
		l.limit = binary.BigEndian.Uint32(a[32:])
		ofs := int(binary.BigEndian.Uint16(a[36:]))
		specs = a[40:]
		if l.flags&learnWriteResult != 0 {
			if len(specs) < 4 {
				return "", errors.New("truncated learn result_dst")
			}
			f, err := fieldFromNXMHeader(binary.BigEndian.Uint32(specs))
			if err != nil {
				return "", fmt.Errorf("learn result_dst: %w", err)
			}
			l.resultDst = &subfield{f, ofs, 1}
			specs = specs[4:]
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "learn(table=%d", l.table)
	if l.idle != 0 {
		fmt.Fprintf(&sb, ",idle_timeout=%d", l.idle)
	}
	if l.hard != 0 {
		fmt.Fprintf(&sb, ",hard_timeout=%d", l.hard)
	}
	if l.finIdle != 0 {
		fmt.Fprintf(&sb, ",fin_idle_timeout=%d", l.finIdle)
	}
	if l.finHard != 0 {
		fmt.Fprintf(&sb, ",fin_hard_timeout=%d", l.finHard)
	}
	if l.prio != defaultPriority {
		fmt.Fprintf(&sb, ",priority=%d", l.prio)
	}
	if l.flags&learnSendFlowRem != 0 {
		sb.WriteString(",send_flow_rem")
	}
	if l.flags&learnDeleteLearned != 0 {
		sb.WriteString(",delete_learned")
	}
	if l.cookie != 0 {
		fmt.Fprintf(&sb, ",cookie=%#x", l.cookie)
	}
	if l.limit != 0 {
		fmt.Fprintf(&sb, ",limit=%d", l.limit)
	}
	if l.resultDst != nil {
		sb.WriteString(",result_dst=" + l.resultDst.String())
	}
	for len(specs) >= 2 {
		hdr := binary.BigEndian.Uint16(specs)
		if hdr == 0 {
			if !isZero(specs) {
				return "", errors.New("learn: garbage after specs")
			}
			break
		}
		specs = specs[2:]
		bits := int(hdr & learnNBitsMask)
		var imm []byte
		var src subfield
		var err error
		take := func(n int) ([]byte, error) {
			if len(specs) < n {
				return nil, errors.New("learn: truncated spec")
			}
			v := specs[:n]
			specs = specs[n:]
			return v, nil
		}
		field := func() (subfield, error) {
			h, err := take(6)
			if err != nil {
				return subfield{}, err
			}
			f, err := fieldFromNXMHeader(binary.BigEndian.Uint32(h))
			if err != nil {
				return subfield{}, fmt.Errorf("learn: %w", err)
			}
			ofs := int(binary.BigEndian.Uint16(h[4:]))
			if bits == 0 || ofs+bits > f.bits {
				return subfield{}, errors.New("learn: bad bit range")
			}
			return subfield{f, ofs, bits}, nil
		}
		if hdr&learnSrcImmediate != 0 {
			if imm, err = take(2 * ((bits + 15) / 16)); err != nil {
				return "", err
			}
		} else if src, err = field(); err != nil {
			return "", err
		}
		sb.WriteByte(',')
		switch hdr & (3 << 11) {
		case 0: // match
			dst, err := field()
			if err != nil {
				return "", err
			}
			if imm != nil {
				if dst.ofs == 0 && dst.bits == dst.f.bits {
					v := make([]byte, dst.f.bytes)
					tail := imm
					if len(tail) > len(v) {
						tail = tail[len(tail)-len(v):]
					}
					copy(v[len(v)-len(tail):], tail)
					sb.WriteString(dst.f.name + "=" + formatValue(dst.f, v, nil))
				} else {
					sb.WriteString(dst.String() + "=" + formatHex(imm))
				}
			} else {
				sb.WriteString(dst.String())
				if src.f != dst.f || src.ofs != dst.ofs {
					sb.WriteString("=" + src.String())
				}
			}
		case learnDstLoad:
			dst, err := field()
			if err != nil {
				return "", err
			}
			if imm != nil {
				sb.WriteString("load:" + formatHex(imm) + "->" + dst.String())
			} else {
				sb.WriteString("load:" + src.String() + "->" + dst.String())
			}
		case learnDstOutput:
			if imm != nil {
				return "", errors.New("learn: output from an immediate value")
			}
			sb.WriteString("output:" + src.String())
		default:
			return "", errors.New("learn: bad spec type")
		}
	}
	sb.WriteByte(')')
	return sb.String(), nil
}
