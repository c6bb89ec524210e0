package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// limitCase is a flow just under one of OVS's limits on actions and the
// same flow one action, spec or level over it.
type limitCase struct {
	name        string
	under, over string
	limit       string // what ovs-ofctl and ParseFlow say of over
}

func repeatList(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

func nestClones(n int, inner string) string {
	return strings.Repeat("clone(", n) + inner + strings.Repeat(")", n)
}

// limitCases are the boundaries of OVS 3.1's internal form: 65,535 bytes for
// an action or a list, MAX_OFPACT_PARSE_DEPTH levels. Each pair is held to
// ovs-ofctl by TestLimitsAsOVSOfctl and to vswitchd by TestLimitsOnSwitch.
func limitCases() []limitCase {
	learn := func(spec string, n int) string { return "actions=learn(table=1," + repeatList(spec, n) + ")" }
	clone := func(n int) string {
		return "actions=clone(output:1," + repeatList("set_field:1->reg1", n-1) + ")"
	}
	return []limitCase{
		// 48 + 40 a spec.
		{"learn field specs", learn("NXM_OF_VLAN_TCI[0..11]", 1637), learn("NXM_OF_VLAN_TCI[0..11]", 1638), limitTooBig},
		// 48 + 48 a spec with an immediate value.
		{"learn immediate specs", learn("NXM_NX_REG0[0..15]=0x1", 1364), learn("NXM_NX_REG0[0..15]=0x1", 1365), limitTooBig},
		// 8 + 16 + 32 a register set_field.
		{"clone of set_fields", clone(2048), clone(2049), limitTooBig},
		// 8 + 40 a move.
		{"clone of moves", "actions=clone(" + repeatList("move:NXM_NX_REG0[]->NXM_NX_REG1[]", 1638) + ")",
			"actions=clone(" + repeatList("move:NXM_NX_REG0[]->NXM_NX_REG1[]", 1639) + ")", limitTooBig},
		// 32 + 48 a ct_label set_field.
		{"ct exec", "ip,actions=ct(commit,exec(" + repeatList("set_field:1->ct_label", 1364) + "))",
			"ip,actions=ct(commit,exec(" + repeatList("set_field:1->ct_label", 1365) + "))", limitTooBig},
		// 8 + 32 a set_field.
		{"write_actions", "actions=write_actions(" + repeatList("set_field:1->reg1", 2047) + ")",
			"actions=write_actions(" + repeatList("set_field:1->reg1", 2048) + ")", limitTooBig},
		// The list itself: 32 a set_field.
		{"top-level list", "actions=" + repeatList("set_field:1->reg1", 2047),
			"actions=" + repeatList("set_field:1->reg1", 2048), limitTooBig},
		{"nested clones", "actions=" + nestClones(MaxActionDepth-1, "output:1"),
			"actions=" + nestClones(MaxActionDepth, "output:1"), limitDeep},
		{"ct exec nested", "ip,actions=" + nestClones(MaxActionDepth-2, "ct(commit,exec(set_field:1->ct_mark))"),
			"ip,actions=" + nestClones(MaxActionDepth-1, "ct(commit,exec(set_field:1->ct_mark))"), limitDeep},
	}
}

// TestLimitsAsOVSOfctl holds ParseFlow's model of vswitchd's internal form
// to ovs-ofctl, which builds that form: each flow under a limit parses with
// both, each flow over it is refused by both, with the same words.
func TestLimitsAsOVSOfctl(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 50*time.Second)
	for _, c := range limitCases() {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := ofctlParse(ctx, c.under); err != nil {
				t.Fatalf("ovs-ofctl refuses the flow under the limit: %v", err)
			}
			if _, err := ParseFlowBinary(c.under); err != nil {
				t.Fatalf("ParseFlow refuses the flow under the limit: %v", err)
			}
			_, _, err := ofctlParse(ctx, c.over)
			var oe *ofctlError
			if !errors.As(err, &oe) || !strings.Contains(strings.ToLower(oe.msg), c.limit) {
				t.Fatalf("ovs-ofctl on the flow over the limit: %v, want %q", err, c.limit)
			}
			_, err = ParseFlowBinary(c.over)
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != c.limit {
				t.Fatalf("ParseFlow on the flow over the limit: %v, want a LimitError %q", err, c.limit)
			}
			var se *SyntaxError
			if !errors.As(err, &se) || len(se.Token) > maxToken+3 || len(err.Error()) > 400 {
				t.Fatalf("error %q: want a SyntaxError quoting at most %d bytes", err, maxToken)
			}
		})
	}
}

