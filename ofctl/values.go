package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// parseUintBytes parses decimal or 0x-prefixed hexadecimal text into an
// nbytes-wide big-endian value that must fit in bits.
func parseUintBytes(s string, nbytes, bits int) ([]byte, error) {
	if s == "" {
		return nil, errors.New("missing value")
	}
	// Fast path: most values fit in 64 bits.
	if v, ok := parseUint64(s); ok {
		if bits < 64 && v>>uint(bits) != 0 {
			return nil, fmt.Errorf("value %s out of range (field is %d bits wide)", s, bits)
		}
		if nbytes >= 8 {
			out := make([]byte, nbytes)
			binary.BigEndian.PutUint64(out[nbytes-8:], v)
			return out, nil
		}
		if v>>(8*uint(nbytes)) != 0 {
			return nil, fmt.Errorf("value %s out of range (field is %d bits wide)", s, bits)
		}
		return putBE(v, nbytes), nil
	}
	n := new(big.Int)
	var ok bool
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		if len(s) == 2 {
			return nil, fmt.Errorf("bad value %q", s)
		}
		_, ok = n.SetString(s[2:], 16)
	} else {
		_, ok = n.SetString(s, 10)
	}
	if !ok || n.Sign() < 0 {
		return nil, fmt.Errorf("bad value %q", s)
	}
	if n.BitLen() > bits {
		return nil, fmt.Errorf("value %s out of range (field is %d bits wide)", s, bits)
	}
	out := make([]byte, nbytes)
	n.FillBytes(out)
	return out, nil
}

// parseUint64 parses decimal or 0x-prefixed hexadecimal text that fits in
// 64 bits; false sends the caller to parseUintBytes's slower path, which
// reports what is wrong.
func parseUint64(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 0, 64)
	return v, err == nil && !strings.HasPrefix(s, "0o") && !strings.HasPrefix(s, "0b") &&
		!strings.HasPrefix(s, "0O") && !strings.HasPrefix(s, "0B") && !strings.Contains(s, "_") && (s == "0" || s[0] != '0' || len(s) > 1 && (s[1] == 'x' || s[1] == 'X'))
}

// parseUint parses a number of at most bits bits.
func parseUint(s string, bits int) (uint64, error) {
	// parseUintBytes's fast path, without its 8-byte result.
	if v, ok := parseUint64(s); ok {
		if bits < 64 && v>>uint(bits) != 0 {
			return 0, fmt.Errorf("value %s out of range (field is %d bits wide)", s, bits)
		}
		return v, nil
	}
	b, err := parseUintBytes(s, 8, bits)
	if err != nil {
		return 0, err
	}
	return beUint(b), nil
}

func beUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

func putBE(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}

func ones(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xff
	}
	return b
}

// bitMask returns an nbytes-wide value with the low bits bits set.
func bitMask(nbytes, bits int) []byte {
	b := make([]byte, nbytes)
	for i := 0; i < bits; i++ {
		b[nbytes-1-i/8] |= 1 << (i % 8)
	}
	return b
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func isOnes(b []byte) bool {
	for _, c := range b {
		if c != 0xff {
			return false
		}
	}
	return true
}

func andBytes(v, m []byte) []byte {
	out := make([]byte, len(v))
	for i := range v {
		out[i] = v[i] & m[i]
	}
	return out
}

func parseEth(s string) ([]byte, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return nil, fmt.Errorf("bad Ethernet address %q", s)
	}
	return []byte(hw), nil
}

func parseIPv4(s string) ([]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("bad IPv4 address %q", s)
	}
	b := a.As4()
	return b[:], nil
}

func parseIPv6(s string) ([]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return nil, fmt.Errorf("bad IPv6 address %q", s)
	}
	b := a.As16()
	return b[:], nil
}

// parseAddrMask parses ADDR[/PREFIX|/MASK] for IPv4 or IPv6 addresses.
func parseAddrMask(s string, v6 bool) (v, m []byte, err error) {
	parse := parseIPv4
	width := 4
	if v6 {
		parse, width = parseIPv6, 16
	}
	addr, mask, hasMask := strings.Cut(s, "/")
	if v, err = parse(addr); err != nil {
		return nil, nil, err
	}
	if !hasMask {
		return v, ones(width), nil
	}
	if n, perr := strconv.Atoi(mask); perr == nil {
		if n < 0 || n > width*8 {
			return nil, nil, fmt.Errorf("bad prefix length %q", mask)
		}
		return v, prefixMask(width, n), nil
	}
	if m, err = parse(mask); err != nil {
		return nil, nil, fmt.Errorf("bad mask %q", mask)
	}
	return v, m, nil
}

