package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Flags of the ct action.
const (
	ctCommit = 1
	ctForce  = 2
)

// Connection-tracking helpers known by name.
const (
	algFTP  = 21
	algTFTP = 69
)

// parseCT parses ct(...) into NXAST_CT with its nested actions.
func (cx *actx) parseCT(p kv) ([]byte, error) {
	if cx.outer != "" && cx.outer != "clone" && cx.outer != "write_actions" {
		return nil, errAt(p.keyOff, p.text(), "ct is not allowed inside %s", cx.outer)
	}
	var (
		flags   uint16
		zoneSrc uint32
		zoneVal uint16
		table   = byte(0xff)
		alg     uint16
		nested  []byte
		natOnly = true // nested actions are only nat without arguments
	)
	for q, err := range args(p.val, p.valOff) {
		if err != nil {
			return nil, err
		}
		switch q.key {
		case "commit":
			flags |= ctCommit
		case "force":
			flags |= ctForce
		case "table":
			t, err := parseUint(q.val, 8)
			if err != nil || t == 255 {
				return nil, errAt(q.valOff, q.val, "bad table id (want 0 to 254)")
			}
			table = byte(t)
		case "zone":
			if z, err := parseUint(q.val, 16); err == nil {
				zoneSrc, zoneVal = 0, uint16(z)
				break
			}
			sf, err := parseSubfield(q.val)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "zone must be a number (0 to 65535) or a 16-bit field: %v", err)
			}
			if sf.bits != 16 {
				return nil, errAt(q.valOff, q.val, "zone field must be 16 bits wide, not %d", sf.bits)
			}
			if !cx.ok(sf.f.pre) {
				return nil, errAt(q.valOff, q.val, "%s requires %s in the match", sf.f.name, prereqText(sf.f.pre))
			}
			zoneSrc, zoneVal = cx.nxmHdrOf(sf.f), ofsNbits(sf.ofs, sf.bits)
		case "alg":
			switch q.val {
			case "ftp":
				alg = algFTP
			case "tftp":
				alg = algTFTP
			default:
				v, err := parseUint(q.val, 16)
				if err != nil {
					return nil, errAt(q.valOff, q.val, "unknown connection helper (want ftp, tftp or a port number)")
				}
				alg = uint16(v)
			}
		case "nat":
			b, hasArgs, err := cx.parseNAT(q)
			if err != nil {
				return nil, err
			}
			if hasArgs {
				natOnly = false
			}
			nested = append(nested, b...)
		case "exec":
			inner := cx.nested("ct")
			sub, err := inner.parseCTExec(q)
			if err != nil {
				return nil, err
			}
			for _, a := range sub {
				if !isNX(a, nxastNAT) || natHasArgs(a) {
					natOnly = false
				}
				nested = append(nested, a...)
			}
		default:
			return nil, errAt(q.keyOff, q.text(), "invalid argument to \"ct\" action")
		}
	}
	if flags&ctForce != 0 && flags&ctCommit == 0 {
		return nil, errAt(p.keyOff, p.text(), "\"force\" flag requires \"commit\" flag")
	}
	if !natOnly && flags&ctCommit == 0 {
		return nil, errAt(p.keyOff, p.text(), "ct requires \"commit\" when it has exec actions or nat with arguments")
	}
	if !cx.ok(preIPAny) {
		return nil, errAt(p.keyOff, p.text(), "ct requires ip or ipv6 in the match")
	}
	if flags&ctCommit != 0 && cx.mt.u(sCtState)&csInv != 0 {
		return nil, errAt(p.keyOff, p.text(), "ct(commit) cannot be used on a flow that matches ct_state=+inv")
	}
	if alg == algFTP && !cx.ok(preTCP) {
		return nil, errAt(p.keyOff, p.text(), "alg=ftp requires tcp in the match")
	}
	if alg == algTFTP && !cx.ok(preUDP) {
		return nil, errAt(p.keyOff, p.text(), "alg=tftp requires udp in the match")
	}
	b := nxHeader(nxastCT)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint32(b, zoneSrc)
	b = binary.BigEndian.AppendUint16(b, zoneVal)
	b = append(b, table, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, alg)
	b = append(b, nested...)
	return setLen16(b), nil
}

// parseCTExec parses the actions of ct(exec(...)).
func (cx *actx) parseCTExec(q kv) ([][]byte, error) {
	if cx.depth >= MaxActionDepth {
		return nil, errLimit(q.keyOff, q.text(), tooDeep())
	}
	return parseEach(q.val, q.valOff, func(p kv, key string) ([][]byte, error) {
		if key == "nat" {
			b, _, err := cx.parseNAT(p)
			return [][]byte{b}, err
		}
		return cx.parseAction(p, key)
	})
}

// parseEach parses a list of actions with one, which gets each pair and its
// lower-case key, and returns the encoded actions in order.
func parseEach(s string, base int, one func(p kv, key string) ([][]byte, error)) ([][]byte, error) {
	var out [][]byte
	sc := newScanner(s, base)
	for {
		p, ok, err := sc.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		acts, err := one(p, strings.ToLower(p.key))
		if err != nil {
			return nil, err
		}
		out = append(out, acts...)
	}
}

func formatCT(a []byte) (string, error) {
	if len(a) < 24 {
		return "", errors.New("bad ct length")
	}
	flags := binary.BigEndian.Uint16(a[10:])
	zoneSrc := binary.BigEndian.Uint32(a[12:])
	zone := binary.BigEndian.Uint16(a[16:])
	table := a[18]
	alg := binary.BigEndian.Uint16(a[22:])
	var sb strings.Builder
	sb.WriteString("ct(")
	if flags&ctCommit != 0 {
		sb.WriteString("commit,")
	}
	if flags&ctForce != 0 {
		sb.WriteString("force,")
	}
	if table != 0xff {
		fmt.Fprintf(&sb, "table=%d,", table)
	}
	if zoneSrc != 0 {
		sf, err := nxmSubfield(zoneSrc, zone)
		if err != nil {
			return "", fmt.Errorf("ct zone: %w", err)
		}
		sb.WriteString("zone=" + sf.String() + ",")
	} else if zone != 0 {
		fmt.Fprintf(&sb, "zone=%d,", zone)
	}
	nested, err := splitActions(a[24:])
	if err != nil {
		return "", fmt.Errorf("ct: %w", err)
	}
	if len(nested) > 0 && isNX(nested[0], nxastNAT) {
		s, err := formatNAT(nested[0])
		if err != nil {
			return "", err
		}
		sb.WriteString(s + ",")
		nested = nested[1:]
	}
	if len(nested) > 0 {
		var parts []string
		for _, n := range nested {
			s, err := formatAction(n)
			if err != nil {
				return "", fmt.Errorf("ct exec: %w", err)
			}
			parts = append(parts, s)
		}
		sb.WriteString("exec(" + strings.Join(parts, ",") + "),")
	}
	switch alg {
	case 0:
	case algFTP:
		sb.WriteString("alg=ftp,")
	case algTFTP:
		sb.WriteString("alg=tftp,")
	default:
		fmt.Fprintf(&sb, "alg=%d,", alg)
	}
	return strings.TrimSuffix(sb.String(), ",") + ")", nil
}
