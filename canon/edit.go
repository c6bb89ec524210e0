package canon

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
)

// Edits of a stored entry: what a controller's MODIFY, INSERT_BUCKET and
// REMOVE_BUCKET do to an entry the switch already holds, as vswitchd
// applies them. The result is canonical, as Decode's.

// ErrUnknownBucket is returned by RemoveBuckets and InsertBuckets for a
// bucket id the group does not hold (vswitchd: OFPGMFC_UNKNOWN_BUCKET).
var ErrUnknownBucket = errors.New("canon: no bucket of that id")

// ErrBucketExists is returned by InsertBuckets for a bucket whose id the
// group already holds (vswitchd: OFPGMFC_BUCKET_EXISTS).
var ErrBucketExists = errors.New("canon: the group holds a bucket of that id")

// ModifyFlow returns the canonical entry that a FLOW_MOD MODIFY or
// MODIFY_STRICT (mod) leaves of the stored flow payload: vswitchd keeps
// the flow's cookie, timeouts, flags and importance and takes the mod's
// instructions.
func ModifyFlow(payload, mod []byte) (entry.Entry, error) {
	keep, err := flowHead(payload)
	if err != nil {
		return entry.Entry{}, fmt.Errorf("canon: stored flow: %w", err)
	}
	at, err := flowHead(mod)
	if err != nil {
		return entry.Entry{}, fmt.Errorf("canon: modify: %w", err)
	}
	b := make([]byte, 0, keep+len(mod)-at)
	b = append(append(b, payload[:keep]...), mod[at:]...)
	be.PutUint16(b[2:], uint16(min(len(b), 0xffff)))
	if len(b) > 0xffff {
		return entry.Entry{}, fmt.Errorf("canon: modify: flow of %d bytes does not fit in a FLOW_MOD", len(b))
	}
	return DecodeEntry(entry.KindFlow, b)
}

// flowHead returns where a FLOW_MOD's instructions start: after its fixed
// part and its padded match.
func flowHead(fm []byte) (int, error) {
	if len(fm) < flowModFixed+8 {
		return 0, fmt.Errorf("FLOW_MOD of %d bytes", len(fm))
	}
	_, mlen := entry.FlowModMatchHeader(fm)
	end := flowModFixed + pad8(mlen)
	if mlen < 4 || end > len(fm) {
		return 0, fmt.Errorf("match of %d bytes does not fit in a FLOW_MOD of %d", mlen, len(fm))
	}
	return end, nil
}

// InsertBuckets returns the canonical entry of the stored group payload
// with the buckets of an INSERT_BUCKET (mod) inserted as vswitchd inserts
// them (copy_buckets_for_insert_bucket): before the group's buckets
// (command_bucket_id FIRST), after them (LAST) or after the bucket of that
// id (ErrUnknownBucket when the group has none). A bucket id the group
// already holds is ErrBucketExists.
//
// The group keeps its type and properties, whatever type mod names; that
// type gives the inserted buckets that carry no weight their default
// weight, 1 for select and 0 for the others, as vswitchd decodes them
// before it looks at the group: ovs-ofctl insert-buckets sends type all,
// so its buckets have weight 0 in a select group. A weight in a group
// other than select is dropped, as canonical groups have none (vswitchd
// keeps it and never uses it).
func InsertBuckets(payload, mod []byte) (entry.Entry, error) {
	g, opaque, err := storedGroup(payload)
	if err != nil {
		return entry.Entry{}, err
	}
	if len(mod) < groupModFixed || mod[1] != typeGroupMod || entry.ModCommand(mod) != groupCmdInsertBucket {
		return entry.Entry{}, errors.New("canon: insert buckets: not a GROUP_MOD INSERT_BUCKET")
	}
	gm, err := entry.ReadGroupMod(mod)
	if err != nil {
		return entry.Entry{}, fmt.Errorf("canon: insert buckets: %w", err)
	}
	sent, which := gm.Type, gm.CommandBucket
	if len(gm.Props) > 0 {
		return entry.Entry{}, errors.New("canon: insert buckets: group properties in an INSERT_BUCKET (they belong to the group)")
	}
	buckets, err := entry.SplitBuckets(gm.Buckets)
	if err != nil {
		return entry.Entry{}, fmt.Errorf("canon: insert buckets: %w", err)
	}
	ins := make([][]byte, len(buckets))
	for i, b := range buckets {
		if ins[i], err = canonicalBucketAs(b, sent, g.Type, &opaque); err != nil {
			return entry.Entry{}, fmt.Errorf("canon: insert buckets: bucket %d: %w", i, err)
		}
	}
	at := 0
	switch which {
	case entry.BucketFirst:
	case entry.BucketLast:
		at = len(g.Buckets)
	default:
		at = slices.IndexFunc(g.Buckets, func(b []byte) bool { return entry.BucketID(b) == which })
		if at < 0 {
			return entry.Entry{}, fmt.Errorf("group %d, bucket %d: %w", g.ID, which, ErrUnknownBucket)
		}
		at++
	}
	seen := make(map[uint32]bool, len(g.Buckets)+len(ins))
	for _, b := range slices.Concat(g.Buckets, ins) {
		id := entry.BucketID(b)
		if seen[id] {
			return entry.Entry{}, fmt.Errorf("group %d, bucket %d: %w", g.ID, id, ErrBucketExists)
		}
		seen[id] = true
	}
	g.Buckets = slices.Concat(g.Buckets[:at], ins, g.Buckets[at:])
	p, id, err := encodeGroup(g)
	if err != nil {
		return entry.Entry{}, err
	}
	return entry.Entry{Kind: entry.KindGroup, ID: id, Payload: p, Opaque: opaque}, nil
}

// RemoveBuckets returns the canonical entry of the stored group payload
// without the buckets a REMOVE_BUCKET's command_bucket_id names: FIRST,
// LAST, ALL or one bucket id (ErrUnknownBucket when the group has none of
// it). Removing the first or last bucket of an empty group leaves it as it
// is, as in vswitchd.
func RemoveBuckets(payload []byte, which uint32) (entry.Entry, error) {
	g, opaque, err := storedGroup(payload)
	if err != nil {
		return entry.Entry{}, err
	}
	n := len(g.Buckets)
	switch which {
	case entry.BucketAll:
		g.Buckets = nil
	case entry.BucketFirst:
		if n > 0 {
			g.Buckets = g.Buckets[1:]
		}
	case entry.BucketLast:
		if n > 0 {
			g.Buckets = g.Buckets[:n-1]
		}
	default:
		i := 0
		for i < n && entry.BucketID(g.Buckets[i]) != which {
			i++
		}
		if i == n {
			return entry.Entry{}, fmt.Errorf("group %d, bucket %d: %w", g.ID, which, ErrUnknownBucket)
		}
		g.Buckets = append(g.Buckets[:i:i], g.Buckets[i+1:]...)
	}
	p, id, err := encodeGroup(g)
	if err != nil {
		return entry.Entry{}, err
	}
	return entry.Entry{Kind: entry.KindGroup, ID: id, Payload: p, Opaque: opaque}, nil
}

// storedGroup decodes a stored group's payload for an edit.
func storedGroup(payload []byte) (g *entry.Group, opaque bool, err error) {
	msgs, err := entry.SplitMessages(payload)
	if err != nil {
		return nil, false, err
	}
	if g, err = decodeGroup(msgs, &opaque); err != nil {
		return nil, false, fmt.Errorf("canon: stored group: %w", err)
	}
	return g, opaque, nil
}