func prefixMask(width, n int) []byte {
	m := make([]byte, width)
	for i := 0; i < n; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// prefixLen returns the prefix length of a CIDR mask, or -1.
func prefixLen(m []byte) int {
	n := 0
	for n < len(m)*8 && m[n/8]&(0x80>>(n%8)) != 0 {
		n++
	}
	for i := n; i < len(m)*8; i++ {
		if m[i/8]&(0x80>>(i%8)) != 0 {
			return -1
		}
	}
	return n
}

// Reserved OpenFlow 1.0 port numbers and their names, as OVS prints them.
const (
	portMax        = 0xff00
	portUnset      = 0xfff7
	portInPort     = 0xfff8
	portTable      = 0xfff9
	portNormal     = 0xfffa
	portFlood      = 0xfffb
	portAll        = 0xfffc
	portController = 0xfffd
	portLocal      = 0xfffe
	portNone       = 0xffff
)

var portNames = map[uint16]string{
	portUnset: "UNSET", portInPort: "IN_PORT", portTable: "TABLE", portNormal: "NORMAL", portFlood: "FLOOD",
	portAll: "ALL", portController: "CONTROLLER", portLocal: "LOCAL", portNone: "ANY",
}

// parsePort parses a port number or reserved port name into a 16-bit
// OpenFlow 1.0 port number.
func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, errors.New("missing port")
	}
	if s[0] >= '0' && s[0] <= '9' {
		n, err := parseUint(s, 32)
		if err != nil || n >= portMax {
			return 0, fmt.Errorf("invalid or unknown port %q", s)
		}
		return uint16(n), nil
	}
	up := strings.ToUpper(s)
	if up == "NONE" {
		return portNone, nil
	}
	for p, n := range portNames {
		if n == up {
			return p, nil
		}
	}
	return 0, fmt.Errorf("invalid or unknown port %q", s)
}

// port11 converts an OpenFlow 1.0 port number to OpenFlow 1.1+.
func port11(p uint16) uint32 {
	if p >= portMax {
		return uint32(p) + 0xffff0000
	}
	return uint32(p)
}

// port10 converts an OpenFlow 1.1+ port number to OpenFlow 1.0.
func port10(p uint32) (uint16, bool) {
	switch {
	case p < portMax:
		return uint16(p), true
	case p >= 0xffffff00:
		return uint16(p - 0xffff0000), true
	}
	return 0, false
}

func formatPort(p uint16) string {
	if n, ok := portNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

// Flag names of the flag-valued fields, indexed by bit.
var (
	ctStateFlags  = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}
	tcpFlagNames  = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns"}
	tunFlagNames  = []string{"oam"}
	fragNames     = map[string][2]byte{"no": {0, 3}, "yes": {1, 1}, "first": {1, 3}, "later": {3, 3}, "not_later": {0, 2}}
	errNotFlagSet = errors.New("not flags")
)

// parseFlags parses "+a-b" (value and mask) or "a|b" (all flags specified)
// against names; allMask is the mask of a fully specified value.
func parseFlags(s string, names []string, allMask uint64) (v, m uint64, err error) {
	if s == "" {
		return 0, 0, errNotFlagSet
	}
	bitOf := func(name string) (uint64, error) {
		for i, n := range names {
			if n == name {
				return 1 << i, nil
			}
		}
		return 0, fmt.Errorf("unknown flag %q", name)
	}
	if s[0] == '+' || s[0] == '-' {
		for len(s) > 0 {
			sign := s[0]
			if sign != '+' && sign != '-' {
				return 0, 0, fmt.Errorf("flag %q must be preceded by '+' or '-'", s)
			}
			end := 1
			for end < len(s) && s[end] != '+' && s[end] != '-' {
				end++
			}
			bit, err := bitOf(s[1:end])
			if err != nil {
				return 0, 0, err
			}
			if m&bit != 0 {
				return 0, 0, fmt.Errorf("flag %q specified more than once", s[1:end])
			}
			m |= bit
			if sign == '+' {
				v |= bit
			}
			s = s[end:]
		}
		return v, m, nil
	}
	if s[0] >= '0' && s[0] <= '9' {
		return 0, 0, errNotFlagSet
	}
	for _, name := range strings.Split(s, "|") {
		bit, err := bitOf(name)
		if err != nil {
			return 0, 0, err
		}
		v |= bit
	}
	return v, allMask, nil
}

