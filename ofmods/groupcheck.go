package ofmods

import (
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// OpenFlow 1.5 group numbers checkGroupMod checks against.
const (
	bucketMax = 0xffffff00
	ofpp11Max = 0xffffff00 // OFPP11_MAX: ports from here are OVS's reserved ones
	ofppMax   = 0xff00     // OFPP_MAX: the last port number OVS takes as is
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
	gm, lenErr := entry.ReadGroupMod(m)
	cmd, typ, which := gm.Command, gm.Type, gm.CommandBucket
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
	if lenErr != nil {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, lenErr)
	}
	type bucket struct {
		weight                bool // a nonzero weight (that of the type when none is sent)
		watchPort, watchGroup uint32
		known                 bool // its properties were read
	}
	var buckets []bucket
	seen, dup := map[uint32]bool{}, false
	for b := gm.Buckets; len(b) > 0; {
		eb, rest, err := entry.NextBucket(b)
		if err != nil {
			return badBucket("bucket %d: %w", len(buckets), err)
		}
		id := eb.ID
		bk := bucket{weight: typ == openflow15.GT_SELECT, watchPort: entry.WatchAny, watchGroup: entry.WatchAny}
		if bp, err := entry.ReadBucketProps(eb.Props); err == nil {
			bk.watchPort, bk.watchGroup, bk.known = bp.WatchPort, bp.WatchGroup, true
			if bp.HasWeight {
				bk.weight = bp.Weight != 0
			}
		}
		switch {
		case bk.known && bk.watchPort != entry.WatchAny && bk.watchPort >= ofppMax && bk.watchPort < ofpp11Max:
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_WATCH, fmt.Errorf("bucket %d: watch_port %#x", len(buckets), bk.watchPort))
		case id > bucketMax:
			return badBucket("bucket id %#x out of range", id)
		}
		buckets = append(buckets, bk)
		b = rest
		dup = dup || seen[id]
		seen[id] = true
	}
	if dup {
		return badBucket("two buckets of one id")
	}
	if cmd == groupRemove && len(gm.Props) > 0 {
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
		live := bk.watchPort != entry.WatchAny || bk.watchGroup != entry.WatchAny
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