// TestLimitsOnSwitch installs every flow just under a limit on a private
// vswitchd, as the bytes ParseFlow encodes, and checks that the flows just
// over it, as a controller could encode them, are refused by
// CheckInstructions (what canon applies to encoded flows) and that
// vswitchd is the same process at the end.
func TestLimitsOnSwitch(t *testing.T) {
	ctx := testCtx(t, 50*time.Second)
	sb := startSwitch(ctx, t)
	pid := sb.VswitchdPID()
	c, err := ofconn.Dial(ctx, sb.MgmtPath("br0"), ofconn.Options{})
	if err != nil {
		t.Fatalf("dial br0: %v", err)
	}
	defer c.Close()
	cases := limitCases()
	for i, lc := range cases {
		prio := fmt.Sprintf("priority=%d,", 1000+i)
		under, err := ParseFlowBinary(prio + lc.under)
		if err != nil {
			t.Fatalf("%s: %v", lc.name, err)
		}
		if err := CheckInstructions(instructionsOf(t, under)); err != nil {
			t.Fatalf("%s: CheckInstructions refuses the flow under the limit: %v", lc.name, err)
		}
		if err := c.Bundle(ctx, []ofconn.Message{under}); err != nil {
			t.Fatalf("%s: vswitchd refuses the flow under the limit: %v", lc.name, err)
		}
		over := encodeUnchecked(t, lc.over)
		err = CheckInstructions(instructionsOf(t, over))
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != lc.limit {
			t.Fatalf("%s: CheckInstructions on the encoded flow over the limit: %v, want %q", lc.name, err, lc.limit)
		}
	}
	flows, err := c.DumpFlowsRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != len(cases)+1 { // and the bridge's NORMAL flow
		t.Errorf("switch holds %d flows, want %d", len(flows), len(cases)+1)
	}
	if got := sb.VswitchdPID(); got != pid {
		t.Fatalf("vswitchd is pid %d, was %d", got, pid)
	}
}

// instructionsOf returns the instructions of an encoded FLOW_MOD.
func instructionsOf(t *testing.T, fm []byte) []byte {
	t.Helper()
	mlen := int(binary.BigEndian.Uint16(fm[50:]))
	return fm[48+(mlen+7)&^7:]
}

// encodeUnchecked encodes a flow's action list as a controller could, past
// every limit but the depth, which the parser itself enforces; deeper
// lists are built by nestedCloneBytes.
func encodeUnchecked(t *testing.T, line string) []byte {
	t.Helper()
	match, acts, _ := strings.Cut(line, "actions=")
	if strings.Count(acts, "clone(") >= MaxActionDepth-1 {
		inner := "output:1"
		if strings.Contains(acts, "ct(") {
			inner = "ct(commit,exec(set_field:1->ct_mark))"
		}
		n := strings.Count(acts, "clone(")
		b, err := ParseFlowBinary(match + "actions=" + inner)
		if err != nil {
			t.Fatal(err)
		}
		return withApply(b, nestedCloneBytes(n, instructionsOf(t, b)[8:]))
	}
	fs := new(flowScratch)
	fs.cx.mt.reset()
	if match != "" {
		fp, err := parseFlow(match+"actions=drop", nil, fs)
		if err != nil {
			t.Fatal(err)
		}
		fs.fp = *fp
	} else {
		fs.fp = flowParts{priority: defaultPriority}
	}
	is, err := fs.cx.parseActions(acts, 0)
	if err != nil {
		t.Fatal(err)
	}
	fs.fp.is = is
	return fs.fp.appendBinary(nil)
}

// nestedCloneBytes wraps the encoded actions inner in n clone actions.
func nestedCloneBytes(n int, inner []byte) []byte {
	b := inner
	for range n {
		h := make([]byte, 16, 16+len(b))
		binary.BigEndian.PutUint16(h, ofpatVendor)
		binary.BigEndian.PutUint16(h[2:], uint16(16+len(b)))
		binary.BigEndian.PutUint32(h[4:], nxVendor)
		binary.BigEndian.PutUint16(h[8:], nxastClone)
		b = append(h, b...)
	}
	return b
}

// withApply returns the FLOW_MOD fm with its instructions replaced by one
// apply_actions of acts.
func withApply(fm, acts []byte) []byte {
	mlen := int(binary.BigEndian.Uint16(fm[50:]))
	out := append([]byte(nil), fm[:48+(mlen+7)&^7]...)
	out = binary.BigEndian.AppendUint16(out, 4)
	out = binary.BigEndian.AppendUint16(out, uint16(8+len(acts)))
	out = append(out, 0, 0, 0, 0)
	out = append(out, acts...)
	binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
	return out
}

