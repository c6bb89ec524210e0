package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// Group types with the names ovs-ofctl uses.
var groupTypes = []string{"all", "select", "indirect", "ff"}

// Bucket property types (OFPGBPT15_*) and reserved ids.
const (
	bucketPropWeight     = 0
	bucketPropWatchPort  = 1
	bucketPropWatchGroup = 2

	groupMax     = 0xffffff00
	groupAny     = 0xffffffff
	bucketMax    = 0xffffff00
	bucketAll    = 0xffffffff
	watchPortAny = 0xffffffff
)

// rawMessage is encoded data libOpenflow carries without interpreting it.
type rawMessage []byte

func (r *rawMessage) Len() uint16                    { return uint16(len(*r)) }
func (r *rawMessage) MarshalBinary() ([]byte, error) { return append([]byte(nil), *r...), nil }
func (r *rawMessage) UnmarshalBinary(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// bucket is one parsed group bucket.
type bucket struct {
	id          uint32
	weight      uint16
	watchPort   uint32 // OpenFlow 1.1+ port number
	watchGroup  uint32
	actions     []byte
	hasActions  bool
	off         int // where the bucket starts, for errors
	text        string
	explicitID  bool
	weightToken kv
}

// ParseGroup parses one group in `ovs-ofctl -O OpenFlow15 add-group` syntax
// (group_id, type, and buckets with bucket_id, weight, watch_port,
// watch_group and actions) into an ADD GroupMod encoded as ovs-ofctl
// encodes it, bucket ids assigned as ovs-ofctl assigns them. The header's
// xid is 0. Errors are *SyntaxError.
//
// The buckets are carried as opaque data after the fixed part (in
// Properties, Buckets left empty): libOpenflow's Bucket adds its action
// length again on every MarshalBinary, so a GroupMod built from it encodes
// differently each time.
func ParseGroup(s string) (*openflow15.GroupMod, error) {
	b, err := parseGroup(s)
	if err != nil {
		return nil, asSyntaxError(err, s)
	}
	return groupModFromBytes(b)
}

// parseGroupParts parses a group into its parts.
func parseGroupParts(s string) (*GroupParts, error) {
	pi, err := checkNesting(s, 0)
	if err != nil {
		return nil, err
	}
	head := s
	bktOff := strings.Index(s, "bucket=")
	if bktOff >= 0 {
		head = s[:bktOff]
	}
	groupID, gtype := uint64(groupAny), -1
	var sel selection
	for p, err := range args(head, 0) {
		if err != nil {
			return nil, err
		}
		switch p.key {
		case "group_id":
			v, err := parseUint(p.val, 32)
			if err != nil || v > groupMax {
				return nil, errAt(p.valOff, p.val, "invalid group id (want 0 to %d)", groupMax)
			}
			groupID = v
		case "type":
			t := indexOf(groupTypes, p.val)
			if p.val == "fast_failover" {
				t = 3
			}
			if t < 0 {
				return nil, errAt(p.valOff, p.val, "invalid group type (want all, select, indirect or ff)")
			}
			gtype = t
		case "selection_method", "selection_method_param", "fields":
			if err := sel.parse(p); err != nil {
				return nil, err
			}
		case "command_bucket_id":
			return nil, errAt(p.keyOff, p.text(), "command bucket id is not needed")
		default:
			return nil, errAt(p.keyOff, p.key, "unknown keyword")
		}
	}
	if groupID == groupAny {
		return nil, errAt(len(head), "", "must specify a group_id")
	}
	if gtype < 0 {
		return nil, errAt(len(head), "", "must specify a type")
	}
	if err := sel.check(len(head)); err != nil {
		return nil, err
	}
	var buckets []*bucket
	for bktOff >= 0 {
		start := bktOff + len("bucket=")
		next := strings.Index(s[start:], "bucket=")
		end := len(s)
		if next >= 0 {
			end = start + next
			bktOff = end
		} else {
			bktOff = -1
		}
		bk, err := parseBucket(s[start:end], start, gtype, pi)
		if err != nil {
			return nil, err
		}
		buckets = append(buckets, bk)
	}
	if gtype == openflow15.GT_INDIRECT && len(buckets) > 1 {
		return nil, errAt(0, s, "indirect groups can have at most one bucket")
	}
	if err := assignBucketIDs(buckets); err != nil {
		return nil, err
	}
	return &GroupParts{Type: uint8(gtype), ID: uint32(groupID), Buckets: encodeBuckets(buckets, gtype), Properties: sel.encode()}, nil
}

func encodeBuckets(buckets []*bucket, gtype int) [][]byte {
	out := make([][]byte, len(buckets))
	for i, bk := range buckets {
		out[i] = bk.encode(gtype)
	}
	return out
}

// GroupParts is a parsed group before it is put in one GROUP_MOD, which a
// group of many buckets does not fit in.
type GroupParts struct {
	Type uint8
	ID   uint32
	// Buckets are encoded as OVS encodes them, in order.
	Buckets [][]byte
	// Properties follow the buckets (the selection method), or are nil.
	Properties []byte
}

// ParseGroupParts parses a group as ParseGroup does, of any size.
func ParseGroupParts(s string) (*GroupParts, error) {
	g, err := parseGroupParts(s)
	if err != nil {
		return nil, asSyntaxError(err, s)
	}
	return g, nil
}

// asSyntaxError returns err as a *SyntaxError, pointing at the whole of s
// when it does not say where.
func asSyntaxError(err error, s string) *SyntaxError {
	var se *SyntaxError
	if errors.As(err, &se) {
		return se
	}
	return &SyntaxError{Col: 1, Token: s, Msg: err.Error()}
}

// parseGroup returns the encoded GROUP_MOD.
func parseGroup(s string) ([]byte, error) {
	g, err := parseGroupParts(s)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 24)
	b[0], b[1] = openflow15.VERSION, openflow15.Type_GroupMod
	b[10] = g.Type
	binary.BigEndian.PutUint32(b[12:], g.ID)
	binary.BigEndian.PutUint32(b[20:], bucketAll)
	for _, bk := range g.Buckets {
		b = append(b, bk...)
	}
	binary.BigEndian.PutUint16(b[16:], uint16(len(b)-24))
	b = append(b, g.Properties...)
	if len(b) > 0xffff {
		return nil, errAt(0, s, "group of %d bytes is too large for one message", len(b))
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b, nil
}

// parseBucket parses the text after "bucket=" up to the next bucket.
func parseBucket(s string, base, gtype int, pi *parenIndex) (*bucket, error) {
	bk := &bucket{id: bucketAll, watchPort: watchPortAny, watchGroup: groupAny, off: base, text: s}
	if gtype == openflow15.GT_SELECT {
		bk.weight = 1
	}
	cx := &actx{anyMatch: true, table: 0, parens: pi}
	var acts [][]byte
	sc := newScanner(s, base)
	sc.parens = pi
	for {
		p, ok, err := sc.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		key := strings.ToLower(p.key)
		switch key {
		case "weight":
			v, err := parseUint(p.val, 16)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "bad weight (want 0 to 65535)")
			}
			bk.weight, bk.weightToken = uint16(v), p
		case "watch_port":
			port, err := parsePort(p.val)
			if err != nil || port >= portMax && port != portNone {
				return nil, errAt(p.valOff, p.val, "invalid watch_port")
			}
			bk.watchPort = port11(port)
		case "watch_group":
			v, err := parseUint(p.val, 32)
			if err != nil || v > groupMax {
				return nil, errAt(p.valOff, p.val, "invalid watch_group id")
			}
			bk.watchGroup = uint32(v)
		case "bucket_id":
			v, err := parseUint(p.val, 32)
			if err != nil || v > bucketMax {
				return nil, errAt(p.valOff, p.val, "invalid bucket_id")
			}
			bk.id, bk.explicitID = uint32(v), true
		case "action", "actions":
			bk.hasActions = true
			// The value is the first action; later pairs are actions too.
			inner := newScanner(p.val, p.valOff)
			inner.parens = pi
			for {
				q, ok, err := inner.next()
				if err != nil {
					return nil, err
				}
				if !ok {
					break
				}
				a, err := cx.bucketAction(q)
				if err != nil {
					return nil, err
				}
				acts = append(acts, a...)
			}
		default:
			bk.hasActions = true
			a, err := cx.bucketAction(p)
			if err != nil {
				return nil, err
			}
			acts = append(acts, a...)
		}
	}
	if !bk.hasActions {
		return nil, errAt(base, s, "bucket must specify actions")
	}
	if gtype != openflow15.GT_SELECT && bk.weight != 0 {
		return nil, errAt(bk.weightToken.keyOff, bk.weightToken.text(), "only select groups can have bucket weights")
	}
	if err := checkBucketLimits(acts); err != nil {
		return nil, errLimit(base, s, err)
	}
	for _, a := range acts {
		bk.actions = append(bk.actions, a...)
	}
	return bk, nil
}

