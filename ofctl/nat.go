// The nat action inside ct(...): its flags and address and port ranges,
// parsed and printed.

package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Flags and range bits of the nat action.
const (
	natSrc        = 0x01
	natDst        = 0x02
	natPersistent = 0x04
	natHash       = 0x08
	natRandom     = 0x10

	natIPv4Min  = 0x01
	natIPv4Max  = 0x02
	natIPv6Min  = 0x04
	natIPv6Max  = 0x08
	natProtoMin = 0x10
	natProtoMax = 0x20
)

func natHasArgs(a []byte) bool {
	return len(a) >= 16 && (binary.BigEndian.Uint16(a[12:]) != 0 || binary.BigEndian.Uint16(a[14:]) != 0)
}

// parseNAT parses nat or nat(...) into NXAST_NAT.
func (cx *actx) parseNAT(q kv) (b []byte, hasArgs bool, err error) {
	var flags uint16
	var v4 bool
	var minA, maxA []byte
	var pmin, pmax uint16
	hasRange := false
	sc := newScanner(q.val, q.valOff)
	for {
		r, ok, err := sc.next()
		if err != nil {
			return nil, false, err
		}
		if !ok {
			break
		}
		switch r.key {
		case "src", "dst":
			if r.key == "src" {
				flags |= natSrc
			} else {
				flags |= natDst
			}
			if r.delim == 0 {
				break
			}
			if v4, minA, maxA, pmin, pmax, err = parseNATRange(r.val); err != nil {
				return nil, false, errAt(r.valOff, r.val, "%v", err)
			}
			hasRange = true
		case "persistent":
			flags |= natPersistent
		case "hash":
			flags |= natHash
		case "random":
			flags |= natRandom
		default:
			return nil, false, errAt(r.keyOff, r.text(), "invalid key in \"nat\" argument")
		}
	}
	switch {
	case flags&natSrc != 0 && flags&natDst != 0:
		return nil, false, errAt(q.keyOff, q.text(), "may only specify one of \"src\" or \"dst\"")
	case flags&(natSrc|natDst) == 0 && flags != 0:
		return nil, false, errAt(q.keyOff, q.text(), "flags allowed only with \"src\" or \"dst\"")
	case flags&natHash != 0 && flags&natRandom != 0:
		return nil, false, errAt(q.keyOff, q.text(), "both \"hash\" and \"random\" are not allowed")
	}
	if hasRange && !cx.anyMatch && v4 != cx.mt.isIPv4() {
		want := "ip"
		if !v4 {
			want = "ipv6"
		}
		return nil, false, errAt(q.keyOff, q.text(), "nat with this address requires %s in the match", want)
	}
	// A range of one address or port is written without its maximum, the
	// way OVS prints it, so that printing and parsing again is stable.
	if maxA != nil && string(maxA) == string(minA) {
		maxA = nil
	}
	if pmax == pmin {
		pmax = 0
	}
	if pmin == 0 && pmax != 0 {
		// OVS prints no ports when the minimum is 0.
		return nil, false, errAt(q.keyOff, q.text(), "nat port range must start above 0")
	}
	var present uint16
	body := []byte{}
	if hasRange {
		minBit, maxBit := uint16(natIPv4Min), uint16(natIPv4Max)
		if !v4 {
			minBit, maxBit = natIPv6Min, natIPv6Max
		}
		if !isZero(minA) {
			body = append(body, minA...)
			present |= minBit
		}
		if maxA != nil && !isZero(maxA) {
			body = append(body, maxA...)
			present |= maxBit
		}
		if pmin != 0 {
			body = binary.BigEndian.AppendUint16(body, pmin)
			present |= natProtoMin
		}
		if pmax != 0 {
			body = binary.BigEndian.AppendUint16(body, pmax)
			present |= natProtoMax
		}
	}
	// OVS prints ports and the persistent, hash and random flags only with
	// a (nonzero) address, so without one they would be lost in the
	// printed flow.
	if present&(natIPv4Min|natIPv4Max|natIPv6Min|natIPv6Max) == 0 {
		if present != 0 {
			return nil, false, errAt(q.keyOff, q.text(), "nat ports need a nonzero address")
		}
		if flags&(natPersistent|natHash|natRandom) != 0 {
			return nil, false, errAt(q.keyOff, q.text(), "persistent, hash and random need an address range (src=ADDR or dst=ADDR)")
		}
	}
	b = nxHeader(nxastNAT)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, present)
	b = append(b, body...)
	return setLen16(pad8(b)), flags != 0 || hasRange, nil
}