// TestDeepNestingRefusedEarly: a line of nested clones, up to a megabyte,
// is refused as nested too deeply after one pass over it, before the parser
// scans a level (each level of the parser scans the rest of the line: 60,000
// levels took 43 s). The work is counted, not timed: the allocations of a
// refusal, and their bytes, are a few and a few kilobytes whatever the
// length (BenchmarkRefuseDeepClone times it).
func TestDeepNestingRefusedEarly(t *testing.T) {
	for _, n := range []int{MaxActionDepth + 20, 10_000, 60_000, (1<<20 - 20) / 7} {
		line := "actions=" + nestClones(n, "output:1")
		_, err := ParseFlowBinary(line)
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != limitDeep {
			t.Fatalf("%d levels: %v, want %q", n, err, limitDeep)
		}
		const runs = 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			_, _ = ParseFlowBinary(line)
		}
		runtime.ReadMemStats(&after)
		allocs := (after.Mallocs - before.Mallocs) / runs
		bytes := (after.TotalAlloc - before.TotalAlloc) / runs
		t.Logf("%d levels, %d bytes: %d allocations, %d bytes a refusal", n, len(line), allocs, bytes)
		if allocs > 32 || bytes > 64<<10 {
			t.Errorf("%d levels, %d bytes: %d allocations, %d bytes a refusal; want at most 32 and 64 KiB whatever the length",
				n, len(line), allocs, bytes)
		}
	}
	// The same for a group, whose buckets are action lists.
	_, err := ParseGroupParts("group_id=1,type=all,bucket=actions=" + nestClones(60_000, "output:1"))
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limitDeep {
		t.Fatalf("group: %v, want %q", err, limitDeep)
	}
}

// TestBucketLimits: a bucket's action list is held to the same limits.
func TestBucketLimits(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 20*time.Second)
	group := func(n int) string {
		return "group_id=1,type=all,bucket=actions=clone(output:1," + repeatList("set_field:1->reg1", n-1) + ")"
	}
	if _, err := ofctlParseGroup(ctx, group(2048)); err != nil {
		t.Fatalf("ovs-ofctl refuses the group under the limit: %v", err)
	}
	if _, err := ParseGroupParts(group(2048)); err != nil {
		t.Fatalf("ParseGroupParts refuses the group under the limit: %v", err)
	}
	if _, err := ofctlParseGroup(ctx, group(2049)); err == nil || !strings.Contains(err.Error(), limitTooBig) {
		t.Fatalf("ovs-ofctl on the group over the limit: %v", err)
	}
	_, err := ParseGroupParts(group(2049))
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limitTooBig {
		t.Fatalf("ParseGroupParts on the group over the limit: %v, want %q", err, limitTooBig)
	}
}

// TestOfpactLenKnownActions: every action the parser encodes has a size in
// the model (none falls to the unknown estimate), so the limits are exact
// for what text can say.
func TestOfpactLenKnownActions(t *testing.T) {
	for _, line := range readCorpus(t, "testdata/flows.txt") {
		b, err := ParseFlowBinary(line)
		if err != nil {
			continue
		}
		in := instructionsOf(t, b)
		for len(in) >= 8 {
			n := int(binary.BigEndian.Uint16(in[2:]))
			if typ := binary.BigEndian.Uint16(in); typ == 3 || typ == 4 {
				checkKnown(t, line, in[8:n])
			}
			in = in[n:]
		}
	}
}

func checkKnown(t *testing.T, line string, acts []byte) {
	t.Helper()
	for len(acts) >= 8 {
		n := int(binary.BigEndian.Uint16(acts[2:]))
		a := acts[:n]
		typ := binary.BigEndian.Uint16(a)
		fixed := int(typ) < len(ofpactFixed) && ofpactFixed[typ] != 0
		known := fixed || typ == ofpatSetField
		if typ == ofpatVendor {
			sub := binary.BigEndian.Uint16(a[8:])
			fixed := int(sub) < len(nxOfpactFixed) && nxOfpactFixed[sub] != 0
			switch sub {
			case nxastClone:
				checkKnown(t, line, a[cloneFixed:])
			case nxastCT:
				checkKnown(t, line, a[ctFixed:])
			}
			known = fixed || map[uint16]bool{nxastClone: true, nxastCT: true, nxastLearn: true, nxastLearn2: true,
				nxastNote: true, nxastBundle: true, nxastBundleLoad: true, nxastDecTTLCntIDs: true,
				nxastController2: true, nxastEncap: true}[sub]
		}
		if !known {
			t.Errorf("%q: action %x has no size in the model", line, a)
		}
		acts = acts[n:]
	}
}
