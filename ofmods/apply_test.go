package ofmods

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"
	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The module Apply runs for, and the one that owns the rest of the bridge.
const (
	mod   = "m"
	other = "other"
)

// decl is one stored entry, in ovs-ofctl syntax.
type decl struct {
	module string
	kind   entry.Kind
	text   string
}

// initial is the bridge every scenario starts from. "other" shares table 1
// with "m" and has a group and a meter of its own; the cookies let a mask
// select some of m's flows and none of other's.
var initial = []decl{
	{mod, entry.KindMeter, "meter=1,pktps,bands=type=drop,rate=1000"},
	{mod, entry.KindMeter, "meter=2,kbps,burst,bands=type=drop,rate=5000,burst_size=100"},
	{other, entry.KindMeter, "meter=100,pktps,bands=type=drop,rate=10"},
	{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2"},
	{mod, entry.KindGroup, "group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:1,weight:50,actions=output:4"},
	{other, entry.KindGroup, "group_id=100,type=all,bucket=bucket_id:0,actions=output:5"},
	{mod, entry.KindFlow, "table=0,priority=100,ip,actions=meter:1,goto_table:1"},
	{mod, entry.KindFlow, "cookie=0x15,table=1,priority=10,in_port=1,actions=output:2"},
	{mod, entry.KindFlow, "cookie=0x25,table=1,priority=20,in_port=2,actions=group:1"},
	{mod, entry.KindFlow, "cookie=0x26,table=1,priority=30,tcp,actions=output:3"},
	{mod, entry.KindFlow, "cookie=0x15,table=2,priority=5,importance=5,ip,nw_dst=10.0.0.0/8,actions=group:2"},
	{mod, entry.KindFlow, "cookie=0x35,table=2,priority=6,arp,actions=meter:2,output:2"},
	{mod, entry.KindFlow, "table=3,priority=100,ip,reg14=0x1,metadata=0x2,actions=ct(table=4,zone=NXM_NX_REG13[0..15]),load:0x1->NXM_NX_REG10[3]"},
	{other, entry.KindFlow, "cookie=0xb1,table=1,priority=40,udp,actions=output:2"},
	{other, entry.KindFlow, "cookie=0xb2,table=10,priority=1,actions=meter:100,group:100"},
}

// memStore is a Store over entries in memory: one bridge, every module;
// Each yields module's, in declaration order.
type memStore struct {
	module  string
	entries []entry.Entry
}

func (s *memStore) Get(kind entry.Kind, id []byte) (entry.Entry, bool, error) {
	for _, e := range s.entries {
		if e.Kind == kind && bytes.Equal(e.ID, id) {
			return e, true, nil
		}
	}
	return entry.Entry{}, false, nil
}

func (s *memStore) Each(kind entry.Kind, fn func(entry.Entry) error) error {
	for _, e := range s.entries {
		if e.Kind == kind && e.Module == s.module {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// owner returns who owns an identity in the store, "" for nobody.
func (s *memStore) owner(kind entry.Kind, id []byte) string {
	e, _, _ := s.Get(kind, id)
	return e.Module
}

// parseDecl returns the canonical entry of d.
func parseDecl(t testing.TB, d decl) entry.Entry {
	t.Helper()
	p, id, err := canon.Parse(d.kind, d.text)
	if err != nil {
		t.Fatalf("parse %s %q: %v", d.kind, d.text, err)
	}
	return entry.Entry{Kind: d.kind, Module: d.module, ID: id, Payload: p}
}

func newStore(t testing.TB, decls []decl) *memStore {
	t.Helper()
	st := &memStore{module: mod}
	for _, d := range decls {
		st.entries = append(st.entries, parseDecl(t, d))
	}
	return st
}

// OpenFlow 1.5 numbers the encoder writes.
const (
	anyPort        = 0xffffffff
	anyGroup       = 0xffffffff
	offCookieMask  = 16
	offOutPort     = 36
	offOutGroup    = 40
	flowModFixed   = 48 // the match starts here
	offMatchLength = 50
)

// encode turns one line in the words of ovs-ofctl into the OpenFlow 1.5
// message a controller sends for it:
//
//	add-flow FLOW                  mod-flows [--strict] FLOW
//	del-flows [--strict] [FLOW]    add-group GROUP
//	mod-group GROUP                add-or-mod-group GROUP
//	del-groups [group_id=N]        insert-buckets GROUP (command_bucket_id=…)
//	remove-buckets group_id=N,command_bucket_id=…
//	add-meter METER                mod-meter METER
//	del-meters [meter=N]
//
// In a modify or delete, cookie=V/M is the cookie and mask the flows must
// match, cookie=V alone the cookie the message carries (mask 0), table
// defaults to all (OFPTT_ALL, as ovs-ofctl sends a delete), and out_port
// and out_group go in their fields.
func encode(t testing.TB, line string) []byte {
	t.Helper()
	verb, arg, _ := strings.Cut(line, " ")
	strict := strings.HasPrefix(arg, "--strict")
	arg = strings.TrimSpace(strings.TrimPrefix(arg, "--strict"))
	fail := func(err error) []byte {
		t.Helper()
		t.Fatalf("encode %q: %v", line, err)
		return nil
	}
	switch verb {
	case "add-flow":
		b, err := ofctl.ParseFlowBinary(arg)
		if err != nil {
			return fail(err)
		}
		return b
	case "mod-flows", "del-flows":
		cmd := map[string]uint8{"mod-flows": flowModify, "del-flows": flowDelete}[verb]
		if strict {
			cmd++ // MODIFY_STRICT and DELETE_STRICT follow their loose forms
		}
		b, err := flowSelector(arg, cmd)
		if err != nil {
			return fail(err)
		}
		return b
	case "add-group", "mod-group", "add-or-mod-group":
		p, _, err := canon.Parse(entry.KindGroup, arg)
		if err != nil {
			return fail(err)
		}
		return entry.WithCommand(p, map[string]uint16{"add-group": groupAdd, "mod-group": groupModify, "add-or-mod-group": groupAddOrMod}[verb])
	case "del-groups":
		id := uint32(openflow15.OFPG_ALL)
		if arg != "" {
			n, err := ofctl.ParseGroupID(arg)
			if err != nil {
				return fail(err)
			}
			id = n
		}
		return entry.DeleteGroup(binary.BigEndian.AppendUint32(nil, id))
	case "insert-buckets", "remove-buckets":
		b, err := bucketMod(verb, arg)
		if err != nil {
			return fail(err)
		}
		return b
	case "add-meter", "mod-meter":
		p, _, err := canon.Parse(entry.KindMeter, arg)
		if err != nil {
			return fail(err)
		}
		return entry.WithCommand(p, map[string]uint16{"add-meter": meterAdd, "mod-meter": meterModify}[verb])
	case "del-meters":
		id := uint32(openflow15.M_ALL)
		if arg != "" {
			n, err := ofctl.ParseMeterID(arg)
			if err != nil {
				return fail(err)
			}
			id = n
		}
		return entry.DeleteMeter(binary.BigEndian.AppendUint32(nil, id))
	}
	return fail(errors.New("unknown verb"))
}

// flowSelector encodes a FLOW_MOD MODIFY or DELETE (cmd) from flow text
// with the selector keys encode describes. A delete carries no
// instructions.
func flowSelector(text string, cmd uint8) ([]byte, error) {
	head, acts, hasActs := strings.Cut(text, "actions=")
	var keep []string
	table, cookie, cookieMask, outPort, outGroup := uint8(openflow15.OFPTT_ALL), uint64(0), uint64(0), uint32(anyPort), uint32(anyGroup)
	for kv := range strings.SplitSeq(head, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		var err error
		switch k {
		case "":
		case "table":
			var n uint64
			n, err = strconv.ParseUint(v, 0, 8)
			table = uint8(n)
		case "cookie":
			vs, ms, masked := strings.Cut(v, "/")
			if cookie, err = strconv.ParseUint(vs, 0, 64); err == nil && masked {
				cookieMask = ^uint64(0)
				if ms != "-1" {
					cookieMask, err = strconv.ParseUint(ms, 0, 64)
				}
			}
		case "out_port":
			var n uint64
			n, err = strconv.ParseUint(v, 0, 32)
			outPort = uint32(n)
		case "out_group":
			var n uint64
			n, err = strconv.ParseUint(v, 0, 32)
			outGroup = uint32(n)
		default:
			keep = append(keep, kv)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv, err)
		}
	}
	if !hasActs {
		acts = "drop"
	}
	b, err := ofctl.ParseFlowBinary(strings.Join(append(keep, "actions="+acts), ","))
	if err != nil {
		return nil, err
	}
	if cmd == flowDelete || cmd == flowDelStrict {
		mlen := int(binary.BigEndian.Uint16(b[offMatchLength:]))
		b = b[:flowModFixed+(mlen+7)/8*8]
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	}
	b[offTable], b[offCommand] = table, cmd
	binary.BigEndian.PutUint64(b[offCookie:], cookie)
	binary.BigEndian.PutUint64(b[offCookieMask:], cookieMask)
	binary.BigEndian.PutUint32(b[offOutPort:], outPort)
	binary.BigEndian.PutUint32(b[offOutGroup:], outGroup)
	return b, nil
}

// bucketMod encodes an INSERT_BUCKET (a group's text with
// command_bucket_id; type all unless given, as ovs-ofctl sends it) or a
// REMOVE_BUCKET (group_id and command_bucket_id).
func bucketMod(verb, text string) ([]byte, error) {
	var keep []string
	var which uint32
	hasType := false
	for kv := range strings.SplitSeq(text, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "command_bucket_id":
			switch v {
			case "first":
				which = entry.BucketFirst
			case "last":
				which = entry.BucketLast
			case "all":
				which = entry.BucketAll
			default:
				n, err := strconv.ParseUint(v, 0, 32)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", kv, err)
				}
				which = uint32(n)
			}
			continue
		case "type":
			hasType = true
		}
		keep = append(keep, kv)
	}
	if verb == "remove-buckets" {
		id, err := ofctl.ParseGroupID(strings.Join(keep, ","))
		if err != nil {
			return nil, err
		}
		b := make([]byte, groupModMin)
		b[0], b[1] = openflow15.VERSION, openflow15.Type_GroupMod
		binary.BigEndian.PutUint16(b[2:], groupModMin)
		binary.BigEndian.PutUint16(b[offModCmd:], groupRemove)
		binary.BigEndian.PutUint32(b[offModID:], id)
		binary.BigEndian.PutUint32(b[offBucketCmd:], which)
		return b, nil
	}
	if !hasType {
		keep = append([]string{"type=all"}, keep...)
	}
	p, _, err := canon.Parse(entry.KindGroup, strings.Join(keep, ","))
	if err != nil {
		return nil, err
	}
	p = entry.WithCommand(p, groupInsert)
	binary.BigEndian.PutUint32(p[offBucketCmd:], which)
	return p, nil
}

func encodeAll(t testing.TB, lines []string) [][]byte {
	t.Helper()
	msgs := make([][]byte, len(lines))
	for i, l := range lines {
		msgs[i] = encode(t, l)
	}
	return msgs
}

// refusal is what a scenario expects of a *Refusal.
type refusal struct {
	Index      int
	Type, Code uint16
}

// scenario is one change of a controller for module m over initial.
type scenario struct {
	name string
	msgs []string
	// refused is the expected refusal; nil: the change applies.
	refused *refusal
	// switchTouchesOther says that vswitchd applies the messages to
	// other's entries too: the switch has no modules, ofmods isolates.
	// Only m's part of the switch is compared then.
	switchTouchesOther bool
	// ownership marks a refusal the switch cannot make (it has no
	// modules): ofmods alone is checked.
	ownership bool
	// check adds assertions on the change.
	check func(t *testing.T, st *memStore, ch *Change)
}

// flowDecl is a flow of module in ovs-ofctl text.
func flowDecl(module, text string) decl { return decl{module, entry.KindFlow, text} }

// Initial flows by name, for the checks.
var (
	f0 = initial[6].text  // table 0, meter 1
	f1 = initial[7].text  // table 1 in_port=1, cookie 0x15
	f2 = initial[8].text  // table 1 in_port=2, group 1
	f3 = initial[9].text  // table 1 tcp
	f4 = initial[10].text // table 2 ip, group 2, importance 5
	f5 = initial[11].text // table 2 arp, meter 2
	f6 = initial[12].text // table 3, as ovn-controller writes them
	o1 = initial[13].text // other's, table 1 udp
)

func scenarios() []scenario {
	var reAddAll []string
	for _, d := range initial {
		if d.module == mod {
			reAddAll = append(reAddAll, map[entry.Kind]string{entry.KindFlow: "add-flow ", entry.KindGroup: "add-group ", entry.KindMeter: "add-meter "}[d.kind]+d.text)
		}
	}
	reconnect := append([]string{"del-flows", "del-groups", "del-meters"}, reAddAll...)
	// The same, with f3's actions changed and f5 not installed again.
	var reconnectChanged []string
	for _, l := range reconnect {
		switch l {
		case "add-flow " + f3:
			l = "add-flow cookie=0x26,table=1,priority=30,tcp,actions=output:9"
		case "add-flow " + f5:
			continue
		}
		reconnectChanged = append(reconnectChanged, l)
	}
	return []scenario{
		{
			name: "add flow group and meter",
			msgs: []string{
				"add-meter meter=3,kbps,bands=type=drop,rate=300",
				"add-group group_id=3,type=indirect,bucket=bucket_id:0,actions=output:7",
				"add-flow table=3,priority=1,ip,actions=meter:3,group:3",
			},
			check: wantNet(nil, []decl{
				{mod, entry.KindMeter, "meter=3,kbps,bands=type=drop,rate=300"},
				{mod, entry.KindGroup, "group_id=3,type=indirect,bucket=bucket_id:0,actions=output:7"},
				flowDecl(mod, "table=3,priority=1,ip,actions=meter:3,group:3"),
			}, []int{0, 1, 2}, nil),
		},
		{
			name:  "add replaces a stored flow of the same identity",
			msgs:  []string{"add-flow cookie=0x99,table=1,priority=10,in_port=1,actions=output:7"},
			check: wantNet(nil, []decl{flowDecl(mod, "cookie=0x99,table=1,priority=10,in_port=1,actions=output:7")}, []int{0}, nil),
		},
		{
			name:  "add of a flow as stored is put unchanged",
			msgs:  []string{"add-flow " + f1},
			check: wantNet(nil, []decl{flowDecl(mod, f1)}, []int{0}, nil),
		},
		{
			name: "modify with a cookie mask in one table",
			msgs: []string{"mod-flows table=1,cookie=0x05/0x0f,actions=output:9"},
			check: wantNet(nil, []decl{
				flowDecl(mod, "cookie=0x15,table=1,priority=10,in_port=1,actions=output:9"),
				flowDecl(mod, "cookie=0x25,table=1,priority=20,in_port=2,actions=output:9"),
			}, []int{0, 0}, nil),
		},
		{
			name:  "delete by a cookie in every table",
			msgs:  []string{"del-flows cookie=0x15/-1"},
			check: wantNet([]decl{flowDecl(mod, f1), flowDecl(mod, f4)}, nil, nil, []int{0, 0}),
		},
		{
			name: "modify by a loose match",
			msgs: []string{"mod-flows table=2,ip,actions=drop"},
			check: wantNet(nil, []decl{
				flowDecl(mod, "cookie=0x15,table=2,priority=5,importance=5,ip,nw_dst=10.0.0.0/8,actions=drop"),
			}, []int{0}, nil),
		},
		{
			name: "modify by a register in the match",
			msgs: []string{"mod-flows table=3,reg14=0x1,actions=drop"},
			check: wantNet(nil, []decl{
				flowDecl(mod, "table=3,priority=100,ip,reg14=0x1,metadata=0x2,actions=drop"),
			}, []int{0}, nil),
		},
		{
			name: "modify strict of a flow as ovn-controller writes them",
			msgs: []string{"mod-flows --strict table=3,priority=100,ip,reg14=0x1,metadata=0x2,actions=ct(commit,zone=NXM_NX_REG13[0..15]),resubmit(,5)"},
			check: wantNet(nil, []decl{
				flowDecl(mod, "table=3,priority=100,ip,reg14=0x1,metadata=0x2,actions=ct(commit,zone=NXM_NX_REG13[0..15]),resubmit(,5)"),
			}, []int{0}, nil),
		},
		{
			name: "modify strict keeps cookie and importance",
			msgs: []string{"mod-flows --strict cookie=0x77,table=2,priority=5,ip,nw_dst=10.0.0.0/8,actions=output:1"},
			check: wantNet(nil, []decl{
				flowDecl(mod, "cookie=0x15,table=2,priority=5,importance=5,ip,nw_dst=10.0.0.0/8,actions=output:1"),
			}, []int{0}, nil),
		},
		{
			name:  "modify strict of another priority selects nothing",
			msgs:  []string{"mod-flows --strict table=2,priority=6,ip,nw_dst=10.0.0.0/8,actions=drop"},
			check: wantNet(nil, nil, nil, nil),
		},
		{
			name:  "modify strict restricted by a cookie that differs",
			msgs:  []string{"mod-flows --strict table=1,priority=10,in_port=1,cookie=0x25/-1,actions=drop"},
			check: wantNet(nil, nil, nil, nil),
		},
		{
			name:  "modify strict restricted by the flow's cookie",
			msgs:  []string{"mod-flows --strict table=1,priority=10,in_port=1,cookie=0x15/-1,actions=drop"},
			check: wantNet(nil, []decl{flowDecl(mod, "cookie=0x15,table=1,priority=10,in_port=1,actions=drop")}, []int{0}, nil),
		},
		{
			name:  "modify that selects nothing adds nothing",
			msgs:  []string{"mod-flows table=7,actions=drop", "mod-flows --strict table=7,priority=1,actions=drop"},
			check: wantNet(nil, nil, nil, nil),
		},
		{
			name:  "delete with out_port",
			msgs:  []string{"del-flows out_port=3"},
			check: wantNet([]decl{flowDecl(mod, f3)}, nil, nil, []int{0}),
		},
		{
			name:               "delete with out_port spares other's flow",
			msgs:               []string{"del-flows table=1,out_port=2"},
			switchTouchesOther: true,
			check:              wantNet([]decl{flowDecl(mod, f1)}, nil, nil, []int{0}),
		},
		{
			name:  "delete with out_group",
			msgs:  []string{"del-flows out_group=1"},
			check: wantNet([]decl{flowDecl(mod, f2)}, nil, nil, []int{0}),
		},
		{
			name:  "delete strict",
			msgs:  []string{"del-flows --strict table=1,priority=30,tcp"},
			check: wantNet([]decl{flowDecl(mod, f3)}, nil, nil, []int{0}),
		},
		{
			name:  "delete strict restricted by out_port",
			msgs:  []string{"del-flows --strict table=1,priority=30,tcp,out_port=2"},
			check: wantNet(nil, nil, nil, nil),
		},
		{
			name:               "delete all flows deletes only the module's",
			msgs:               []string{"del-flows"},
			switchTouchesOther: true,
			check: wantNet([]decl{
				flowDecl(mod, f0), flowDecl(mod, f1), flowDecl(mod, f2), flowDecl(mod, f3), flowDecl(mod, f4), flowDecl(mod, f5), flowDecl(mod, f6),
			}, nil, nil, []int{0, 0, 0, 0, 0, 0, 0}),
		},
		{
			name: "delete then add the same flow is no change",
			msgs: []string{"del-flows --strict table=1,priority=10,in_port=1", "add-flow " + f1},
			// Put again as stored; the store finds it unchanged.
			check: wantNet(nil, []decl{flowDecl(mod, f1)}, []int{1}, nil),
		},
		{
			name: "modify a group",
			msgs: []string{"mod-group group_id=1,type=all,bucket=bucket_id:0,actions=output:9"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:9"},
			}, []int{0}, nil),
		},
		{
			name: "add or modify a group",
			msgs: []string{
				"add-or-mod-group group_id=1,type=all,bucket=bucket_id:0,actions=output:9",
				"add-or-mod-group group_id=4,type=all,bucket=bucket_id:0,actions=output:4",
			},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:9"},
				{mod, entry.KindGroup, "group_id=4,type=all,bucket=bucket_id:0,actions=output:4"},
			}, []int{0, 1}, nil),
		},
		{
			name:  "delete a group deletes the flows that use it",
			msgs:  []string{"del-groups group_id=1"},
			check: wantNet([]decl{{mod, entry.KindGroup, initial[3].text}, flowDecl(mod, f2)}, nil, nil, []int{0, 0}),
		},
		{
			name:  "delete a missing group",
			msgs:  []string{"del-groups group_id=9"},
			check: wantNet(nil, nil, nil, nil),
		},
		{
			name:               "delete all groups deletes only the module's",
			msgs:               []string{"del-groups"},
			switchTouchesOther: true,
			check: wantNet([]decl{
				{mod, entry.KindGroup, initial[3].text}, {mod, entry.KindGroup, initial[4].text}, flowDecl(mod, f2), flowDecl(mod, f4),
			}, nil, nil, []int{0, 0, 0, 0}),
		},
		{
			name: "insert a bucket last",
			msgs: []string{"insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:5,actions=output:5"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2,bucket=bucket_id:5,actions=output:5"},
			}, []int{0}, nil),
		},
		{
			name: "insert buckets first",
			msgs: []string{"insert-buckets group_id=1,command_bucket_id=first,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2"},
			}, []int{0}, nil),
		},
		{
			name: "insert a bucket into a select group",
			msgs: []string{"insert-buckets group_id=2,type=select,command_bucket_id=last,bucket=bucket_id:5,weight:10,actions=output:5"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:1,weight:50,actions=output:4,bucket=bucket_id:5,weight:10,actions=output:5"},
			}, []int{0}, nil),
		},
		{
			name: "remove the first bucket",
			msgs: []string{"remove-buckets group_id=1,command_bucket_id=first"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:1,actions=output:2"},
			}, []int{0}, nil),
		},
		{
			name: "remove the last bucket",
			msgs: []string{"remove-buckets group_id=2,command_bucket_id=last"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3"},
			}, []int{0}, nil),
		},
		{
			name:  "remove every bucket",
			msgs:  []string{"remove-buckets group_id=1,command_bucket_id=all"},
			check: wantNet(nil, []decl{{mod, entry.KindGroup, "group_id=1,type=all"}}, []int{0}, nil),
		},
		{
			name: "remove a bucket by id",
			msgs: []string{"remove-buckets group_id=1,command_bucket_id=0"},
			check: wantNet(nil, []decl{
				{mod, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:1,actions=output:2"},
			}, []int{0}, nil),
		},
		{
			name: "remove first and last of a group emptied before",
			msgs: []string{
				"remove-buckets group_id=1,command_bucket_id=all",
				"remove-buckets group_id=1,command_bucket_id=first",
				"remove-buckets group_id=1,command_bucket_id=last",
			},
			check: wantNet(nil, []decl{{mod, entry.KindGroup, "group_id=1,type=all"}}, []int{2}, nil),
		},
		{
			name: "add and modify a meter",
			msgs: []string{"add-meter meter=3,pktps,bands=type=drop,rate=30", "mod-meter meter=1,pktps,bands=type=drop,rate=2000"},
			check: wantNet(nil, []decl{
				{mod, entry.KindMeter, "meter=3,pktps,bands=type=drop,rate=30"},
				{mod, entry.KindMeter, "meter=1,pktps,bands=type=drop,rate=2000"},
			}, []int{0, 1}, nil),
		},
		{
			name:  "delete a meter deletes the flows that use it",
			msgs:  []string{"del-meters meter=1"},
			check: wantNet([]decl{{mod, entry.KindMeter, initial[0].text}, flowDecl(mod, f0)}, nil, nil, []int{0, 0}),
		},
		{
			name:               "delete all meters deletes only the module's",
			msgs:               []string{"del-meters"},
			switchTouchesOther: true,
			check: wantNet([]decl{
				{mod, entry.KindMeter, initial[0].text}, {mod, entry.KindMeter, initial[1].text}, flowDecl(mod, f0), flowDecl(mod, f5),
			}, nil, nil, []int{0, 0, 0, 0}),
		},
		{
			name: "later messages see earlier ones",
			msgs: []string{
				"add-group group_id=5,type=all,bucket=bucket_id:0,actions=output:5",
				"mod-group group_id=5,type=all,bucket=bucket_id:0,actions=output:6",
				"add-flow table=4,priority=1,actions=group:5",
				"del-groups group_id=5",
			},
			// Added and deleted again: nothing to store.
			check: wantNet(nil, nil, nil, nil),
		},
		{
			name:               "reconnect: delete everything and add it again",
			msgs:               reconnect,
			switchTouchesOther: true,
			check:              wantUnchanged(11, nil),
		},
		{
			name:               "reconnect with one flow changed and one gone",
			msgs:               reconnectChanged,
			switchTouchesOther: true,
			check: func(t *testing.T, st *memStore, ch *Change) {
				wantUnchanged(10, []decl{flowDecl(mod, "cookie=0x26,table=1,priority=30,tcp,actions=output:9")})(t, st, ch)
				gone := parseDecl(t, flowDecl(mod, f5))
				if len(ch.Delete) != 1 || !bytes.Equal(ch.Delete[0].ID, gone.ID) || ch.DeleteFrom[0] != 0 {
					t.Errorf("Delete %v from %v, want only %q from message 0", ch.Delete, ch.DeleteFrom, f5)
				}
			},
		},

		// Refused as vswitchd refuses them.
		{
			name:    "add of an existing group",
			msgs:    []string{"add-flow table=3,priority=1,actions=drop", "add-group group_id=1,type=all,bucket=bucket_id:0,actions=output:9"},
			refused: &refusal{1, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_GROUP_EXISTS},
		},
		{
			name:    "add of a group added before",
			msgs:    []string{"add-group group_id=5,type=all", "add-group group_id=5,type=all"},
			refused: &refusal{1, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_GROUP_EXISTS},
		},
		{
			name:    "modify of a missing group",
			msgs:    []string{"mod-group group_id=9,type=all,bucket=bucket_id:0,actions=output:9"},
			refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP},
		},
		{
			name:    "modify of a group deleted before",
			msgs:    []string{"del-groups group_id=1", "mod-group group_id=1,type=all"},
			refused: &refusal{1, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP},
		},
		{
			name:    "insert buckets into a missing group",
			msgs:    []string{"insert-buckets group_id=9,command_bucket_id=last,bucket=bucket_id:5,actions=output:5"},
			refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP},
		},
		{
			name:    "remove buckets of a missing group",
			msgs:    []string{"remove-buckets group_id=9,command_bucket_id=all"},
			refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP},
		},
		{
			name:    "remove an unknown bucket",
			msgs:    []string{"remove-buckets group_id=1,command_bucket_id=7"},
			refused: &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_BUCKET},
		},
		{
			name:    "add of an existing meter",
			msgs:    []string{"add-meter meter=2,pktps,bands=type=drop,rate=1"},
			refused: &refusal{0, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_METER_EXISTS},
		},
		{
			name:    "modify of a missing meter",
			msgs:    []string{"del-meters meter=9", "mod-meter meter=9,pktps,bands=type=drop,rate=1"},
			refused: &refusal{1, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_UNKNOWN_METER},
		},

		// Refused for another module's ownership, which the switch cannot
		// know.
		{
			name:      "add of other's flow",
			msgs:      []string{"add-flow table=3,priority=1,actions=drop", "add-flow " + strings.Replace(o1, "output:2", "output:7", 1)},
			refused:   &refusal{1, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM},
			ownership: true,
		},
		{
			name:      "modify strict of other's flow",
			msgs:      []string{"mod-flows --strict table=1,priority=40,udp,actions=drop"},
			refused:   &refusal{0, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM},
			ownership: true,
		},
		{
			name:      "delete strict of other's flow",
			msgs:      []string{"del-flows --strict table=1,priority=30,tcp", "del-flows --strict table=1,priority=40,udp"},
			refused:   &refusal{1, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM},
			ownership: true,
		},
		{
			name:      "add of other's group",
			msgs:      []string{"add-group group_id=100,type=all"},
			refused:   &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_EPERM},
			ownership: true,
		},
		{
			name:      "modify of other's group",
			msgs:      []string{"mod-group group_id=100,type=all"},
			refused:   &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_EPERM},
			ownership: true,
		},
		{
			name:      "delete of other's group",
			msgs:      []string{"del-groups group_id=100"},
			refused:   &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_EPERM},
			ownership: true,
		},
		{
			name:      "insert buckets into other's group",
			msgs:      []string{"insert-buckets group_id=100,command_bucket_id=last,bucket=bucket_id:5,actions=output:5"},
			refused:   &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_EPERM},
			ownership: true,
		},
		{
			name:      "remove buckets of other's group",
			msgs:      []string{"remove-buckets group_id=100,command_bucket_id=all"},
			refused:   &refusal{0, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_EPERM},
			ownership: true,
		},
		{
			name:      "add of other's meter",
			msgs:      []string{"add-meter meter=100,pktps,bands=type=drop,rate=1"},
			refused:   &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM},
			ownership: true,
		},
		{
			name:      "modify of other's meter",
			msgs:      []string{"mod-meter meter=100,pktps,bands=type=drop,rate=1"},
			refused:   &refusal{0, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM},
			ownership: true,
		},
		{
			name:      "delete of other's meter",
			msgs:      []string{"add-meter meter=3,pktps,bands=type=drop,rate=1", "del-meters meter=100"},
			refused:   &refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM},
			ownership: true,
		},
	}
}

