package entry

import (
	"errors"
	"fmt"
)

// The ofp15_bucket, the one reading of it (canon canonicalises buckets,
// ofmods checks them as vswitchd does, the dump splits them):
//
//	len(2) action_array_len(2) bucket_id(4) actions properties
//
// and its properties, each type(2) length(2) value, 8 bytes in all.
const (
	BucketPropWeight     = 0 // OFPGBPT15_WEIGHT: uint16, then 2 bytes of padding
	BucketPropWatchPort  = 1 // OFPGBPT15_WATCH_PORT: uint32
	BucketPropWatchGroup = 2 // OFPGBPT15_WATCH_GROUP: uint32
	// WatchAny is the watch_port and watch_group of a bucket that
	// watches none (OFPP_ANY, OFPG_ANY).
	WatchAny = 0xffffffff
)

// Bucket is one ofp15_bucket read in place: its slices share the bucket
// array's memory.
type Bucket struct {
	Raw     []byte // the whole bucket, capacity its length
	ID      uint32
	Actions []byte
	Props   []byte
}

// NextBucket reads the bucket at the start of the bucket array b and
// returns it with the rest of the array. It does not allocate unless it
// fails.
func NextBucket(b []byte) (bk Bucket, rest []byte, err error) {
	if len(b) < bucketFixed {
		return Bucket{}, nil, fmt.Errorf("truncated (%d bytes)", len(b))
	}
	n, alen := int(be.Uint16(b)), int(be.Uint16(b[2:]))
	if n < bucketFixed || n > len(b) || bucketFixed+alen > n {
		return Bucket{}, nil, fmt.Errorf("length %d (actions %d) does not fit in %d bytes", n, alen, len(b))
	}
	return Bucket{
		Raw: b[:n:n], ID: be.Uint32(b[4:]),
		Actions: b[bucketFixed : bucketFixed+alen : bucketFixed+alen], Props: b[bucketFixed+alen : n : n],
	}, b[n:], nil
}

// BucketID returns the bucket_id of a bucket that NextBucket or
// SplitBuckets returned (or canon canonicalised).
func BucketID(b []byte) uint32 { return be.Uint32(b[4:]) }

// BucketProps are the properties of a bucket OVS knows.
type BucketProps struct {
	Weight    uint16
	HasWeight bool   // a weight property was present
	WatchPort uint32 // WatchAny when absent
	// WatchGroup is WatchAny when absent.
	WatchGroup uint32
}

// ReadBucketProps reads the properties of a bucket (Bucket.Props). It
// fails on a property that is truncated, not 8 bytes long or of a type OVS
// does not know; it does not allocate unless it fails.
func ReadBucketProps(p []byte) (BucketProps, error) {
	bp := BucketProps{WatchPort: WatchAny, WatchGroup: WatchAny}
	for len(p) > 0 {
		if len(p) < 4 {
			return bp, errors.New("truncated bucket property")
		}
		typ, n := be.Uint16(p), int(be.Uint16(p[2:]))
		if n != 8 || len(p) < 8 {
			return bp, fmt.Errorf("bucket property %d of length %d, want 8", typ, n)
		}
		switch typ {
		case BucketPropWeight:
			bp.Weight, bp.HasWeight = be.Uint16(p[4:]), true
		case BucketPropWatchPort:
			bp.WatchPort = be.Uint32(p[4:])
		case BucketPropWatchGroup:
			bp.WatchGroup = be.Uint32(p[4:])
		default:
			return bp, fmt.Errorf("bucket property type %d: OVS knows weight (0), watch_port (1) and watch_group (2)", typ)
		}
		p = p[8:]
	}
	return bp, nil
}