// bucketAction parses one action of a bucket ("drop" gives none).
func (cx *actx) bucketAction(p kv) ([][]byte, error) {
	key := strings.ToLower(p.key)
	switch key {
	case "drop":
		return nil, nil
	case "goto_table", "write_actions", "clear_actions", "write_metadata", "apply_actions":
		return nil, errAt(p.keyOff, p.text(), "instruction %s is not allowed in a group bucket", key)
	}
	return cx.parseAction(p, key)
}

// assignBucketIDs gives buckets without bucket_id the ids ovs-ofctl gives
// them: the lowest ids not used by explicit ids at or after the first
// bucket without one (sic: explicit ids before it are not considered, and
// a collision is then an error, as vswitchd reports it).
func assignBucketIDs(buckets []*bucket) error {
	first := -1
	for i, bk := range buckets {
		if !bk.explicitID {
			first = i
			break
		}
	}
	if first >= 0 {
		used := map[uint32]bool{}
		for _, bk := range buckets[first:] {
			if bk.explicitID {
				used[bk.id] = true
			}
		}
		next := uint32(0)
		for _, bk := range buckets[first:] {
			if bk.explicitID {
				continue
			}
			for used[next] {
				next++
			}
			bk.id = next
			used[next] = true
		}
	}
	seen := map[uint32]bool{}
	for _, bk := range buckets {
		if seen[bk.id] {
			return errAt(bk.off, bk.text, "duplicate bucket id %d", bk.id)
		}
		seen[bk.id] = true
	}
	return nil
}

