package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// Meter flags in the order ovs-ofctl prints them.
var meterFlags = []struct {
	name string
	bit  uint16
}{
	{"kbps", openflow15.MF_KBPS}, {"pktps", openflow15.MF_PKTPS},
	{"burst", openflow15.MF_BURST}, {"stats", openflow15.MF_STATS},
}

// Reserved meter ids.
var meterNames = map[string]uint32{"controller": openflow15.M_CONTROLLER, "slowpath": openflow15.M_SLOWPATH}

// token is a word of meter syntax, which ovs-ofctl splits at "=, \t\r\n".
type token struct {
	s   string
	off int
}

func meterTokens(s string, base int) []token {
	var out []token
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || strings.IndexByte("=, \t\r\n", s[i]) >= 0 {
			if start >= 0 {
				out = append(out, token{s[start:i], base + start})
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return out
}

// ParseMeter parses one meter in `ovs-ofctl -O OpenFlow15 add-meter` syntax,
// e.g. "meter=256,pktps,band=type=drop,rate=100", into an ADD MeterMod
// encoded as ovs-ofctl encodes it. The header's xid is 0. Errors are
// *SyntaxError.
func ParseMeter(s string) (*openflow15.MeterMod, error) {
	mm := openflow15.NewMeterMod()
	mm.Header.Xid = 0
	mm.Command = openflow15.MC_ADD
	i := strings.Index(s, "band")
	if i < 0 {
		return nil, errAt(len(s), "", "must specify bands")
	}
	j := strings.IndexByte(s[i:], '=')
	if j < 0 {
		return nil, errAt(i, s[i:], "must specify bands")
	}
	head, bands, bandsOff := s[:i], s[i+j+1:], i+j+1
	toks := meterTokens(head, 0)
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if bit := meterFlag(t.s); bit != 0 {
			mm.Flags |= bit
			continue
		}
		if t.s != "meter" {
			return nil, errAt(t.off, t.s, "unknown keyword")
		}
		if i+1 >= len(toks) {
			return nil, errAt(t.off, t.s, "field meter missing value")
		}
		i++
		v := toks[i]
		if id, ok := meterNames[v.s]; ok {
			mm.MeterId = id
			continue
		}
		id, err := parseUint(v.s, 32)
		if err != nil || id == 0 || id > openflow15.M_MAX {
			return nil, errAt(v.off, v.s, "invalid meter id (want 1 to %d)", uint32(openflow15.M_MAX))
		}
		mm.MeterId = uint32(id)
	}
	if mm.MeterId == 0 {
		return nil, errAt(0, s, "must specify 'meter'")
	}
	if mm.Flags&(openflow15.MF_KBPS|openflow15.MF_PKTPS) == 0 {
		return nil, errAt(0, s, "meter must specify either 'kbps' or 'pktps'")
	}
	type band struct {
		typ                     uint16
		rate, burst             uint32
		prec                    uint8
		off                     int
		hasRate, hasBurst, hasP bool
	}
	var bs []*band
	btoks := meterTokens(bands, bandsOff)
	for i := 0; i < len(btoks); i += 2 {
		k := btoks[i]
		if i+1 >= len(btoks) {
			return nil, errAt(k.off, k.s, "field %s missing value", k.s)
		}
		v := btoks[i+1]
		if k.s == "type" {
			b := &band{off: k.off}
			switch v.s {
			case "drop":
				b.typ = openflow15.MBT_DROP
			case "dscp_remark":
				b.typ = openflow15.MBT_DSCP_REMARK
			default:
				return nil, errAt(v.off, v.s, "unknown band type (want drop or dscp_remark)")
			}
			bs = append(bs, b)
			continue
		}
		if len(bs) == 0 {
			return nil, errAt(k.off, k.s, "band must start with the 'type' keyword")
		}
		b := bs[len(bs)-1]
		switch k.s {
		case "rate", "burst_size":
			n, err := parseUint(v.s, 32)
			if err != nil {
				return nil, errAt(v.off, v.s, "bad %s", k.s)
			}
			if k.s == "rate" {
				b.rate, b.hasRate = uint32(n), true
			} else {
				b.burst, b.hasBurst = uint32(n), true
			}
		case "prec_level":
			n, err := parseUint(v.s, 8)
			if err != nil {
				return nil, errAt(v.off, v.s, "bad prec_level")
			}
			b.prec, b.hasP = uint8(n), true
		default:
			return nil, errAt(k.off, k.s, "unknown keyword")
		}
	}
	if len(bs) == 0 {
		return nil, errAt(bandsOff, bands, "meter must have bands")
	}
	for _, b := range bs {
		switch {
		case b.typ == openflow15.MBT_DSCP_REMARK && b.prec == 0:
			return nil, errAt(b.off, bands, "'dscp_remark' band must have 'prec_level'")
		case b.typ != openflow15.MBT_DSCP_REMARK && b.prec != 0:
			return nil, errAt(b.off, bands, "only 'dscp_remark' band may have 'prec_level'")
		case b.rate == 0:
			return nil, errAt(b.off, bands, "band must have 'rate'")
		case mm.Flags&openflow15.MF_BURST != 0 && b.burst == 0:
			return nil, errAt(b.off, bands, "band must have 'burst_size' when 'burst' flag is set")
		case mm.Flags&openflow15.MF_BURST == 0 && b.burst != 0:
			return nil, errAt(b.off, bands, "band may have 'burst_size' only when 'burst' flag is set")
		}
		if b.typ == openflow15.MBT_DROP {
			d := openflow15.NewMeterBandDrop()
			d.Rate, d.BurstSize = b.rate, b.burst
			mm.AddMeterBand(d)
		} else {
			d := openflow15.NewMeterBandDSCP()
			d.Rate, d.BurstSize, d.PrecLevel = b.rate, b.burst, b.prec
			mm.AddMeterBand(d)
		}
	}
	return mm, nil
}

func meterFlag(name string) uint16 {
	for _, f := range meterFlags {
		if f.name == name {
			return f.bit
		}
	}
	return 0
}

// FormatMeterMod prints an encoded OpenFlow 1.5 METER_MOD in add-meter
// syntax, e.g. "meter=256,pktps,band=type=drop,rate=100", which ParseMeter
// reads back (`ovs-ofctl dump-meters` prints the same content as "meter=256
// pktps bands=" followed by one "type=drop rate=100" line per band). It
// never panics.
func FormatMeterMod(b []byte) (string, error) {
	if len(b) < 16 || b[0] != openflow15.VERSION || b[1] != openflow15.Type_MeterMod {
		return "", errors.New("ofctl: format meter: not an OpenFlow 1.5 METER_MOD")
	}
	if n := int(binary.BigEndian.Uint16(b[2:])); n != len(b) {
		return "", fmt.Errorf("ofctl: format meter: length field %d, message %d bytes", n, len(b))
	}
	flags := binary.BigEndian.Uint16(b[10:])
	id := binary.BigEndian.Uint32(b[12:])
	var sb strings.Builder
	sb.WriteString("meter=")
	switch id {
	case openflow15.M_CONTROLLER:
		sb.WriteString("controller")
	case openflow15.M_SLOWPATH:
		sb.WriteString("slowpath")
	default:
		sb.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	for _, f := range meterFlags {
		if flags&f.bit != 0 {
			sb.WriteString("," + f.name)
		}
	}
	sb.WriteString(",band=")
	bands := b[16:]
	for i := 0; len(bands) > 0; i++ {
		if len(bands) < 16 || binary.BigEndian.Uint16(bands[2:]) != 16 {
			return "", errors.New("ofctl: format meter: bad band length")
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		typ := binary.BigEndian.Uint16(bands)
		switch typ {
		case openflow15.MBT_DROP:
			sb.WriteString("type=drop")
		case openflow15.MBT_DSCP_REMARK:
			sb.WriteString("type=dscp_remark")
		default:
			return "", fmt.Errorf("ofctl: format meter: band type %d is not supported", typ)
		}
		sb.WriteString(",rate=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(bands[4:])), 10))
		if flags&openflow15.MF_BURST != 0 {
			sb.WriteString(",burst_size=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(bands[8:])), 10))
		}
		if typ == openflow15.MBT_DSCP_REMARK {
			sb.WriteString(",prec_level=" + strconv.Itoa(int(bands[12])))
		}
		bands = bands[16:]
	}
	return sb.String(), nil
}
