package ofctl

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"antrea.io/libOpenflow/openflow15"
)

// Flow is one flow of a flow file.
type Flow struct {
	Line int                 // 1-based line number in the file
	Text string              // the line as written, trimmed
	Mod  *openflow15.FlowMod // the canonical ADD FlowMod
}

// Flow-mod flags (OFPFF_*), with the names ovs-ofctl uses.
var flowFlags = []struct {
	name string
	bit  uint16
}{
	{"send_flow_rem", openflow15.FF_SEND_FLOW_REM},
	{"check_overlap", openflow15.FF_CHECK_OVERLAP},
	{"reset_counts", openflow15.FF_RESET_COUNTS},
	{"no_packet_counts", openflow15.FF_NO_PKT_COUNTS},
	{"no_byte_counts", openflow15.FF_NO_BYT_COUNTS},
}

// shorthands are the protocol keywords of a match: eth_type and ip_proto.
var shorthands = map[string][2]int{
	"ip": {ethIP, -1}, "ipv4": {ethIP, -1}, "ipv6": {ethIPv6, -1}, "ip6": {ethIPv6, -1}, "arp": {ethARP, -1}, "rarp": {ethRARP, -1},
	"icmp": {ethIP, protoICMP}, "icmp6": {ethIPv6, protoICMPv6},
	"tcp": {ethIP, protoTCP}, "tcp6": {ethIPv6, protoTCP},
	"udp": {ethIP, protoUDP}, "udp6": {ethIPv6, protoUDP},
	"sctp": {ethIP, protoSCTP}, "sctp6": {ethIPv6, protoSCTP},
	"mpls": {ethMPLS, -1}, "mplsm": {ethMPLM, -1},
}

// statsKeys are the statistics ovs-ofctl prints in dump-flows; they are
// accepted and ignored so dumps can be read back.
var statsKeys = map[string]bool{"duration": true, "n_packets": true, "n_bytes": true, "idle_age": true, "hard_age": true}

// ParseFlow parses one flow in `ovs-ofctl -O OpenFlow15 add-flow` syntax
// into an ADD FlowMod in OVS's canonical encoding (see the package
// documentation). The header's xid is 0. Errors are *SyntaxError with Line 0.
// A tun_metadata match is encoded as ovs-ofctl encodes it, as wide as its
// value; ParseFlowTLV encodes it as vswitchd holds it.
func ParseFlow(s string) (*openflow15.FlowMod, error) {
	return ParseFlowTLV(s, nil)
}

// ParseFlowTLV is ParseFlow for a bridge with the given TLV map: matches on
// tun_metadata fields get the option lengths of the map, the form vswitchd
// stores and dumps, and a field the map lacks is an error (vswitchd would
// refuse the flow).
func ParseFlowTLV(s string, tlv TLVMap) (*openflow15.FlowMod, error) {
	// Not pooled: the FlowMod may share bytes with the scratch.
	fp, err := parseFlowSyntax(s, tlv, new(flowScratch))
	if err != nil {
		return nil, err
	}
	return fp.flowMod(), nil
}

// ParseFlowBinary is ParseFlow returning the FLOW_MOD encoded, as its
// MarshalBinary encodes it, without building libOpenflow's model of it.
func ParseFlowBinary(s string) ([]byte, error) {
	fs := flowScratches.Get().(*flowScratch)
	defer fs.release()
	fp, err := parseFlowSyntax(s, nil, fs)
	if err != nil {
		return nil, err
	}
	b := fp.appendBinary(make([]byte, 0, fp.binaryLen()))
	if len(b) > 0xffff {
		// libOpenflow's 16-bit lengths wrap: keep its bytes for what
		// must then be refused.
		if b, err = fp.flowMod().MarshalBinary(); err != nil {
			return nil, fmt.Errorf("encoding: %w", err)
		}
	}
	return b, nil
}

// flowScratch is what parsing a flow needs besides its text: the parts,
// the action context (whose match is kilobytes), the encoded match and the
// fields as written. ParseFlowBinary pools it.
type flowScratch struct {
	fp  flowParts
	is  instrSet
	cx  actx
	enc oxmList
	set []setting
}

var flowScratches = sync.Pool{New: func() any { return new(flowScratch) }}

// release returns fs to the pool, without references to the last flow's
// text or actions.
func (fs *flowScratch) release() {
	clear(fs.set[:cap(fs.set)])
	clear(fs.is.apply[:cap(fs.is.apply)])
	fs.is.write, fs.is.meta, fs.fp.enc, fs.fp.is = nil, nil, nil, nil
	fs.cx.mt.md, fs.cx.mt.tlv = nil, nil
	flowScratches.Put(fs)
}