// parseNATRange parses ADDR[-ADDR][:PORT[-PORT]], with IPv6 addresses
// optionally in brackets.
func parseNATRange(s string) (v4 bool, minA, maxA []byte, pmin, pmax uint16, err error) {
	bad := func() (bool, []byte, []byte, uint16, uint16, error) {
		return false, nil, nil, 0, 0, fmt.Errorf("invalid nat range %q", s)
	}
	addrs, ports := s, ""
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") <= 1 {
		// IPv4, or bracketed IPv6: a ':' outside brackets starts the ports.
		depth := 0
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '[':
				depth++
			case ']':
				depth--
			case ':':
				if depth == 0 {
					addrs, ports = s[:i], s[i+1:]
					i = len(s)
				}
			}
		}
	}
	lo, hi, isRange := cutAddrRange(addrs)
	parse := func(a string) ([]byte, bool, error) {
		a = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
		if b, err := parseIPv4(a); err == nil {
			return b, true, nil
		}
		b, err := parseIPv6(a)
		return b, false, err
	}
	minA, v4, err = parse(lo)
	if err != nil {
		return bad()
	}
	if isRange {
		var v4b bool
		if maxA, v4b, err = parse(hi); err != nil || v4b != v4 || string(maxA) < string(minA) {
			return bad()
		}
	}
	if ports != "" {
		plo, phi, pr := strings.Cut(ports, "-")
		a, err := strconv.ParseUint(plo, 10, 16)
		if err != nil {
			return bad()
		}
		pmin = uint16(a)
		if pr {
			b, err := strconv.ParseUint(phi, 10, 16)
			if err != nil || b < a {
				return bad()
			}
			pmax = uint16(b)
		}
	}
	return v4, minA, maxA, pmin, pmax, nil
}

// cutAddrRange splits "A-B" where A and B may be bracketed IPv6 addresses.
func cutAddrRange(s string) (lo, hi string, ok bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case '-':
			if depth == 0 {
				return s[:i], s[i+1:], true
			}
		}
	}
	return s, "", false
}

func formatNAT(a []byte) (string, error) {
	if len(a) < 16 {
		return "", errors.New("bad nat length")
	}
	flags := binary.BigEndian.Uint16(a[12:])
	present := binary.BigEndian.Uint16(a[14:])
	body := a[16:]
	take := func(n int) ([]byte, error) {
		if len(body) < n {
			return nil, errors.New("truncated nat action")
		}
		v := body[:n]
		body = body[n:]
		return v, nil
	}
	var minA, maxA []byte
	var pmin, pmax uint16
	v6 := false
	var err error
	if present&(natIPv4Min|natIPv4Max) != 0 && present&(natIPv6Min|natIPv6Max) != 0 {
		return "", errors.New("nat with both IPv4 and IPv6 ranges")
	}
	if present&natIPv4Min != 0 {
		if minA, err = take(4); err != nil {
			return "", err
		}
	}
	if present&natIPv4Max != 0 {
		if maxA, err = take(4); err != nil {
			return "", err
		}
	}
	if present&natIPv6Min != 0 {
		v6 = true
		if minA, err = take(16); err != nil {
			return "", err
		}
	}
	if present&natIPv6Max != 0 {
		v6 = true
		if maxA, err = take(16); err != nil {
			return "", err
		}
	}
	if present&natProtoMin != 0 {
		p, err := take(2)
		if err != nil {
			return "", err
		}
		pmin = binary.BigEndian.Uint16(p)
	}
	if present&natProtoMax != 0 {
		p, err := take(2)
		if err != nil {
			return "", err
		}
		pmax = binary.BigEndian.Uint16(p)
	}
	s := "nat"
	if flags&(natSrc|natDst) == 0 {
		return s, nil
	}
	s += "("
	if flags&natSrc != 0 {
		s += "src"
	} else {
		s += "dst"
	}
	if present&(natIPv4Min|natIPv4Max|natIPv6Min|natIPv6Max) != 0 {
		width := 4
		if v6 {
			width = 16
		}
		if minA == nil {
			minA = make([]byte, width)
		}
		addr := func(b []byte) string {
			if !v6 {
				return formatIPv4(b)
			}
			if pmin != 0 {
				return "[" + formatIPv6(b) + "]"
			}
			return formatIPv6(b)
		}
		s += "=" + addr(minA)
		if maxA != nil && !isZero(maxA) && string(maxA) != string(minA) {
			s += "-" + addr(maxA)
		}
		if pmin != 0 {
			s += ":" + strconv.Itoa(int(pmin))
			if pmax != 0 && pmax != pmin {
				s += "-" + strconv.Itoa(int(pmax))
			}
		}
		s += ","
		if flags&natPersistent != 0 {
			s += "persistent,"
		}
		if flags&natHash != 0 {
			s += "hash,"
		}
		if flags&natRandom != 0 {
			s += "random,"
		}
	}
	return strings.TrimSuffix(s, ",") + ")", nil
}
