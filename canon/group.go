package canon

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// OpenFlow 1.5 group constants (OFPGC15_*, OFPGT11_*, OFPG15_BUCKET_*, OFPGBPT15_*).
const (
	groupCmdAdd          = 0
	groupCmdInsertBucket = 3
	groupTypeSelect      = 1
	groupModFixed        = entry.GroupModFixed
	bucketFixed          = 8
	groupMax             = 0xffffff00
	bucketMax            = 0xffffff00
	portAny              = 0xffffffff
	groupAny             = 0xffffffff
)

// decodeGroup reads the GROUP_MODs of msgs (an ADD, then INSERT_BUCKETs of
// the same group) and brings the group to OVS's form.
func decodeGroup(msgs [][]byte, kept *bool) (*entry.Group, error) {
	var g *entry.Group
	for i, m := range msgs {
		if len(m) < groupModFixed || m[1] != typeGroupMod {
			return nil, fmt.Errorf("message %d: type %d of %d bytes, want a GROUP_MOD (15) of at least %d", i, m[1], len(m), groupModFixed)
		}
		gm, err := entry.ReadGroupMod(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		cmd, typ, id, cmdBucket, props := gm.Command, gm.Type, gm.ID, gm.CommandBucket, gm.Props
		buckets, err := entry.SplitBuckets(gm.Buckets)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if i == 0 {
			if cmd != groupCmdAdd {
				return nil, fmt.Errorf("GROUP_MOD command %d, want ADD (0)", cmd)
			}
			if id > groupMax {
				return nil, fmt.Errorf("group id %#x is reserved (want 0 to %#x)", id, groupMax)
			}
			g = &entry.Group{Type: typ, ID: id}
			if g.Props, err = groupProps(props, kept); err != nil {
				return nil, err
			}
			g.Buckets = buckets
			continue
		}
		switch {
		case cmd != groupCmdInsertBucket:
			return nil, fmt.Errorf("message %d: GROUP_MOD command %d after the ADD, want INSERT_BUCKET (3)", i, cmd)
		case id != g.ID || typ != g.Type:
			return nil, fmt.Errorf("message %d: INSERT_BUCKET of group %d type %d, want group %d type %d as in the ADD", i, id, typ, g.ID, g.Type)
		case len(props) != 0:
			return nil, fmt.Errorf("message %d: INSERT_BUCKET with group properties: they belong in the ADD", i)
		}
		switch cmdBucket {
		case entry.BucketLast:
			g.Buckets = append(g.Buckets, buckets...)
		case entry.BucketFirst:
			g.Buckets = append(buckets, g.Buckets...)
		default:
			return nil, fmt.Errorf("message %d: INSERT_BUCKET at bucket %#x: only FIRST (0xfffffffd) and LAST (0xfffffffe) are supported", i, cmdBucket)
		}
	}
	if g == nil {
		return nil, errors.New("no GROUP_MOD")
	}
	return g, canonicaliseBuckets(g, kept)
}

// groupProps returns a group's properties as OVS encodes them.
func groupProps(b []byte, kept *bool) ([]byte, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("group properties of %d bytes: not a multiple of 8", len(b))
	}
	if p, ok := ofctl.CanonicalGroupProperties(b); ok {
		return p, nil
	}
	*kept = true
	return clone(b), nil
}

// canonicaliseBuckets brings every bucket to OVS's encoding and checks what OVS
// checks of the group as a whole that would otherwise make the entry differ
// from its dump for ever.
func canonicaliseBuckets(g *entry.Group, kept *bool) error {
	seen := make(map[uint32]bool, len(g.Buckets))
	for i, b := range g.Buckets {
		cb, err := canonicalBucket(b, g.Type, kept)
		if err != nil {
			return fmt.Errorf("bucket %d: %w", i, err)
		}
		id := entry.BucketID(cb)
		if seen[id] {
			return fmt.Errorf("bucket %d: duplicate bucket id %d (OVS refuses it: OFPGMFC_BUCKET_EXISTS)", i, id)
		}
		seen[id] = true
		g.Buckets[i] = cb
	}
	return nil
}

