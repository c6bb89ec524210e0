package ofmods

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// TestApplyAsTheSwitch holds Apply to vswitchd where they differed: the
// first cases are the disagreements reported (numbered as reported), the
// named ones what fixing them brought up (vswitchd 3.1's
// ofputil_decode_flow_mod, ofputil_decode_group_mod, handle_meter_mod,
// modify_group_start).
func TestApplyAsTheSwitch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sb := startSwitch(ctx, t)
	raw := func(line string, at int, v uint32) []byte {
		b := encode(t, line)
		binary.BigEndian.PutUint32(b[at:], v)
		return b
	}
	for i, c := range []struct {
		sc   scenario
		msgs [][]byte
	}{
		// 1. ovs-ofctl del-flows --strict without table= sends OFPTT_ALL;
		// vswitchd deletes the flow of that priority and match in every table.
		{scenario{check: wantNet([]decl{flowDecl(mod, f1)}, nil, nil, []int{0})},
			[][]byte{encode(t, "del-flows --strict table=255,priority=10,in_port=1")}},
		// 2. A MODIFY names one table: vswitchd refuses OFPTT_ALL.
		{scenario{refused: &refusal{0, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_TABLE_ID}},
			[][]byte{encode(t, "mod-flows table=255,cookie=0x15/-1,actions=output:8")}},
		// 3. out_port and out_group filter deletes only: a modify ignores them.
		{scenario{check: wantNet(nil, []decl{flowDecl(mod, "cookie=0x26,table=1,priority=30,tcp,actions=drop")}, []int{0}, nil)},
			[][]byte{encode(t, "mod-flows --strict table=1,priority=30,tcp,out_port=2,actions=drop")}},
		{scenario{switchTouchesOther: true, check: wantNet(nil, []decl{
			flowDecl(mod, "cookie=0x15,table=1,priority=10,in_port=1,actions=drop"),
			flowDecl(mod, "cookie=0x25,table=1,priority=20,in_port=2,actions=drop"),
			flowDecl(mod, "cookie=0x26,table=1,priority=30,tcp,actions=drop"),
		}, []int{0, 0, 0}, nil)},
			[][]byte{encode(t, "mod-flows table=1,out_group=1,actions=drop")}},
		// 4. Tables vswitchd does not let a controller write.
		{scenario{refused: &refusal{0, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_TABLE_ID}},
			[][]byte{func() []byte { b := encode(t, "add-flow table=3,priority=1,actions=drop"); b[offTable] = 255; return b }()}},
		{scenario{refused: &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "add-flow table=254,priority=0,actions=drop")}},
		// 5. Meter ids vswitchd refuses.
		{scenario{refused: &refusal{0, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER}},
			[][]byte{raw("add-meter meter=3,pktps,bands=type=drop,rate=1", offModID, 0)}},
		{scenario{refused: &refusal{0, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER}},
			[][]byte{raw("add-meter meter=3,pktps,bands=type=drop,rate=1", offModID, 0xffff0001)}},
		{scenario{refused: &refusal{0, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER}},
			[][]byte{raw("add-meter meter=3,pktps,bands=type=drop,rate=1", offModID, openflow15.M_ALL)}},
		{scenario{refused: &refusal{0, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER}},
			[][]byte{raw("mod-meter meter=1,pktps,bands=type=drop,rate=1", offModID, openflow15.M_ALL)}},
		// 6. A REMOVE_BUCKET carries no buckets.
		{scenario{refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET}},
			[][]byte{func() []byte {
				b := encode(t, "insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:1,actions=output:5")
				binary.BigEndian.PutUint16(b[offModCmd:], groupRemove)
				binary.BigEndian.PutUint32(b[offBucketCmd:], 0)
				return b
			}()}},
		// 7. A match without its prerequisites.
		{scenario{refused: &refusal{0, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ}},
			[][]byte{func() []byte {
				fm := openflow15.NewFlowMod()
				fm.Command, fm.TableId = openflow15.FC_MODIFY, 1
				fm.Match.AddField(*openflow15.NewTcpDstField(80))
				b, err := fm.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				return b
			}()}},
		// 8. INSERT_BUCKET after a bucket id: vswitchd inserts after it.
		{scenario{check: wantNet(nil, []decl{{mod, 2, "group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:1,actions=output:2"}}, []int{0}, nil)},
			[][]byte{encode(t, "insert-buckets group_id=1,command_bucket_id=0,bucket=bucket_id:5,actions=output:5")}},
		// 9. ovs-ofctl insert-buckets sends type all whatever the group's.
		{scenario{check: wantNet(nil, []decl{{mod, 2, "group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:1,weight:50,actions=output:4,bucket=bucket_id:5,weight:0,actions=output:5"}}, []int{0}, nil)},
			[][]byte{encode(t, "insert-buckets group_id=2,command_bucket_id=last,bucket=bucket_id:5,actions=output:5")}},

		// 10. ovn-controller's dec_ttl(): NXAST_DEC_TTL_CNT_IDS without
		// controller ids is stored as sent, not as OFPAT_DEC_NW_TTL.
		{scenario{name: "dec_ttl() as ovn-controller sends it", check: wantNet(nil, []decl{flowDecl(mod, "table=3,priority=7,ip,actions=dec_ttl(),output:1")}, []int{0}, nil)},
			[][]byte{withActions(t, "add-flow table=3,priority=7,ip,actions=drop", "ffff0010000023200015000000000000"+"00000010000000010000000000000000")}},
		{scenario{name: "dec_ttl and dec_ttl(0) stay apart", check: wantNet(nil, []decl{
			flowDecl(mod, "table=3,priority=8,ip,actions=dec_ttl,output:1"),
			flowDecl(mod, "table=3,priority=9,ip,actions=dec_ttl(0),output:1"),
		}, []int{0, 1}, nil)},
			[][]byte{encode(t, "add-flow table=3,priority=8,ip,actions=dec_ttl,output:1"), encode(t, "add-flow table=3,priority=9,ip,actions=dec_ttl(0),output:1")}},

		// Flows.
		{scenario{name: "strict delete of every table with the flow in two", check: wantNet([]decl{flowDecl(mod, f1)}, nil, nil, []int{1})},
			[][]byte{encode(t, "add-flow table=2,priority=10,in_port=1,actions=drop"), encode(t, "del-flows --strict priority=10,in_port=1")}},
		{scenario{name: "strict delete of every table restricted by out_port", check: wantNet([]decl{flowDecl(mod, f3)}, nil, nil, []int{1})},
			[][]byte{encode(t, "del-flows --strict priority=30,tcp,out_port=2"), encode(t, "del-flows --strict priority=30,tcp,out_port=3")}},
		{scenario{name: "strict delete of every table restricted by a cookie", check: wantNet(nil, nil, nil, nil)},
			[][]byte{encode(t, "del-flows --strict priority=10,in_port=1,cookie=0x25/-1")}},
		{scenario{name: "strict modify of every table", refused: &refusal{0, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_TABLE_ID}},
			[][]byte{encode(t, "mod-flows --strict priority=10,in_port=1,actions=drop")}},
		{scenario{name: "unknown command of every table", refused: &refusal{0, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_TABLE_ID}},
			[][]byte{func() []byte { b := encode(t, "del-flows table=255"); b[offCommand] = 9; return b }()}},
		{scenario{name: "modify in the hidden table", refused: &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "mod-flows table=254,actions=drop")}},
		{scenario{name: "strict modify in the hidden table", refused: &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "mod-flows --strict table=254,priority=0,actions=drop")}},
		// vswitchd's hidden table holds read-only flows of its own
		// (priority=0,reg0=1..3, one sending to the controller): a delete
		// that selects them and nothing else is refused.
		{scenario{name: "delete in the hidden table", refused: &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "del-flows table=254")}},
		{scenario{name: "delete in the hidden table by out_port", refused: &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "del-flows table=254,reg0=0x1/0x1,out_port=4294967293")}},
		{scenario{name: "strict delete in the hidden table", refused: &refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "del-flows --strict table=254,priority=0"), encode(t, "del-flows --strict table=254,priority=0,reg0=0x2")}},
		{scenario{name: "delete in the hidden table that selects none of its flows", check: wantNet(nil, nil, nil, nil)},
			[][]byte{
				encode(t, "del-flows table=254,reg0=0x4"), encode(t, "del-flows table=254,ip"), encode(t, "del-flows table=254,cookie=0x1/0x1"),
				encode(t, "del-flows table=254,out_port=4294967294"), encode(t, "del-flows --strict table=254,priority=0,reg0=0x1,out_port=2"),
			}},
		{scenario{name: "delete by cookie 0 that selects only vswitchd's flows", refused: &refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "del-flows cookie=0/-1,reg0=0x4"), encode(t, "del-flows cookie=0/-1,reg0=0x3")}},
		{scenario{name: "strict delete by cookie 0 that selects only vswitchd's flow", refused: &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM}},
			[][]byte{encode(t, "del-flows --strict cookie=0/-1,priority=0,reg0=0x1")}},
		{scenario{name: "delete by cookie 0", check: wantNet([]decl{flowDecl(mod, f0), flowDecl(mod, f6)}, nil, nil, []int{0, 0})},
			[][]byte{encode(t, "del-flows cookie=0/-1")}},
		{scenario{name: "modify whose actions vswitchd refuses selects nothing", refused: &refusal{0, 0, 0}},
			[][]byte{encode(t, "mod-flows table=7,actions=goto_table:3")}},
		{scenario{name: "modify with out_port and out_group selects by cookie", switchTouchesOther: true, check: wantNet(nil, []decl{
			flowDecl(mod, "cookie=0x15,table=1,priority=10,in_port=1,actions=drop"),
		}, []int{0}, nil)},
			[][]byte{func() []byte {
				b := encode(t, "mod-flows table=1,cookie=0x15/-1,out_port=9,out_group=7,actions=drop")
				return b
			}()}},
		{scenario{name: "strict modify with nw_dst before eth_type", refused: &refusal{0, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ}},
			[][]byte{flowMod(t, openflow15.FC_MODIFY_STRICT, 2, 5, *openflow15.NewIpv4DstField(net.IPv4(10, 0, 0, 0), &mask8), *openflow15.NewEthTypeField(0x0800))}},
		{scenario{name: "add with nw_dst before eth_type", refused: &refusal{0, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ}},
			[][]byte{flowMod(t, openflow15.FC_ADD, 4, 5, *openflow15.NewIpv4DstField(net.IPv4(10, 0, 0, 1), nil), *openflow15.NewEthTypeField(0x0800))}},
		{scenario{name: "delete with tcp_dst alone", refused: &refusal{0, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ}},
			[][]byte{flowMod(t, openflow15.FC_DELETE, 1, 0, *openflow15.NewTcpDstField(80))}},
		{scenario{name: "add with vlan_pcp and no VLAN header", refused: &refusal{0, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ}},
			[][]byte{flowMod(t, openflow15.FC_ADD, 4, 5, *openflow15.NewVlanPcpField(3))}},
		{scenario{name: "modify with fields in an order of their own", check: wantNet(nil, []decl{
			flowDecl(mod, "cookie=0x15,table=2,priority=5,importance=5,ip,nw_dst=10.0.0.0/8,actions=drop"),
		}, []int{0}, nil)},
			[][]byte{flowMod(t, openflow15.FC_MODIFY, 2, 0, *openflow15.NewEthTypeField(0x0800), *openflow15.NewIpv4DstField(net.IPv4(10, 0, 0, 0), &mask8))}},

		// Groups.
		{scenario{name: "insert after the last bucket by its id", check: wantNet(nil, []decl{{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6"}}, []int{0}, nil)},
			[][]byte{encode(t, "insert-buckets group_id=1,command_bucket_id=1,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6")}},
		{scenario{name: "insert after an inserted bucket", check: wantNet(nil, []decl{{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6,bucket=bucket_id:1,actions=output:2"}}, []int{1}, nil)},
			[][]byte{encode(t, "insert-buckets group_id=1,command_bucket_id=0,bucket=bucket_id:5,actions=output:5"), encode(t, "insert-buckets group_id=1,command_bucket_id=5,bucket=bucket_id:6,actions=output:6")}},
		{scenario{name: "insert after an unknown bucket", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_BUCKET}},
			[][]byte{encode(t, "insert-buckets group_id=1,command_bucket_id=7,bucket=bucket_id:5,actions=output:5")}},
		{scenario{name: "insert a bucket id the group holds", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BUCKET_EXISTS}},
			[][]byte{encode(t, "insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:1,actions=output:5")}},
		{scenario{name: "insert two buckets of one id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET}},
			[][]byte{func() []byte {
				b := encode(t, "insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6")
				second := groupModMin + int(binary.BigEndian.Uint16(b[groupModMin:]))
				binary.BigEndian.PutUint32(b[second+4:], 5)
				return b
			}()}},
		{scenario{name: "insert into a select group as a select group mod", check: wantNet(nil, []decl{{mod, entry.KindGroup, "group_id=2,type=select,bucket=bucket_id:5,weight:1,actions=output:5,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:1,weight:50,actions=output:4"}}, []int{0}, nil)},
			[][]byte{func() []byte {
				// No weight property: the type sent gives the default.
				b := encode(t, "insert-buckets group_id=2,command_bucket_id=first,bucket=bucket_id:5,actions=output:5")
				b[offGroupType] = openflow15.GT_SELECT
				return b
			}()}},
		{scenario{name: "insert two buckets as an indirect group mod", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_INVALID_GROUP}},
			[][]byte{func() []byte {
				b := encode(t, "insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6")
				b[offGroupType] = openflow15.GT_INDIRECT
				return b
			}()}},
		{scenario{name: "insert at command_bucket_id all", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET}},
			[][]byte{raw("insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:5,actions=output:5", offBucketCmd, entry.BucketAll)}},
		{scenario{name: "remove at a reserved command_bucket_id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET}},
			[][]byte{raw("remove-buckets group_id=1,command_bucket_id=0", offBucketCmd, 0xffffff01)}},
		{scenario{name: "add with a command_bucket_id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET}},
			[][]byte{raw("add-group group_id=3,type=all,bucket=bucket_id:0,actions=output:7", offBucketCmd, 0)}},
		{scenario{name: "delete with a command_bucket_id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_BUCKET}},
			[][]byte{raw("del-groups group_id=1", offBucketCmd, entry.BucketLast)}},
		{scenario{name: "add of group type 7", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BAD_TYPE}},
			[][]byte{func() []byte { b := encode(t, "add-group group_id=3,type=all"); b[offGroupType] = 7; return b }()}},
		{scenario{name: "add of an indirect group of two buckets", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_INVALID_GROUP}},
			[][]byte{func() []byte {
				b := encode(t, "add-group group_id=3,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2")
				b[offGroupType] = openflow15.GT_INDIRECT
				return b
			}()}},
		{scenario{name: "add of an all group watching a port", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_WATCH_UNSUPPORTED}},
			[][]byte{func() []byte {
				b := encode(t, "add-group group_id=3,type=ff,bucket=bucket_id:0,watch_port:1,actions=output:1")
				b[offGroupType] = openflow15.GT_ALL
				return b
			}()}},
		{scenario{name: "add of a fast failover group watching nothing", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_INVALID_GROUP}},
			[][]byte{func() []byte {
				b := encode(t, "add-group group_id=3,type=all,bucket=bucket_id:0,actions=output:1")
				b[offGroupType] = openflow15.GT_FF
				return b
			}()}},
		{scenario{name: "add of an all group with weights", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_INVALID_GROUP}},
			[][]byte{func() []byte {
				b := encode(t, "add-group group_id=3,type=select,bucket=bucket_id:0,weight:5,actions=output:1")
				b[offGroupType] = openflow15.GT_ALL
				return b
			}()}},
		{scenario{name: "add of a reserved group id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_INVALID_GROUP}},
			[][]byte{raw("add-group group_id=3,type=all,bucket=bucket_id:0,actions=output:7", offModID, 0xffffff01)}},
		{scenario{name: "add or modify of a reserved group id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_INVALID_GROUP}},
			[][]byte{raw("add-or-mod-group group_id=3,type=all,bucket=bucket_id:0,actions=output:7", offModID, openflow15.OFPG_ALL)}},
		{scenario{name: "modify of a reserved group id", refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP}},
			[][]byte{raw("mod-group group_id=3,type=all,bucket=bucket_id:0,actions=output:7", offModID, 0xffffff01)}},

		// Meters.
		{scenario{name: "modify of meter 0", refused: &refusal{0, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER}},
			[][]byte{raw("mod-meter meter=1,pktps,bands=type=drop,rate=1", offModID, 0)}},
		{scenario{name: "delete of meter 0", check: wantNet(nil, nil, nil, nil)},
			[][]byte{raw("del-meters meter=1", offModID, 0)}},
		{scenario{name: "add of the controller meter", check: wantNet(nil, []decl{{mod, entry.KindMeter, "meter=controller,pktps,bands=type=drop,rate=1"}}, []int{0}, nil)},
			[][]byte{raw("add-meter meter=3,pktps,bands=type=drop,rate=1", offModID, openflow15.M_CONTROLLER)}},
		{scenario{name: "add of the largest meter id", check: wantNet(nil, []decl{{mod, entry.KindMeter, "meter=4294901760,pktps,bands=type=drop,rate=1"}}, []int{0}, nil)},
			[][]byte{raw("add-meter meter=3,pktps,bands=type=drop,rate=1", offModID, openflow15.M_MAX)}},
	} {
		name := c.sc.name
		if name == "" {
			name = fmt.Sprint(i)
		}
		t.Run(name, func(t *testing.T) {
			for j, m := range c.msgs {
				t.Logf("message %d: %x", j, m)
			}
			runScenario(ctx, t, sb, fmt.Sprintf("bug%d", i), c.sc, c.msgs)
		})
	}
}

// mask8 is the netmask of a /8.
var mask8 = net.IPv4(255, 0, 0, 0)

// flowMod encodes a FLOW_MOD as libOpenflow does, its match fields in the
// order given.
func flowMod(t *testing.T, cmd uint8, table uint8, priority uint16, fields ...openflow15.MatchField) []byte {
	t.Helper()
	fm := openflow15.NewFlowMod()
	fm.Command, fm.TableId, fm.Priority = cmd, table, priority
	for _, f := range fields {
		fm.Match.AddField(f)
	}
	b, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withActions returns the FLOW_MOD of line (which has no instructions)
// with an apply_actions instruction of the actions in hex.
func withActions(t *testing.T, line, actions string) []byte {
	t.Helper()
	acts, err := hex.DecodeString(actions)
	if err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(encode(t, line))
	b = binary.BigEndian.AppendUint16(b, 4) // OFPIT_APPLY_ACTIONS
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(acts)))
	b = append(append(b, 0, 0, 0, 0), acts...)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}
