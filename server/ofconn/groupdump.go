package ofconn

import (
	"context"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
)

// DumpGroups returns every group.
//
// It does not ask for every group's description at once: OVS 3.1 aborts
// (assertion start_ofs <= UINT16_MAX in ofpmp_postappend) when a group
// description larger than 64 KiB is followed by another in the same reply,
// taking the whole switch down. So:
//
//  1. GROUP_STATS for all groups gives the group ids (a stats entry is 40
//     bytes and 16 per bucket, under 64 KiB for groups of up to 4,092
//     buckets, which canon enforces);
//  2. one GROUP_DESC request per group, all written at once with
//     consecutive xids and a barrier after them (completeGroupDesc reads past
//     a reply whose lengths wrapped and needs something to follow it);
//  3. the replies are read until every request has had its last one.
//
// A group deleted between 1 and 2 comes back as an empty reply and is
// missing from the result, as it is from the switch.
func (c *Conn) DumpGroups(ctx context.Context) ([]Group, error) {
	var ids []uint32
	err := c.multipart(ctx, openflow15.MultipartType_GroupStats, openflow15.NewGroupMultipartRequest(openflow15.OFPG_ALL), minGroupStats, func(raw []byte) error {
		ids = append(ids, be.Uint32(raw[4:8]))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump groups: stats: %w", err)
	}
	groups, err := c.groupDescs(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump groups: %w", err)
	}
	return groups, nil
}

// groupDescs asks for each group's description alone, all requests written
// at once, with a barrier after them for completeGroupDesc.
func (c *Conn) groupDescs(ctx context.Context, ids []uint32) ([]Group, error) {
	bodies := make([]util.Message, len(ids))
	for i, id := range ids {
		bodies[i] = openflow15.NewGroupMultipartRequest(id)
	}
	groups := make([]Group, 0, len(ids))
	err := c.multiparts(ctx, openflow15.MultipartType_GroupDesc, bodies, true, minGroupDesc, func(raw []byte) error {
		groups = append(groups, decodeGroup(raw))
		return nil
	})
	return groups, err
}

// minGroupStats is the fixed part of an ofp_group_stats entry.
const minGroupStats = 40