// encode returns the OpenFlow 1.5 bucket.
func (bk *bucket) encode(gtype int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[2:], uint16(len(bk.actions)))
	binary.BigEndian.PutUint32(b[4:], bk.id)
	b = append(b, bk.actions...)
	prop := func(typ uint16, v []byte) {
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint16(b, 8)
		b = append(b, v...)
	}
	if gtype == openflow15.GT_SELECT {
		prop(bucketPropWeight, []byte{byte(bk.weight >> 8), byte(bk.weight), 0, 0})
	}
	if bk.watchPort != watchPortAny {
		prop(bucketPropWatchPort, binary.BigEndian.AppendUint32(nil, bk.watchPort))
	}
	if bk.watchGroup != groupAny {
		prop(bucketPropWatchGroup, binary.BigEndian.AppendUint32(nil, bk.watchGroup))
	}
	binary.BigEndian.PutUint16(b, uint16(len(b)))
	return b
}

// groupModFromBytes wraps an encoded GROUP_MOD in a libOpenflow GroupMod
// that marshals back to the same bytes (with xid 0).
func groupModFromBytes(b []byte) (*openflow15.GroupMod, error) {
	if len(b) < 24 {
		return nil, errors.New("ofctl: group mod too short")
	}
	gm := openflow15.NewGroupMod()
	gm.Header.Xid = binary.BigEndian.Uint32(b[4:])
	gm.Command = binary.BigEndian.Uint16(b[8:])
	gm.Type = b[10]
	gm.GroupId = binary.BigEndian.Uint32(b[12:])
	gm.BucketArrayLen = binary.BigEndian.Uint16(b[16:])
	gm.CommandBucketId = binary.BigEndian.Uint32(b[20:])
	if len(b) > 24 {
		rest := rawMessage(append([]byte(nil), b[24:]...))
		gm.Properties = append(gm.Properties, &rest)
	}
	return gm, nil
}

