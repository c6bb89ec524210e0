package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Nicira subtypes of bundle and bundle_load, and their member algorithms
// (NX_BD_ALG_*).
const (
	nxastBundle     = 12
	nxastBundleLoad = 13

	bundleMaxMembers = 2048
)

var bundleAlgNames = []string{"active_backup", "hrw"}

// parseBundle parses bundle(FIELDS,BASIS,ALG,ofport,members:PORTS) and
// bundle_load(FIELDS,BASIS,ALG,ofport,DST,members:PORTS) as OVS's
// bundle_parse does: the ports may be separated by commas and wrapped in
// brackets.
func (cx *actx) parseBundle(p kv, load bool) ([]byte, error) {
	head, members, ok := strings.Cut(p.val, ":")
	args, off := splitArgs(kv{val: head, valOff: p.valOff})
	want := 5
	if load {
		want = 6
	}
	if !ok || len(args) != want {
		return nil, errAt(p.keyOff, p.text(), "not enough arguments to %s action (want %d before members:)", p.key, want-1)
	}
	if d := strings.ToLower(args[want-1]); d != "members" && d != "slaves" {
		return nil, errAt(off[want-1], args[want-1], "missing member delimiter, expected `members'")
	}
	fields, basis, err := parseHashArgs(args, off)
	if err != nil {
		return nil, err
	}
	alg := indexOf(bundleAlgNames, strings.ToLower(args[2]))
	if alg < 0 {
		return nil, errAt(off[2], args[2], "unknown algorithm (want active_backup or hrw)")
	}
	if strings.ToLower(args[3]) != "ofport" {
		return nil, errAt(off[3], args[3], "unknown member_type (want ofport)")
	}
	var dst subfield
	if load {
		if dst, err = parseSubfield(args[4]); err != nil {
			return nil, errAt(off[4], args[4], "%v", err)
		}
		if err := cx.checkWritable(dst.f, off[4], args[4]); err != nil {
			return nil, err
		}
	}
	membersOff := p.valOff + len(head) + 1
	var ports []uint16
	for _, m := range strings.FieldsFunc(members, func(r rune) bool { return strings.ContainsRune(", []", r) }) {
		port, err := parsePort(m)
		if err != nil {
			return nil, errAt(membersOff+strings.Index(members, m), m, "bad port number")
		}
		if port == portController {
			return nil, errAt(membersOff+strings.Index(members, m), m, "controller members are not supported")
		}
		if len(ports) == bundleMaxMembers {
			return nil, errAt(membersOff, members, "at most %d members", bundleMaxMembers)
		}
		ports = append(ports, port)
	}
	sub := uint16(nxastBundle)
	if load {
		sub = nxastBundleLoad
	}
	b := nxHeader(sub)
	b = binary.BigEndian.AppendUint16(b, uint16(alg))
	b = binary.BigEndian.AppendUint16(b, uint16(fields))
	b = binary.BigEndian.AppendUint16(b, uint16(basis))
	b = binary.BigEndian.AppendUint32(b, nxmHdr32(fieldByName["in_port"]))
	b = binary.BigEndian.AppendUint16(b, uint16(len(ports)))
	if load {
		b = binary.BigEndian.AppendUint16(b, ofsNbits(dst.ofs, dst.bits))
		b = binary.BigEndian.AppendUint32(b, cx.nxmHdrOf(dst.f))
	} else {
		b = append(b, 0, 0, 0, 0, 0, 0)
	}
	b = append(b, 0, 0, 0, 0)
	for _, port := range ports {
		b = binary.BigEndian.AppendUint16(b, port)
	}
	return setLen16(pad8(b)), nil
}

func formatBundle(a []byte) (string, error) {
	if len(a) < 32 {
		return "", errors.New("bad bundle length")
	}
	alg, fields := int(binary.BigEndian.Uint16(a[10:])), int(binary.BigEndian.Uint16(a[12:]))
	n := int(binary.BigEndian.Uint16(a[20:]))
	if alg >= len(bundleAlgNames) || fields >= len(hashFieldNames) || 32+2*n > len(a) {
		return "", errors.New("bundle: unknown algorithm or fields, or bad member count")
	}
	var sb strings.Builder
	name := "bundle"
	if binary.BigEndian.Uint16(a[8:]) == nxastBundleLoad {
		name = "bundle_load"
	}
	fmt.Fprintf(&sb, "%s(%s,%d,%s,ofport,", name, hashFieldNames[fields], binary.BigEndian.Uint16(a[14:]), bundleAlgNames[alg])
	if name == "bundle_load" {
		sf, err := nxmSubfield(binary.BigEndian.Uint32(a[24:]), binary.BigEndian.Uint16(a[22:]))
		if err != nil {
			return "", fmt.Errorf("bundle_load: %w", err)
		}
		sb.WriteString(sf.String() + ",")
	}
	sb.WriteString("members:")
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(formatPort(binary.BigEndian.Uint16(a[32+2*i:])))
	}
	return sb.String() + ")", nil
}