// splitMask splits "value/mask".
func splitMask(s string) (val, mask string, hasMask bool) {
	return strings.Cut(s, "/")
}

// parseFieldValue parses the text of a value (and optional mask) of f as it
// appears in a match or in set_field. The mask is all ones when absent.
func parseFieldValue(f *field, s string) (v, m []byte, err error) {
	return parseFieldValueMask(f, s, f.maskable)
}

// flagBits is the set of known flags of each flag-valued kind.
var flagBits = map[valKind]uint64{kCtState: 0xff, kTCPFlags: 0xfff, kTunFlags: 0x1}

// parseFieldValueMask is parseFieldValue, with masks allowed or not (OVS
// accepts masked set_field on fields that cannot be matched with a mask).
func parseFieldValueMask(f *field, s string, maskable bool) (v, m []byte, err error) {
	switch f.kind {
	case kEth:
		vs, ms, hasMask := splitMask(s)
		if v, err = parseEth(vs); err != nil {
			return nil, nil, err
		}
		m = ones(6)
		if hasMask {
			if m, err = parseEth(ms); err != nil {
				return nil, nil, fmt.Errorf("bad mask %q", ms)
			}
		}
	case kIPv4, kIPv6:
		if v, m, err = parseAddrMask(s, f.kind == kIPv6); err != nil {
			return nil, nil, err
		}
	case kPort:
		p, err := parsePort(s)
		if err != nil {
			return nil, nil, err
		}
		if f.bytes == 4 {
			return putBE(uint64(port11(p)), 4), ones(4), nil
		}
		return putBE(uint64(p), 2), ones(2), nil
	case kPacketType:
		pt, err := parsePacketType(s)
		if err != nil {
			return nil, nil, err
		}
		return pt, ones(4), nil
	case kFrag:
		fm, ok := fragNames[s]
		if !ok {
			return nil, nil, fmt.Errorf("bad fragment type %q (want no, yes, first, later or not_later)", s)
		}
		return []byte{fm[0]}, []byte{fm[1]}, nil
	case kCtState, kTCPFlags, kTunFlags:
		names := ctStateFlags // a switch, not a map built per call
		switch f.kind {
		case kTCPFlags:
			names = tcpFlagNames
		case kTunFlags:
			names = tunFlagNames
		}
		// Flags without +/- give a fully specified value, as in OVS.
		fv, fm, ferr := parseFlags(s, names, beUint(ones(f.bytes)))
		if ferr == nil {
			return putBE(fv, f.bytes), putBE(fm, f.bytes), nil
		}
		if !errors.Is(ferr, errNotFlagSet) {
			return nil, nil, ferr
		}
		if v, m, err = parseIntMask(f, s); err != nil {
			return nil, nil, err
		}
		known := flagBits[f.kind]
		if beUint(v)&^known != 0 || !isOnes(m) && beUint(m)&^known != 0 {
			return nil, nil, fmt.Errorf("unknown %s flag(s) in %q", f.name, s)
		}
	default:
		if v, m, err = parseIntMask(f, s); err != nil {
			return nil, nil, err
		}
	}
	if !isOnes(m) && !maskable {
		return nil, nil, fmt.Errorf("field %s does not support masking", f.name)
	}
	// Every branch above parsed v into a fresh slice: mask it in place.
	for i := range v {
		v[i] &= m[i]
	}
	return v, m, nil
}

func parseIntMask(f *field, s string) (v, m []byte, err error) {
	vs, ms, hasMask := splitMask(s)
	limit := f.bits
	if f.name == "vlan_vid" {
		// The value includes the VLAN-present bit (0x1000).
		limit = 13
	}
	if v, err = parseUintBytes(vs, f.bytes, limit); err != nil {
		return nil, nil, err
	}
	if !hasMask {
		return v, ones(f.bytes), nil
	}
	if m, err = parseUintBytes(ms, f.bytes, f.bytes*8); err != nil {
		return nil, nil, fmt.Errorf("bad mask: %w", err)
	}
	return v, m, nil
}