// parseFlowSyntax is parseFlow with its errors as *SyntaxError.
func parseFlowSyntax(s string, tlv TLVMap, fs *flowScratch) (*flowParts, error) {
	fp, err := parseFlow(s, tlv, fs)
	if err != nil {
		var se *SyntaxError
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, &SyntaxError{Col: 1, Token: s, Msg: err.Error()}
	}
	return fp, nil
}

// parseFlow parses s with fs's memory; the result is part of fs.
func parseFlow(s string, tlv TLVMap, fs *flowScratch) (*flowParts, error) {
	fs.fp = flowParts{priority: defaultPriority}
	fp := &fs.fp
	// The match is parsed into the actions' context, which the actions
	// may change only once it is encoded: no copy of it.
	cx := &fs.cx
	cx.mt.reset()
	cx.mt.tlv = tlv
	cx.table, cx.outer, cx.anyMatch, cx.depth, cx.parens = 0, "", false, 0, nil
	mt := &cx.mt
	set := fs.set[:0]
	defer func() { fs.set = set[:0] }() // keeps what it grew to
	actStart, actOff := -1, 0
	sc := newScanner(s, 0)
	sc.rest = func(key string) bool { return key == "actions" || key == "action" }
	for {
		p, ok, err := sc.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if (p.key == "actions" || p.key == "action") && p.delim == '=' {
			actStart, actOff = p.valOff, p.valOff
			break
		}
		needVal := func() error {
			if p.delim == 0 || p.val == "" {
				return errAt(p.keyOff, p.text(), "%s needs a value", p.key)
			}
			return nil
		}
		switch {
		case p.key == "table":
			if err := needVal(); err != nil {
				return nil, err
			}
			t, err := parseUint(p.val, 8)
			if err != nil || t == 255 {
				return nil, errAt(p.valOff, p.val, "bad table id (want 0 to 254)")
			}
			fp.table = uint8(t)
		case p.key == "priority":
			if err := needVal(); err != nil {
				return nil, err
			}
			v, err := parseUint(p.val, 16)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "invalid priority (want 0 to 65535)")
			}
			fp.priority = uint16(v)
		case p.key == "cookie":
			if err := needVal(); err != nil {
				return nil, err
			}
			vs, _, hasMask := splitMask(p.val)
			if hasMask {
				return nil, errAt(p.valOff, p.val, "flow additions cannot use a cookie mask")
			}
			v, err := parseUint(vs, 64)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "bad cookie: %v", err)
			}
			fp.cookie = v
		case p.key == "idle_timeout" || p.key == "hard_timeout" || p.key == "importance":
			if err := needVal(); err != nil {
				return nil, err
			}
			v, err := parseUint(p.val, 16)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "bad %s (want 0 to 65535)", p.key)
			}
			switch p.key {
			case "idle_timeout":
				fp.idle = uint16(v)
			case "hard_timeout":
				fp.hard = uint16(v)
			default:
				fp.importance = uint16(v)
			}
		case p.key == "out_port" || p.key == "out_group":
			return nil, errAt(p.keyOff, p.text(), "%s is only meaningful when deleting flows", p.key)
		case statsKeys[p.key]:
		default:
			if flag := flowFlag(p.key); flag != 0 {
				if p.delim != 0 {
					return nil, errAt(p.keyOff, p.text(), "%s takes no value", p.key)
				}
				fp.flags |= flag
				continue
			}
			if err := mt.parseMatchPair(p, &set); err != nil {
				return nil, err
			}
		}
	}
	if actStart < 0 {
		return nil, errAt(len(s), "", "must specify an action")
	}
	if err := mt.checkPrereqs(set); err != nil {
		return nil, err
	}
	// The TLV map bounds what encode may do with tun_metadata: first.
	if err := mt.checkTLV(set); err != nil {
		return nil, err
	}
	fs.enc.fs, fs.enc.buf = fs.enc.fs[:0], fs.enc.buf[:0]
	mt.encodeTo(&fs.enc)
	enc := fs.enc.fs
	if err := mt.checkPrintable(set, enc); err != nil {
		return nil, err
	}
	cx.table = fp.table
	pi, err := checkNesting(s[actStart:], actOff)
	if err != nil {
		return nil, err
	}
	cx.parens = pi
	if err := cx.parseActionsTo(&fs.is, s[actStart:], actOff); err != nil {
		return nil, err
	}
	if err := fs.is.checkLimits(); err != nil {
		return nil, errLimit(actOff, s[actStart:], err)
	}
	fp.enc, fp.is = enc, &fs.is
	return fp, nil
}

func flowFlag(name string) uint16 {
	for _, f := range flowFlags {
		if f.name == name {
			return f.bit
		}
	}
	return 0
}