// wantNet checks a change against the entries it should delete and put
// (the put ones with their content) and the messages that decided them.
func wantNet(del, put []decl, putFrom, delFrom []int) func(*testing.T, *memStore, *Change) {
	return func(t *testing.T, _ *memStore, ch *Change) {
		t.Helper()
		var want []string
		for i, d := range put {
			e := parseDecl(t, d)
			want = append(want, describe(e))
			// The text hides a few bytes; the store compares them all.
			if i < len(ch.Put) && describe(ch.Put[i]) == describe(e) && !ch.Put[i].Equal(e) {
				t.Errorf("Put[%d] prints as wanted but its bytes differ:\n  %x\nwant\n  %x", i, ch.Put[i].Payload, e.Payload)
			}
		}
		var got []string
		for _, e := range ch.Put {
			got = append(got, describe(e))
		}
		if !slices.Equal(got, want) {
			t.Errorf("Put\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		want, got = nil, nil
		for _, d := range del {
			e := parseDecl(t, d)
			want = append(want, fmt.Sprintf("%s %x", e.Kind, e.ID))
		}
		for _, e := range ch.Delete {
			got = append(got, fmt.Sprintf("%s %x", e.Kind, e.ID))
		}
		if !slices.Equal(got, want) {
			t.Errorf("Delete\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		if !slices.Equal(ch.PutFrom, putFrom) || !slices.Equal(ch.DeleteFrom, delFrom) {
			t.Errorf("PutFrom %v DeleteFrom %v, want %v and %v", ch.PutFrom, ch.DeleteFrom, putFrom, delFrom)
		}
	}
}

// wantUnchanged checks a change that puts n entries, all as stored except
// changed; without changed, it deletes nothing either.
func wantUnchanged(n int, changed []decl) func(*testing.T, *memStore, *Change) {
	return func(t *testing.T, st *memStore, ch *Change) {
		t.Helper()
		if len(ch.Put) != n {
			t.Errorf("%d entries put, want %d", len(ch.Put), n)
		}
		var got []string
		for _, e := range ch.Put {
			if s, ok, _ := st.Get(e.Kind, e.ID); !ok || !s.Equal(e) {
				got = append(got, describe(e))
			}
		}
		var want []string
		for _, d := range changed {
			want = append(want, describe(parseDecl(t, d)))
		}
		if !slices.Equal(got, want) {
			t.Errorf("entries put that differ from the store\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		if changed == nil && len(ch.Delete) != 0 {
			t.Errorf("Delete %v, want nothing", ch.Delete)
		}
	}
}

// describe prints an entry for a comparison: its module and ovs-ofctl text.
func describe(e entry.Entry) string {
	s, err := canon.Format(e.Kind, e.Payload)
	if err != nil {
		s = fmt.Sprintf("%x (%v)", e.Payload, err)
	}
	if e.Module == "" {
		return s
	}
	return e.Module + ": " + s
}

// checkChange checks what every change must be: the module's own
// entries, each decided by a message there is, none both put and deleted,
// and deletes only of what the store holds for the module.
func checkChange(t testing.TB, st *memStore, nmsgs int, ch *Change) {
	t.Helper()
	if len(ch.PutFrom) != len(ch.Put) || len(ch.DeleteFrom) != len(ch.Delete) {
		t.Fatalf("%d Put and %d PutFrom, %d Delete and %d DeleteFrom", len(ch.Put), len(ch.PutFrom), len(ch.Delete), len(ch.DeleteFrom))
	}
	seen := map[string]bool{}
	for i, e := range ch.Put {
		k := slotKey(e.Kind, e.ID)
		switch {
		case e.Module != st.module:
			t.Errorf("Put[%d] of module %q", i, e.Module)
		case !e.Kind.Valid():
			t.Errorf("Put[%d] of kind %d", i, e.Kind)
		case ch.PutFrom[i] < 0 || ch.PutFrom[i] >= nmsgs:
			t.Errorf("PutFrom[%d] = %d of %d messages", i, ch.PutFrom[i], nmsgs)
		case seen[k]:
			t.Errorf("Put[%d] twice: %s %x", i, e.Kind, e.ID)
		}
		if o := st.owner(e.Kind, e.ID); o != "" && o != st.module {
			t.Errorf("Put[%d] is %q's %s %x", i, o, e.Kind, e.ID)
		}
		if _, id, err := entry.Identify(e.Kind, e.Payload); err != nil || !bytes.Equal(id, e.ID) {
			t.Errorf("Put[%d]: payload identifies as %x (%v), ID %x", i, id, err, e.ID)
		}
		seen[k] = true
	}
	for i, e := range ch.Delete {
		k := slotKey(e.Kind, e.ID)
		switch {
		case e.Module != st.module:
			t.Errorf("Delete[%d] of module %q", i, e.Module)
		case ch.DeleteFrom[i] < 0 || ch.DeleteFrom[i] >= nmsgs:
			t.Errorf("DeleteFrom[%d] = %d of %d messages", i, ch.DeleteFrom[i], nmsgs)
		case seen[k]:
			t.Errorf("Delete[%d] is put or deleted too: %s %x", i, e.Kind, e.ID)
		case st.owner(e.Kind, e.ID) != st.module:
			t.Errorf("Delete[%d] of %s %x, which the module does not hold", i, e.Kind, e.ID)
		}
		seen[k] = true
	}
}

// TestApplyDifferential runs each scenario through Apply over the initial
// entries and, unless only a module can tell, through a real vswitchd
// holding the same entries, and holds Apply's net change to what the
// switch did to m's entries, and its refusals to the switch's errors.
func TestApplyDifferential(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb := startSwitch(ctx, t)
	for i, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) { runScenario(ctx, t, sb, fmt.Sprintf("s%d", i), sc, encodeAll(t, sc.msgs)) })
	}
}

// runScenario runs the messages of sc, msgs, through Apply and, unless sc
// is about ownership, on bridge br of sb.
func runScenario(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, br string, sc scenario, msgs [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st := newStore(t, initial)
	ch, err := Apply(mod, st, msgs)
	checkOutcome(t, st, msgs, ch, err, sc.refused)
	if err == nil && sc.check != nil {
		sc.check(t, st, ch)
	}
	if sc.ownership {
		var r *Refusal
		if errors.As(err, &r) && !strings.Contains(r.Error(), `"other"`) {
			t.Errorf("refusal %q does not name the owner", r.Error())
		}
		return
	}
	sw := onSwitch(ctx, t, sb, br, st, msgs)
	compareWithSwitch(t, st, ch, err, sw, sc.switchTouchesOther)
}

// checkOutcome checks Apply's result against the expected refusal (nil:
// success) and, on success, what every change must be.
func checkOutcome(t *testing.T, st *memStore, msgs [][]byte, ch *Change, err error, want *refusal) {
	t.Helper()
	var r *Refusal
	switch {
	case want == nil && err != nil:
		t.Fatalf("Apply: %v", err)
	case want == nil:
		checkChange(t, st, len(msgs), ch)
	case !errors.As(err, &r):
		t.Fatalf("Apply = %v, %v; want a *Refusal", ch, err)
	case ch != nil:
		t.Errorf("refused with a change: %+v", ch)
	}
	if want != nil && (r.Index != want.Index || r.Type != want.Type || r.Code != want.Code) {
		t.Errorf("refusal of message %d type %d code %d (%v), want message %d type %d code %d",
			r.Index, r.Type, r.Code, r.Err, want.Index, want.Type, want.Code)
	}
}

// startSwitch starts a sandboxed vswitchd, closed when the test ends.
func startSwitch(ctx context.Context, t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	return sb
}

// switchResult is what the switch made of a scenario's messages.
type switchResult struct {
	// refused is the index of the message it refused (-1: none) and
	// ofErr its error.
	refused int
	ofErr   *ofconn.OFError
	// entries are the bridge's entries after the messages (up to the
	// refused one) as ovs-ofctl prints them, wire as the engine reads
	// them (canonical forms of an OpenFlow dump): ovs-ofctl's text hides
	// a few bytes, such as an output's max_len.
	entries, wire []entry.Entry
}

// onSwitch installs st's entries on a new bridge with ovs-ofctl, checks
// that the bridge holds them, sends msgs one by one (vswitchd bundles no
// METER_MOD) and dumps the bridge.
func onSwitch(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, br string, st *memStore, msgs [][]byte) switchResult {
	t.Helper()
	if err := sb.AddBridge(ctx, br); err != nil {
		t.Fatal(err)
	}
	install(ctx, t, sb, br, st.entries)
	c, err := ofconn.Dial(ctx, sb.MgmtPath(br), ofconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	for _, got := range [][]entry.Entry{dump(ctx, t, sb, br), dumpWire(ctx, t, c)} {
		if d := diffEntries(got, st.entries); d != "" {
			t.Fatalf("the bridge does not hold the initial entries:\n%s", d)
		}
	}
	res := switchResult{refused: -1}
	for i, m := range msgs {
		err := c.Send(ctx, m)
		if err == nil {
			continue
		}
		if !errors.As(err, &res.ofErr) {
			t.Fatalf("send message %d: %v", i, err)
		}
		res.refused = i
		break
	}
	res.entries = dump(ctx, t, sb, br)
	res.wire = dumpWire(ctx, t, c)
	return res
}

// dumpWire dumps the bridge over c and brings the entries to canonical
// form as the restore engine does (server/restore's actualEntries).
func dumpWire(ctx context.Context, t *testing.T, c *ofconn.Conn) []entry.Entry {
	t.Helper()
	var msgs []ofconn.Message
	var kinds []entry.Kind
	add := func(kind entry.Kind, m ofconn.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if kind == entry.KindFlow {
			m = canon.FromSwitch(m)
		}
		msgs, kinds = append(msgs, m), append(kinds, kind)
	}
	flows, err := c.DumpFlowsRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		m, err := f.FlowMod()
		add(entry.KindFlow, m, err)
	}
	groups, err := c.DumpGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		m, err := g.GroupMod()
		add(entry.KindGroup, m, err)
	}
	meters, err := c.DumpMeters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range meters {
		m, err := mt.MeterMod()
		add(entry.KindMeter, m, err)
	}
	out := make([]entry.Entry, len(msgs))
	for i, m := range msgs {
		p, id, err := entry.Identify(kinds[i], m)
		if err != nil {
			t.Fatalf("dumped %s: %v", kinds[i], err)
		}
		out[i] = entry.Entry{Kind: kinds[i], ID: id, Payload: p}
	}
	return out
}

// install puts entries on br as an operator would: ovs-ofctl, meters
// first, groups and flows each in one bundle.
func install(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, br string, entries []entry.Entry) {
	t.Helper()
	var groups, flows []string
	for _, e := range entries {
		text, err := canon.Format(e.Kind, e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case entry.KindMeter:
			// ovs-ofctl 3.1 adds meters one at a time.
			if out, err := sb.Ofctl(ctx, "add-meter", br, text); err != nil {
				t.Fatal(err, out)
			}
		case entry.KindGroup:
			groups = append(groups, text)
		case entry.KindFlow:
			flows = append(flows, text)
		}
	}
	dir := t.TempDir()
	for _, f := range []struct {
		cmd   string
		lines []string
	}{{"add-groups", groups}, {"replace-flows", flows}} {
		path := filepath.Join(dir, f.cmd)
		if err := os.WriteFile(path, []byte(strings.Join(f.lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := sb.Ofctl(ctx, "--bundle", f.cmd, br, path); err != nil {
			t.Fatal(err, out)
		}
	}
}

// dump returns what `ovs-ofctl dump-flows/dump-groups/dump-meters` show
// of br, as canonical entries without module.
func dump(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, br string) []entry.Entry {
	t.Helper()
	var out []entry.Entry
	for _, k := range []struct {
		kind entry.Kind
		cmd  string
	}{{entry.KindMeter, "dump-meters"}, {entry.KindGroup, "dump-groups"}, {entry.KindFlow, "dump-flows"}} {
		text, err := sb.Ofctl(ctx, "--no-stats", k.cmd, br)
		if err != nil {
			t.Fatal(err, text)
		}
		for _, line := range dumpLines(k.kind, text) {
			p, id, err := canon.Parse(k.kind, line)
			if err != nil {
				t.Fatalf("parse the dumped %s %q: %v", k.kind, line, err)
			}
			out = append(out, entry.Entry{Kind: k.kind, ID: id, Payload: p})
		}
	}
	return out
}

// dumpLines returns the entries of an ovs-ofctl dump, one a line. A
// meter's bands are printed on lines of their own: joined back, they read
// as add-meter takes them.
func dumpLines(kind entry.Kind, text string) []string {
	var lines []string
	if kind == entry.KindMeter {
		for _, block := range strings.Split(text, "\n\n") {
			block = strings.TrimSpace(block)
			if i := strings.Index(block, "meter="); i >= 0 {
				block = strings.ReplaceAll(block[i:], "bands=\n", "bands=")
				lines = append(lines, strings.NewReplacer("\n", ",", " ", ",").Replace(block))
			}
		}
		return lines
	}
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_") && !strings.HasPrefix(l, "NXST_") {
			lines = append(lines, l)
		}
	}
	return lines
}

// compareKey is an entry as desired and dumped entries compare (a
// meter's burst sizes as the datapath reports them).
func compareKey(e entry.Entry) string {
	return fmt.Sprintf("%s %x", e.Kind, entry.Comparable(e.Kind, e.Payload))
}

// diffEntries prints the entries of got (the switch's) and want that the
// other lacks.
func diffEntries(got, want []entry.Entry) string {
	count := map[string]int{}
	byKey := map[string]entry.Entry{}
	for _, e := range got {
		count[compareKey(e)]++
		byKey[compareKey(e)] = e
	}
	for _, e := range want {
		count[compareKey(e)]--
		byKey[compareKey(e)] = e
	}
	var lines []string
	for k, n := range count {
		e := byKey[k]
		e.Module = ""
		switch {
		case n > 0:
			lines = append(lines, "  switch only: "+describe(e))
		case n < 0:
			lines = append(lines, "  want only:   "+describe(e))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// compareWithSwitch holds Apply's outcome to the switch's: the same
// refusal, or m's entries as the switch holds them equal to the stored
// ones with the change applied (and other's untouched, unless the switch
// has no reason to spare them).
func compareWithSwitch(t *testing.T, st *memStore, ch *Change, err error, sw switchResult, touchesOther bool) {
	t.Helper()
	var r *Refusal
	if errors.As(err, &r) {
		switch {
		case sw.refused != r.Index:
			t.Errorf("Apply refused message %d (%v), the switch refused message %d (%v)", r.Index, r.Err, sw.refused, sw.ofErr)
		case r.Type != 0 && (sw.ofErr.Type != r.Type || sw.ofErr.Code != r.Code):
			t.Errorf("Apply refused message %d with type %d code %d (%v), the switch with %s (type %d code %d)",
				r.Index, r.Type, r.Code, r.Err, sw.ofErr.Name, sw.ofErr.Type, sw.ofErr.Code)
		}
		return
	}
	if sw.refused >= 0 {
		t.Fatalf("Apply took the change, the switch refused message %d: %v", sw.refused, sw.ofErr)
	}
	// What Apply says m holds now: the stored entries, less the deleted,
	// with the put ones.
	var want, otherWant []entry.Entry
	gone := map[string]bool{}
	for _, e := range ch.Delete {
		gone[slotKey(e.Kind, e.ID)] = true
	}
	for _, e := range ch.Put {
		gone[slotKey(e.Kind, e.ID)] = true
		want = append(want, e)
	}
	for _, e := range st.entries {
		switch {
		case e.Module != st.module:
			otherWant = append(otherWant, e)
		case !gone[slotKey(e.Kind, e.ID)]:
			want = append(want, e)
		}
	}
	for _, dumped := range []struct {
		how     string
		entries []entry.Entry
	}{{"ovs-ofctl", sw.entries}, {"its wire dump", sw.wire}} {
		var got, otherGot []entry.Entry
		for _, e := range dumped.entries {
			if o := st.owner(e.Kind, e.ID); o != "" && o != st.module {
				otherGot = append(otherGot, e)
			} else {
				got = append(got, e)
			}
		}
		if d := diffEntries(got, want); d != "" {
			t.Errorf("module %s's entries differ from the switch's (%s):\n%s", st.module, dumped.how, d)
		}
		if d := diffEntries(otherGot, otherWant); !touchesOther && d != "" {
			t.Errorf("the switch changed other's entries (%s):\n%s", dumped.how, d)
		}
	}
}

// TestApplyLibOpenflowEncoding sends messages as an antrea-style
// controller encodes them with libOpenflow (match fields in its order, a
// register in its OpenFlow 1.5 class): Apply must find the stored
// identities through canon's canonical form and agree with the switch.
func TestApplyLibOpenflowEncoding(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sb := startSwitch(ctx, t)

	output := func(port uint32) openflow15.Instruction {
		a := openflow15.NewActionOutput(port)
		a.MaxLen = 0 // as ovs-ofctl sends it, whose dump does not show it
		in := openflow15.NewInstrApplyActions()
		if err := in.AddAction(a, false); err != nil {
			t.Fatal(err)
		}
		return in
	}
	marshal := func(fm *openflow15.FlowMod) []byte {
		b, err := fm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// f6 by its identity, its fields in another order than OVS's (vswitchd
	// refuses a field before its prerequisite, OFPBMC_BAD_PREREQ, so only
	// independent fields move) and reg14 in the class libOpenflow uses.
	meta := uint64(2)
	modify := openflow15.NewFlowMod()
	modify.Command, modify.TableId, modify.Priority = openflow15.FC_MODIFY_STRICT, 3, 100
	modify.Match.AddField(*openflow15.NewRegMatchField(14, 1, nil))
	modify.Match.AddField(*openflow15.NewMetadataField(meta, nil))
	modify.Match.AddField(*openflow15.NewEthTypeField(0x0800))
	modify.AddInstruction(output(1))

	// f4 by its identity, nw_dst masked.
	mask := net.IPv4(255, 0, 0, 0)
	modify4 := openflow15.NewFlowMod()
	modify4.Command, modify4.TableId, modify4.Priority = openflow15.FC_MODIFY_STRICT, 2, 5
	modify4.Match.AddField(*openflow15.NewEthTypeField(0x0800))
	modify4.Match.AddField(*openflow15.NewIpv4DstField(net.IPv4(10, 0, 0, 0), &mask))
	modify4.AddInstruction(output(1))

	add := openflow15.NewFlowMod()
	add.TableId, add.Priority = 4, 7
	add.Match.AddField(*openflow15.NewRegMatchField(0, 5, nil))
	add.AddInstruction(output(2))

	del := openflow15.NewFlowMod()
	del.Command, del.TableId = openflow15.FC_DELETE, 1
	del.Match.AddField(*openflow15.NewInPortField(2))

	sc := scenario{
		name: "libOpenflow",
		check: wantNet([]decl{flowDecl(mod, f2)}, []decl{
			flowDecl(mod, "table=3,priority=100,ip,reg14=0x1,metadata=0x2,actions=output:1"),
			flowDecl(mod, "cookie=0x15,table=2,priority=5,importance=5,ip,nw_dst=10.0.0.0/8,actions=output:1"),
			flowDecl(mod, "table=4,priority=7,reg0=0x5,actions=output:2"),
		}, []int{0, 1, 2}, []int{3}),
	}
	runScenario(ctx, t, sb, "lib", sc, [][]byte{marshal(modify), marshal(modify4), marshal(add), marshal(del)})
}

// TestApplyMalformed: a message Apply cannot take is refused with its
// index and the error vswitchd sends for it (the switch agrees where it
// can be sent), or with Type 0 where only the switch can say.
func TestApplyMalformed(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sb := startSwitch(ctx, t)

	valid := encode(t, "add-flow table=3,priority=1,actions=drop")
	// with returns a copy of the message of line, edited.
	with := func(line string, edit func([]byte) []byte) []byte {
		return edit(bytes.Clone(encode(t, line)))
	}
	// cut shortens a message to n bytes, its header saying so.
	cut := func(line string, n int) []byte {
		return with(line, func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[2:], uint16(n))
			return b[:n]
		})
	}
	command := func(line string, at int, cmd byte) []byte {
		return with(line, func(b []byte) []byte { b[at] = cmd; return b })
	}
	for i, c := range []struct {
		name string
		msg  []byte
		want refusal
		// unsendable: ofconn frames only OpenFlow 1.5 messages whose
		// header length is theirs; Apply alone is checked.
		unsendable bool
	}{
		{"shorter than a header", []byte{6, 14, 0, 8}, refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_VERSION}, true},
		{"empty", nil, refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_VERSION}, true},
		{"OpenFlow 1.3", with("add-flow table=3,priority=2,actions=drop", func(b []byte) []byte { b[0] = 4; return b }),
			refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_VERSION}, true},
		{"unknown type", []byte{6, 99, 0, 8, 0, 0, 0, 0}, refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_TYPE}, false},
		{"echo request", []byte{6, openflow15.Type_EchoRequest, 0, 8, 0, 0, 0, 0}, refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_TYPE}, true},
		{"short FLOW_MOD", cut("add-flow table=3,priority=2,actions=drop", 40), refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN}, false},
		{"short GROUP_MOD", cut("del-groups group_id=1", 16), refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN}, false},
		{"short METER_MOD", cut("del-meters meter=1", 12), refusal{1, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN}, false},
		{"FLOW_MOD command 9", command("add-flow table=3,priority=2,actions=drop", offCommand, 9),
			refusal{1, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_COMMAND}, false},
		{"GROUP_MOD command 9", command("mod-group group_id=1,type=all", offModCmd+1, 9), refusal{1, 0, 0}, false},
		{"METER_MOD command 9", command("mod-meter meter=1,pktps,bands=type=drop,rate=1", offModCmd+1, 9), refusal{1, 0, 0}, false},
		{"FLOW_MOD match longer than the message", with("add-flow table=3,priority=2,actions=drop", func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[offMatchLength:], 200)
			return b
		}), refusal{1, 0, 0}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := [][]byte{valid, c.msg}
			br := fmt.Sprintf("bad%d", i)
			st := newStore(t, initial)
			ch, err := Apply(mod, st, msgs)
			checkOutcome(t, st, msgs, ch, err, &c.want)
			var r *Refusal
			if errors.As(err, &r) {
				if r.Err == nil || !errors.Is(err, r.Err) || !strings.Contains(r.Error(), "message 1 ") {
					t.Errorf("refusal %q wraps %v: want the reason, and the message named", r.Error(), r.Err)
				}
			}
			if !c.unsendable {
				sw := onSwitch(ctx, t, sb, br, st, msgs)
				compareWithSwitch(t, st, ch, err, sw, false)
			}
		})
	}
}