// canonicalBucket returns a bucket as OVS's ofputil_put_ofp15_bucket encodes
// it: actions (each canonical when ofctl knows it), then the weight (select
// groups only, 1 when absent), watch_port and watch_group unless ANY.
func canonicalBucket(b []byte, gtype uint8, kept *bool) ([]byte, error) {
	return canonicalBucketAs(b, gtype, gtype, kept)
}

// canonicalBucketAs is canonicalBucket for a bucket sent in a GROUP_MOD of
// type sent that lands in a group of type gtype (an INSERT_BUCKET keeps
// the group's type): vswitchd gives a bucket without a weight the default
// of the type it was sent with (1 for select, 0 for the others), and the
// group's type decides whether the weight is encoded.
func canonicalBucketAs(b []byte, sent, gtype uint8, kept *bool) ([]byte, error) {
	bk, _, err := entry.NextBucket(b)
	if err != nil {
		return nil, err
	}
	id := bk.ID
	if id > bucketMax {
		return nil, fmt.Errorf("bucket id %#x is reserved (want 0 to %#x)", id, bucketMax)
	}
	if err := ofctl.CheckActions(bk.Actions); err != nil {
		return nil, err
	}
	acts, err := canonicalActions(bk.Actions, ofctl.BucketActions(), kept)
	if err != nil {
		return nil, err
	}
	if err := ofctl.CheckActions(acts); err != nil {
		return nil, err
	}
	bp, err := entry.ReadBucketProps(bk.Props)
	if err != nil {
		return nil, err
	}
	weight, watchPort, watchGroup := uint16(0), bp.WatchPort, bp.WatchGroup
	switch {
	case bp.HasWeight:
		weight = bp.Weight
	case sent == groupTypeSelect:
		weight = 1
	}
	out := make([]byte, bucketFixed, bucketFixed+len(acts)+24)
	be.PutUint16(out[2:], uint16(len(acts)))
	be.PutUint32(out[4:], id)
	out = append(out, acts...)
	prop := func(typ uint16, v uint32, width int) {
		out = be.AppendUint16(out, typ)
		out = be.AppendUint16(out, 8)
		if width == 2 {
			out = be.AppendUint16(out, uint16(v))
			out = append(out, 0, 0)
		} else {
			out = be.AppendUint32(out, v)
		}
	}
	if gtype == groupTypeSelect {
		prop(entry.BucketPropWeight, uint32(weight), 2)
	}
	if watchPort != portAny {
		prop(entry.BucketPropWatchPort, watchPort, 4)
	}
	if watchGroup != groupAny {
		prop(entry.BucketPropWatchGroup, watchGroup, 4)
	}
	if len(out) > MaxMessage-groupModFixed {
		return nil, fmt.Errorf("bucket of %d bytes does not fit in one GROUP_MOD", len(out))
	}
	be.PutUint16(out, uint16(len(out)))
	return out, nil
}

// groupText prints a canonical group payload: the ADD's text with the
// buckets of its INSERT_BUCKET messages appended, as one group.
func groupText(payload []byte) (string, error) {
	msgs, err := entry.SplitMessages(payload)
	if err != nil {
		return "", err
	}
	text, err := ofctl.FormatGroupMod(msgs[0])
	if err != nil {
		return "", err
	}
	for _, m := range msgs[1:] {
		// An INSERT_BUCKET has no properties: it prints as the group's id
		// and type followed by its buckets.
		more, err := ofctl.FormatGroupMod(entry.WithCommand(m, groupCmdAdd))
		if err != nil {
			return "", err
		}
		head := fmt.Sprintf("group_id=%d,", be.Uint32(entry.ModID(m)))
		i := len(head)
		for i < len(more) && more[i] != ',' {
			i++
		}
		text += more[i:]
	}
	return text, nil
}

var be = binary.BigEndian

func clone(b []byte) []byte { return append([]byte(nil), b...) }
