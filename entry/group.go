package entry

import (
	"encoding/binary"
	"fmt"
)

// GROUP_MOD layout and constants (OFPGC15_*, OFPG15_BUCKET_*).
const (
	groupDescFixed = 16
	bucketFixed    = 8
	// GroupCmdInsertBucket is the GROUP_MOD command that adds buckets to a
	// group the switch holds.
	GroupCmdInsertBucket = cmdInsertBucket
	// BucketLast and BucketFirst are the command_bucket_ids of an
	// INSERT_BUCKET that appends and prepends; with BucketAll, those of a
	// REMOVE_BUCKET that takes the first, the last or every bucket.
	BucketFirst = 0xfffffffd
	BucketLast  = 0xfffffffe
	BucketAll   = 0xffffffff
)

var be = binary.BigEndian

// Group is a group as OVS models it, whatever messages it came in.
type Group struct {
	Type uint8
	ID   uint32
	// Buckets are encoded OpenFlow 1.5 buckets, in order.
	Buckets [][]byte
	// Props are the encoded group properties that follow the buckets.
	Props []byte
}

// Encode returns the group's canonical payload: one GROUP_MOD ADD or, when
// the group does not fit in one message of MaxMessage bytes, the ADD (with
// the properties and as many buckets as fit) followed by INSERT_BUCKET
// messages (command_bucket_id LAST), each filled greedily in bucket order.
// The split depends only on the group, so equal groups encode equally.
func (g *Group) Encode() ([]byte, error) {
	var out []byte
	start := func(cmd uint16, cmdBucket uint32) int {
		at := len(out)
		out = append(out, make([]byte, groupModFixed)...)
		m := out[at:]
		m[0], m[1] = ofVersion15, typeGroupMod
		be.PutUint16(m[offModCommand:], cmd)
		m[10] = g.Type
		be.PutUint32(m[offModID:], g.ID)
		be.PutUint32(m[20:], cmdBucket)
		return at
	}
	finish := func(at int, props []byte) {
		be.PutUint16(out[at+16:], uint16(len(out)-at-groupModFixed))
		out = append(out, props...)
		be.PutUint16(out[at+2:], uint16(len(out)-at))
	}
	if groupModFixed+len(g.Props) > MaxMessage {
		return nil, fmt.Errorf("group %d: properties of %d bytes do not fit in one GROUP_MOD", g.ID, len(g.Props))
	}
	at, room, props := start(0, BucketAll), MaxMessage-groupModFixed-len(g.Props), g.Props
	for i, b := range g.Buckets {
		if len(b) > MaxMessage-groupModFixed {
			return nil, fmt.Errorf("group %d: bucket %d of %d bytes does not fit in one GROUP_MOD", g.ID, i, len(b))
		}
		if len(b) > room {
			finish(at, props)
			at, room, props = start(cmdInsertBucket, BucketLast), MaxMessage-groupModFixed, nil
		}
		out = append(out, b...)
		room -= len(b)
	}
	finish(at, props)
	if len(out) > MaxPayload {
		return nil, fmt.Errorf("group %d of %d bytes (%d buckets) exceeds the %d-byte limit of an entry", g.ID, len(out), len(g.Buckets), MaxPayload)
	}
	return out, nil
}

// SplitBuckets splits an encoded bucket array without interpreting it.
func SplitBuckets(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		bk, rest, err := NextBucket(b)
		if err != nil {
			return nil, fmt.Errorf("bucket %d: %w", len(out), err)
		}
		out = append(out, bk.Raw)
		b = rest
	}
	return out, nil
}

// GroupFromDesc reads one ofp_group_desc of a dump, OVS's own form, so
// nothing in it is re-encoded. A group larger than 64 KiB comes from OVS 3.1
// with its 16-bit lengths (entry, bucket list) wrapped; they are read modulo
// 65536, the buckets' own lengths telling where the list ends.
func GroupFromDesc(raw []byte) (*Group, error) {
	if len(raw) < groupDescFixed {
		return nil, fmt.Errorf("group entry of %d bytes is truncated", len(raw))
	}
	id := be.Uint32(raw[4:])
	if int(be.Uint16(raw)) != len(raw)&0xffff {
		return nil, fmt.Errorf("group %d: entry length %d does not match its %d bytes", id, be.Uint16(raw), len(raw))
	}
	blen16 := int(be.Uint16(raw[8:]))
	body := raw[groupDescFixed:]
	if len(raw) <= 0xffff {
		if blen16 > len(body) {
			return nil, fmt.Errorf("group %d: bucket list of %d bytes does not fit in %d", id, blen16, len(body))
		}
		buckets, err := SplitBuckets(body[:blen16])
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", id, err)
		}
		return &Group{Type: raw[2], ID: id, Buckets: buckets, Props: body[blen16:]}, nil
	}
	var buckets [][]byte
	for walked := 0; ; {
		// The list ends where its wrapped length says and properties
		// (experimenter, 0xffff) or nothing follow.
		if props := body[walked:]; walked&0xffff == blen16 && (len(props) == 0 || len(props) >= 4 && be.Uint16(props) == 0xffff) {
			return &Group{Type: raw[2], ID: id, Buckets: buckets, Props: props}, nil
		}
		if walked >= len(body) {
			return nil, fmt.Errorf("group %d: bucket list length %d (modulo 65536) does not match its buckets", id, blen16)
		}
		n := len(body) - walked
		if n >= 2 {
			n = min(n, int(be.Uint16(body[walked:])))
		}
		bs, err := SplitBuckets(body[walked : walked+n])
		if err == nil && len(bs) != 1 {
			err = fmt.Errorf("length %d", n)
		}
		if err != nil {
			return nil, fmt.Errorf("group %d: bucket %d: %w", id, len(buckets), err)
		}
		buckets = append(buckets, bs[0])
		walked += len(bs[0])
	}
}

// GroupMessages returns the messages of a canonical group payload: one, or
// the ADD and its INSERT_BUCKETs. A payload that does not split (it passed
// Identify, so it should) is returned whole, for the switch to refuse.
func GroupMessages(payload []byte) [][]byte {
	if len(payload) >= headerLen && int(be.Uint16(payload[2:])) < len(payload) {
		if msgs, err := SplitMessages(payload); err == nil {
			return msgs
		}
	}
	return [][]byte{payload}
}
