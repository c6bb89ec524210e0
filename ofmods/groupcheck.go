package ofmods

import (
	"encoding/binary"
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// OpenFlow 1.5 group numbers checkGroupMod reads.
const (
	offGroupType    = 10
	offBucketLen    = 16
	bucketHead      = 8 // ofp15_bucket: len, action_array_len, bucket_id
	bucketMax       = 0xffffff00
	bucketPropWght  = 0
	bucketPropPort  = 1
	bucketPropGroup = 2
	watchAny        = 0xffffffff
	ofpp11Max       = 0xffffff00 // OFPP11_MAX: ports from here are OVS's reserved ones
	ofppMax         = 0xff00     // OFPP_MAX: the last port number OVS takes as is
)

// groupCommandKnown reports whether vswitchd knows cmd, a GROUP_MOD command.
func groupCommandKnown(cmd uint16) bool {
	switch cmd {
	case groupAdd, groupModify, groupDelete, groupInsert, groupRemove, groupAddOrMod:
		return true
	}
	return false
}

// checkGroupMod refuses, as vswitchd's ofputil_decode_group_mod does before
// it looks at the switch's groups, a GROUP_MOD m of a known command whose
// command_bucket_id, bucket framing, bucket ids, type or buckets do not
// suit it (ofputil_pull_ofp15_group_mod and ofputil_check_group_mod). What
// it cannot tell (an action, a malformed bucket property) it leaves to the
// decoders that follow.
func checkGroupMod(i int, m []byte) error {
	be := binary.BigEndian
	cmd, typ, which := be.Uint16(m[offModCmd:]), m[offGroupType], be.Uint32(m[offBucketCmd:])
	badBucket := func(format string, args ...any) error {
		return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET, fmt.Errorf(format, args...))
	}
	ok := which == entry.BucketAll
	switch cmd {
	case groupInsert:
		ok = which <= bucketMax || which == entry.BucketFirst || which == entry.BucketLast
	case groupRemove:
		ok = ok || which <= bucketMax || which == entry.BucketFirst || which == entry.BucketLast
	}
	if !ok {
		return badBucket("command_bucket_id %#x does not suit GROUP_MOD command %d", which, cmd)
	}
	blen := int(be.Uint16(m[offBucketLen:]))
	if blen > len(m)-groupModMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("bucket array of %d bytes in a GROUP_MOD of %d", blen, len(m)))
	}
	type bucket struct {
		weight                bool // a nonzero weight (that of the type when none is sent)
		watchPort, watchGroup uint32
		known                 bool // its properties were read
	}
	var buckets []bucket
	seen, dup := map[uint32]bool{}, false
	for b := m[groupModMin : groupModMin+blen]; len(b) > 0; {
		if len(b) < bucketHead {
			return badBucket("buckets end with %d bytes left over", len(b))
		}
		n, alen, id := int(be.Uint16(b)), int(be.Uint16(b[2:])), be.Uint32(b[4:])
		switch {
		case n < bucketHead:
			return badBucket("bucket length %d", n)
		case n > len(b):
			return badBucket("bucket length %d exceeds the %d bytes of buckets left", n, len(b))
		case alen > n-bucketHead:
			return badBucket("bucket actions of %d bytes in a bucket of %d", alen, n)
		}
		bk := bucket{weight: typ == openflow15.GT_SELECT, watchPort: watchAny, watchGroup: watchAny, known: true}
		for p := b[bucketHead+alen : n]; len(p) > 0; {
			if len(p) < 8 || be.Uint16(p[2:]) != 8 {
				bk.known = false
				break
			}
			switch be.Uint16(p) {
			case bucketPropWght:
				bk.weight = be.Uint16(p[4:]) != 0
			case bucketPropPort:
				bk.watchPort = be.Uint32(p[4:])
			case bucketPropGroup:
				bk.watchGroup = be.Uint32(p[4:])
			default:
				bk.known = false
			}
			p = p[8:]
		}
		switch {
		case bk.known && bk.watchPort != watchAny && bk.watchPort >= ofppMax && bk.watchPort < ofpp11Max:
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_WATCH, fmt.Errorf("bucket %d: watch_port %#x", len(buckets), bk.watchPort))
		case id > bucketMax:
			return badBucket("bucket id %#x out of range", id)
		}
		buckets = append(buckets, bk)
		b = b[n:]
		dup = dup || seen[id]
		seen[id] = true
	}
	if dup {
		return badBucket("two buckets of one id")
	}
	if cmd == groupRemove && len(m) > groupModMin+blen {
		return askSwitch(i, errors.New("REMOVE_BUCKET with group properties"))
	}
	// ofputil_check_group_mod, with the type the message names.
	refuseGroup := func(code uint16, format string, args ...any) error {
		return refuse(i, openflow15.ET_GROUP_MOD_FAILED, code, fmt.Errorf(format, args...))
	}
	switch {
	case typ > openflow15.GT_FF:
		return refuseGroup(openflow15.GMFC_BAD_TYPE, "group type %d", typ)
	case typ == openflow15.GT_INDIRECT && cmd != groupDelete && len(buckets) != 1:
		return refuseGroup(openflow15.GMFC_INVALID_GROUP, "an indirect group mod with %d buckets, want 1", len(buckets))
	case cmd == groupRemove && len(buckets) != 0:
		return badBucket("REMOVE_BUCKET with %d buckets: it names the buckets it removes by command_bucket_id", len(buckets))
	}
	for k, bk := range buckets {
		if !bk.known {
			continue
		}
		live := bk.watchPort != watchAny || bk.watchGroup != watchAny
		switch {
		case bk.weight && typ != openflow15.GT_SELECT && cmd != groupInsert:
			return refuseGroup(openflow15.GMFC_INVALID_GROUP, "bucket %d: a weight in a group of type %d", k, typ)
		case live && (typ == openflow15.GT_ALL || typ == openflow15.GT_INDIRECT):
			return refuseGroup(openflow15.GMFC_WATCH_UNSUPPORTED, "bucket %d: watch_port or watch_group in a group of type %d", k, typ)
		case !live && typ == openflow15.GT_FF:
			return refuseGroup(openflow15.GMFC_INVALID_GROUP, "bucket %d: a fast failover bucket without watch_port or watch_group", k)
		}
	}
	return nil
}