// failingStore is a Store whose reads fail.
type failingStore struct{ err error }

func (s failingStore) Get(entry.Kind, []byte) (entry.Entry, bool, error) {
	return entry.Entry{}, false, s.err
}

func (s failingStore) Each(entry.Kind, func(entry.Entry) error) error { return s.err }

// TestApplyStoreError: the store's errors are returned as they are, not as
// a refusal of the controller's message.
func TestApplyStoreError(t *testing.T) {
	errRead := errors.New("store: read failed")
	for _, line := range []string{"add-flow table=3,priority=1,actions=drop", "del-flows", "del-flows --strict table=1,priority=30,tcp", "del-groups", "mod-meter meter=1,pktps,bands=type=drop,rate=1"} {
		ch, err := Apply(mod, failingStore{errRead}, [][]byte{encode(t, line)})
		var r *Refusal
		if !errors.Is(err, errRead) || errors.As(err, &r) || ch != nil {
			t.Errorf("%s: Apply = %v, %v; want the store's error, not a refusal", line, ch, err)
		}
	}
}

// TestApplyNothing: no message, no change.
func TestApplyNothing(t *testing.T) {
	ch, err := Apply(mod, newStore(t, initial), nil)
	if err != nil || len(ch.Put)+len(ch.Delete)+len(ch.PutFrom)+len(ch.DeleteFrom) != 0 {
		t.Fatalf("Apply(nil) = %+v, %v; want an empty change", ch, err)
	}
}