// FormatGroupMod prints an encoded OpenFlow 1.5 GROUP_MOD as `ovs-ofctl
// -O OpenFlow15 dump-groups` prints the group (without the leading space),
// e.g. "group_id=9,type=select,bucket=bucket_id:0,weight:100,actions=...".
// The text parses back with ParseGroup. It never panics.
func FormatGroupMod(b []byte) (string, error) {
	if len(b) < 24 || b[0] != openflow15.VERSION || b[1] != openflow15.Type_GroupMod {
		return "", errors.New("ofctl: format group: not an OpenFlow 1.5 GROUP_MOD")
	}
	if n := int(binary.BigEndian.Uint16(b[2:])); n != len(b) {
		return "", fmt.Errorf("ofctl: format group: length field %d, message %d bytes", n, len(b))
	}
	gtype := int(b[10])
	blen := int(binary.BigEndian.Uint16(b[16:]))
	if 24+blen > len(b) {
		return "", errors.New("ofctl: format group: bad bucket array length")
	}
	sel, err := decodeSelection(b[24+blen:])
	if err != nil {
		return "", fmt.Errorf("ofctl: format group: %w", err)
	}
	var sb strings.Builder
	sb.WriteString("group_id=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(b[12:])), 10))
	tname := "unknown"
	if gtype < len(groupTypes) {
		tname = groupTypes[gtype]
	}
	sb.WriteString(",type=" + tname)
	sb.WriteString(sel.String())
	body := b[24 : 24+blen]
	for len(body) > 0 {
		s, n, err := formatBucket(body, gtype)
		if err != nil {
			return "", fmt.Errorf("ofctl: format group: %w", err)
		}
		sb.WriteString(",bucket=" + s)
		body = body[n:]
	}
	return sb.String(), nil
}

// formatBucket prints the bucket at the start of b and returns its length.
func formatBucket(b []byte, gtype int) (string, int, error) {
	if len(b) < 8 {
		return "", 0, errors.New("truncated bucket")
	}
	n, alen := int(binary.BigEndian.Uint16(b)), int(binary.BigEndian.Uint16(b[2:]))
	if n < 8 || n > len(b) || 8+alen > n {
		return "", 0, fmt.Errorf("bad bucket length %d", n)
	}
	id := binary.BigEndian.Uint32(b[4:])
	acts, err := formatActionList(b[8 : 8+alen])
	if err != nil {
		return "", 0, err
	}
	if acts == "" {
		acts = "drop"
	}
	weight, watchPort, watchGroup := uint16(0), uint32(watchPortAny), uint32(groupAny)
	if gtype == openflow15.GT_SELECT {
		weight = 1
	}
	props := b[8+alen : n]
	for len(props) > 0 {
		if len(props) < 8 {
			return "", 0, errors.New("truncated bucket property")
		}
		typ, plen := binary.BigEndian.Uint16(props), int(binary.BigEndian.Uint16(props[2:]))
		if plen != 8 {
			return "", 0, fmt.Errorf("bucket property %d of length %d is not supported", typ, plen)
		}
		switch typ {
		case bucketPropWeight:
			weight = binary.BigEndian.Uint16(props[4:])
		case bucketPropWatchPort:
			watchPort = binary.BigEndian.Uint32(props[4:])
		case bucketPropWatchGroup:
			watchGroup = binary.BigEndian.Uint32(props[4:])
		default:
			return "", 0, fmt.Errorf("bucket property %d is not supported", typ)
		}
		props = props[8:]
	}
	s := "bucket_id:" + strconv.FormatUint(uint64(id), 10) + ","
	defWeight := uint16(0)
	if gtype == openflow15.GT_SELECT {
		defWeight = 1
	}
	if weight != defWeight {
		s += "weight:" + strconv.Itoa(int(weight)) + ","
	}
	if watchPort != watchPortAny {
		s += "watch_port:" + formatPort11(watchPort) + ","
	}
	if watchGroup != groupAny {
		s += "watch_group:" + strconv.FormatUint(uint64(watchGroup), 10) + ","
	}
	return s + "actions=" + acts, n, nil
}
