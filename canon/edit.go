package canon

import (
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
)

// Edits of a stored entry: what a controller's MODIFY, INSERT_BUCKET and
// REMOVE_BUCKET do to an entry the switch already holds, as vswitchd
// applies them. The result is canonical, as Decode's.

// ErrUnknownBucket is returned by RemoveBuckets for a bucket id the group
// does not hold (vswitchd: OFPGMFC_UNKNOWN_BUCKET).
var ErrUnknownBucket = errors.New("canon: no bucket of that id")

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
	mlen := int(be.Uint16(fm[50:]))
	end := flowModFixed + pad8(mlen)
	if mlen < 4 || end > len(fm) {
		return 0, fmt.Errorf("match of %d bytes does not fit in a FLOW_MOD of %d", mlen, len(fm))
	}
	return end, nil
}

// InsertBuckets returns the canonical entry of the stored group payload
// with the buckets of an INSERT_BUCKET (mod) added at its command_bucket_id,
// FIRST or LAST.
func InsertBuckets(payload, mod []byte) (entry.Entry, error) {
	joined, opaque, err := Join(payload, mod)
	if err != nil {
		return entry.Entry{}, err
	}
	_, id, err := entry.Identify(entry.KindGroup, joined)
	if err != nil {
		return entry.Entry{}, err
	}
	return entry.Entry{Kind: entry.KindGroup, ID: id, Payload: joined, Opaque: opaque}, nil
}

// RemoveBuckets returns the canonical entry of the stored group payload
// without the buckets a REMOVE_BUCKET's command_bucket_id names: FIRST,
// LAST, ALL or one bucket id (ErrUnknownBucket when the group has none of
// it). Removing the first or last bucket of an empty group leaves it as it
// is, as in vswitchd.
func RemoveBuckets(payload []byte, which uint32) (entry.Entry, error) {
	msgs, err := entry.SplitMessages(payload)
	if err != nil {
		return entry.Entry{}, err
	}
	var opaque bool
	g, err := decodeGroup(msgs, &opaque)
	if err != nil {
		return entry.Entry{}, fmt.Errorf("canon: stored group: %w", err)
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
		for i < n && be.Uint32(g.Buckets[i][4:]) != which {
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