// ParseFlows parses a flow file: one flow per line, blank lines and lines
// starting with '#' skipped. It returns the flows that parsed and, joined
// with errors.Join, a *SyntaxError (with Line set) for each line that did
// not.
func ParseFlows(r io.Reader) ([]Flow, error) {
	var flows []Flow
	var errs []error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		raw := sc.Text()
		text := strings.TrimSpace(raw)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fm, err := ParseFlow(raw)
		if err != nil {
			var se *SyntaxError
			if errors.As(err, &se) {
				se.Line = line
				errs = append(errs, se)
			} else {
				errs = append(errs, fmt.Errorf("ofctl: line %d: %w", line, err))
			}
			continue
		}
		flows = append(flows, Flow{Line: line, Text: text, Mod: fm})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("ofctl: reading flows after line %d: %w", line, err))
	}
	return flows, errors.Join(errs...)
}

// FormatFlow prints fm as `ovs-ofctl -O OpenFlow15 --no-stats dump-flows`
// prints the flow, without the leading space: for example
// "table=1, priority=100,ct_state=+inv+trk,ip actions=drop". It works from
// fm's encoding, so FlowMods decoded by libOpenflow print the same as parsed
// ones. It returns an error, never panics, for flows it cannot print.
func FormatFlow(fm *openflow15.FlowMod) (s string, err error) {
	if fm == nil {
		return "", errors.New("ofctl: format flow: nil FlowMod")
	}
	b, err := marshalFlowMod(fm)
	if err != nil {
		return "", err
	}
	return formatFlowBytes(b)
}

// marshalFlowMod encodes fm, turning a panic of an incomplete message (nil
// actions, nil field values) into an error.
func marshalFlowMod(fm *openflow15.FlowMod) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("ofctl: format flow: cannot encode FlowMod: %v", r)
		}
	}()
	b, err = fm.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("ofctl: format flow: encode FlowMod: %w", err)
	}
	return b, nil
}

// formatFlowBytes prints an encoded OpenFlow 1.5 FLOW_MOD.
func formatFlowBytes(b []byte) (string, error) {
	if len(b) < 56 {
		return "", errors.New("ofctl: format flow: message too short")
	}
	cookie := binary.BigEndian.Uint64(b[8:])
	table := b[24]
	idle := binary.BigEndian.Uint16(b[26:])
	hard := binary.BigEndian.Uint16(b[28:])
	prio := binary.BigEndian.Uint16(b[30:])
	flags := binary.BigEndian.Uint16(b[44:])
	importance := binary.BigEndian.Uint16(b[46:])
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	if binary.BigEndian.Uint16(b[48:]) != openflow15.MatchType_OXM || mlen < 4 || 48+mlen > len(b) {
		return "", errors.New("ofctl: format flow: bad match")
	}
	mt, err := decodeOXMs(b[52 : 48+mlen])
	if err != nil {
		return "", fmt.Errorf("ofctl: format flow: %w", err)
	}
	insOff := 48 + (mlen+7)/8*8
	if insOff > len(b) {
		return "", errors.New("ofctl: format flow: truncated match")
	}
	acts, err := formatInstructions(b[insOff:])
	if err != nil {
		return "", fmt.Errorf("ofctl: format flow: %w", err)
	}
	var sb strings.Builder
	if cookie != 0 {
		fmt.Fprintf(&sb, "cookie=0x%x, ", cookie)
	}
	if table != 0 {
		fmt.Fprintf(&sb, "table=%d, ", table)
	}
	if idle != 0 {
		fmt.Fprintf(&sb, "idle_timeout=%d, ", idle)
	}
	if hard != 0 {
		fmt.Fprintf(&sb, "hard_timeout=%d, ", hard)
	}
	for _, f := range flowFlags {
		if flags&f.bit != 0 {
			sb.WriteString(f.name + " ")
		}
	}
	if importance != 0 {
		fmt.Fprintf(&sb, "importance=%d, ", importance)
	}
	if m := mt.format(prio); m != "" {
		sb.WriteString(m)
		sb.WriteByte(' ')
	}
	sb.WriteString("actions=")
	sb.WriteString(acts)
	return sb.String(), nil
}

// FormatFlowMod prints an encoded OpenFlow 1.5 FLOW_MOD as FormatFlow
// does, without decoding it through libOpenflow.
func FormatFlowMod(b []byte) (string, error) {
	if len(b) < 8 || b[0] != openflow15.VERSION || b[1] != openflow15.Type_FlowMod {
		return "", errors.New("ofctl: format flow: not an OpenFlow 1.5 FLOW_MOD")
	}
	return formatFlowBytes(b)
}
