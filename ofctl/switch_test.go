package ofctl

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// switchCorpus is a flow file with the groups and meters its flows use.
type switchCorpus struct {
	name                  string
	flows, groups, meters string
}

// TestSwitchDump installs each corpus with ovs-ofctl into a private
// vswitchd and checks that (1) the flows vswitchd dumps, rebuilt as FLOW_MODs
// from the raw OpenFlow 1.5 entries, equal our encoding of every line byte for byte
// (match, instructions, table, priority, cookie, timeouts, flags,
// importance), and (2) `ovs-ofctl --no-stats dump-flows` prints exactly what
// FormatFlow prints.
func TestSwitchDump(t *testing.T) {
	onEachCorpus(t, func(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, c switchCorpus, got []flowStat, gotGroups, gotMeters map[uint32][]byte) {
		{
			checkGroupsAndMeters(t, sb, c, gotGroups, gotMeters)

			f, err := os.Open(c.flows)
			if err != nil {
				t.Fatal(err)
			}
			flows, err := ParseFlows(f)
			f.Close()
			if err != nil {
				t.Fatalf("ParseFlows: %v", err)
			}
			want := map[string]flowStat{}
			lineOf := map[string]string{}
			var wantText []string
			for _, fl := range flows {
				b, err := fl.Mod.MarshalBinary()
				if err != nil {
					t.Fatalf("line %d: marshal: %v", fl.Line, err)
				}
				st, err := statFromFlowMod(b)
				if err != nil {
					t.Fatalf("line %d: %v", fl.Line, err)
				}
				if prev, dup := lineOf[st.key()]; dup {
					t.Fatalf("line %d %q replaces %q on the switch: make corpus flows unique", fl.Line, fl.Text, prev)
				}
				want[st.key()], lineOf[st.key()] = st, fl.Text
				s, err := FormatFlow(fl.Mod)
				if err != nil {
					t.Fatalf("line %d: FormatFlow: %v", fl.Line, err)
				}
				wantText = append(wantText, asOVSPrints(s))
			}

			t.Logf("switch flows %d, corpus flows %d, text lines %d", len(got), len(want), len(wantText))
			if len(got) != len(want) {
				t.Errorf("switch holds %d flows, corpus has %d", len(got), len(want))
			}
			for _, g := range got {
				w, ok := want[g.key()]
				if !ok {
					t.Errorf("switch flow table=%d priority=%d match=%x matches no corpus line (match encoded differently?)", g.table, g.priority, g.match)
					continue
				}
				line := lineOf[g.key()]
				if !bytes.Equal(g.instructions, w.instructions) {
					t.Errorf("%q: instructions differ\n  switch %s\n    ours %s", line, hex.EncodeToString(g.instructions), hex.EncodeToString(w.instructions))
				}
				if g.cookie != w.cookie || g.idle != w.idle || g.hard != w.hard || g.imp != w.imp || g.flags != w.flags {
					t.Errorf("%q: attributes differ: switch cookie=%#x idle=%d hard=%d importance=%d flags=%#x, ours cookie=%#x idle=%d hard=%d importance=%d flags=%#x",
						line, g.cookie, g.idle, g.hard, g.imp, g.flags, w.cookie, w.idle, w.hard, w.imp, w.flags)
				}
			}

			// The switch's own entries, decoded without loss, encode and
			// print the same.
			var fromSwitch []string
			for _, g := range got {
				fm, err := DecodeFlowMod(g.mod)
				if err != nil {
					t.Fatalf("DecodeFlowMod(%x): %v", g.mod, err)
				}
				b, err := fm.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, g.mod) {
					t.Errorf("DecodeFlowMod changed entry %x into %x", g.mod, b)
				}
				s, err := FormatFlow(fm)
				if err != nil {
					t.Fatalf("FormatFlow(DecodeFlowMod(%x)): %v", g.mod, err)
				}
				fromSwitch = append(fromSwitch, asOVSPrints(s))
			}
			sort.Strings(fromSwitch)

			dumped, err := sb.DumpFlows(ctx, "br0")
			if err != nil {
				t.Fatalf("dump-flows: %v", err)
			}
			for i := range dumped {
				dumped[i] = strings.TrimSpace(dumped[i])
			}
			sort.Strings(dumped)
			sort.Strings(wantText)
			if strings.Join(fromSwitch, "\n") != strings.Join(dumped, "\n") {
				missing, extra := diffSets(fromSwitch, dumped)
				t.Errorf("FormatFlow of the switch's entries differs from ovs-ofctl dump-flows\n  only ours:\n    %s\n  only ovs-ofctl:\n    %s",
					strings.Join(missing, "\n    "), strings.Join(extra, "\n    "))
			}
			if strings.Join(dumped, "\n") != strings.Join(wantText, "\n") {
				missing, extra := diffSets(wantText, dumped)
				t.Errorf("FormatFlow differs from ovs-ofctl dump-flows\n  only ours:\n    %s\n  only ovs-ofctl:\n    %s",
					strings.Join(missing, "\n    "), strings.Join(extra, "\n    "))
			}
		}
	})
}

// onEachCorpus installs each corpus of switchCorpora in turn into one
// private vswitchd, with ovs-ofctl, and runs check (as a subtest) with what
// the switch then holds.
func onEachCorpus(t *testing.T, check func(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, c switchCorpus, flows []flowStat, groups, meters map[uint32][]byte)) {
	ctx := testCtx(t, 55*time.Second)
	sb := startSwitch(ctx, t)
	for _, c := range switchCorpora() {
		t.Run(c.name, func(t *testing.T) {
			installCorpus(ctx, t, sb, c)
			flows, groups, meters := dumpSwitch(ctx, t, sb)
			check(ctx, t, sb, c, flows, groups, meters)
		})
	}
}

// startSwitch starts a private vswitchd with one bridge, br0.
func startSwitch(ctx context.Context, t *testing.T) *sandbox.Sandbox {
	t.Helper()
	needOVS(t, "ovs-vswitchd", "ovsdb-server", "ovsdb-tool", "ovs-vsctl")
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	if err := sb.AddBridge(ctx, "br0"); err != nil {
		t.Fatalf("add bridge: %v", err)
	}
	return sb
}

// switchCorpora lists the flow files with their groups and meters: the
// package's own and the production one.
func switchCorpora() []switchCorpus {
	dir := productionCorpusDir()
	return []switchCorpus{
		{"own", "testdata/flows.txt", "testdata/groups.txt", "testdata/meters.txt"},
		{"classes", "testdata/classes.txt", "testdata/classes-groups.txt", "testdata/classes-meters.txt"},
		{"antrea", filepath.Join(dir, "flows.txt"), filepath.Join(dir, "groups.txt"), filepath.Join(dir, "meters.txt")},
	}
}

// installCorpus replaces br0's flows, groups and meters with a corpus,
// installed by ovs-ofctl itself.
func installCorpus(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, c switchCorpus) {
	t.Helper()
	for _, args := range [][]string{{"del-flows", "br0"}, {"del-groups", "br0"}, {"del-meters", "br0"}} {
		if out, err := sb.Ofctl(ctx, args...); err != nil {
			t.Fatalf("ovs-ofctl %v: %v %s", args, err, out)
		}
	}
	for _, l := range readCorpus(t, c.meters) {
		if out, err := sb.Ofctl(ctx, "add-meter", "br0", l); err != nil {
			t.Fatalf("add-meter %q: %v %s", l, err, out)
		}
	}
	if out, err := sb.Ofctl(ctx, "add-groups", "br0", c.groups); err != nil {
		t.Fatalf("add-groups: %v %s", err, out)
	}
	if out, err := sb.Ofctl(ctx, "add-flows", "br0", c.flows); err != nil {
		t.Fatalf("add-flows: %v %s", err, out)
	}
}

// diffSets returns the elements only in a and only in b.
func diffSets(a, b []string) (onlyA, onlyB []string) {
	in := func(list []string) map[string]int {
		m := map[string]int{}
		for _, s := range list {
			m[s]++
		}
		return m
	}
	ma, mb := in(a), in(b)
	for _, s := range a {
		if mb[s] == 0 {
			onlyA = append(onlyA, s)
		}
	}
	for _, s := range b {
		if ma[s] == 0 {
			onlyB = append(onlyB, s)
		}
	}
	return onlyA, onlyB
}

// checkGroupsAndMeters compares the switch's groups and meters, as the
// GROUP_MOD/METER_MOD messages rebuilt from its dumps and as ovs-ofctl prints
// them, with ParseGroup/ParseMeter and FormatGroupMod/FormatMeterMod.
func checkGroupsAndMeters(t *testing.T, sb *sandbox.Sandbox, c switchCorpus, gotGroups, gotMeters map[uint32][]byte) {
	t.Helper()
	ctx := testCtx(t, 20*time.Second)
	var wantGroupText []string
	groups := readCorpus(t, c.groups)
	for _, l := range groups {
		gm, err := ParseGroup(l)
		if err != nil {
			t.Fatalf("ParseGroup(%q): %v", l, err)
		}
		b, err := gm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := gotGroups[gm.GroupId]; !ok || !bytes.Equal(got, b) {
			t.Errorf("group %q: switch %x, ours %x", l, got, b)
		}
		text, err := FormatGroupMod(b)
		if err != nil {
			t.Fatalf("FormatGroupMod(%q): %v", l, err)
		}
		wantGroupText = append(wantGroupText, text)
	}
	if len(gotGroups) != len(groups) {
		t.Errorf("switch holds %d groups, corpus has %d", len(gotGroups), len(groups))
	}
	dumped, err := sb.DumpGroups(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range dumped {
		dumped[i] = strings.TrimSpace(dumped[i])
	}
	sort.Strings(dumped)
	sort.Strings(wantGroupText)
	if a, b := diffSets(wantGroupText, dumped); len(a)+len(b) > 0 {
		t.Errorf("FormatGroupMod differs from ovs-ofctl dump-groups\n  only ours:\n    %s\n  only ovs-ofctl:\n    %s",
			strings.Join(a, "\n    "), strings.Join(b, "\n    "))
	}

	meters := readCorpus(t, c.meters)
	for _, l := range meters {
		mm, err := ParseMeter(l)
		if err != nil {
			t.Fatalf("ParseMeter(%q): %v", l, err)
		}
		b, err := mm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		// The datapath stores a band's rate as its burst size when the
		// burst flag is off, and dumps it so: compare as the engine does.
		if got, ok := gotMeters[mm.MeterId]; !ok ||
			!bytes.Equal(entry.Comparable(entry.KindMeter, got), entry.Comparable(entry.KindMeter, b)) {
			t.Errorf("meter %q: switch %x, ours %x", l, got, b)
		}
		text, err := FormatMeterMod(b)
		if err != nil {
			t.Fatalf("FormatMeterMod(%q): %v", l, err)
		}
		if text != l {
			t.Errorf("FormatMeterMod(ParseMeter(%q)) = %q", l, text)
		}
	}
	if len(gotMeters) != len(meters) {
		t.Errorf("switch holds %d meters, corpus has %d", len(gotMeters), len(meters))
	}
}

// flowStat is what identifies and defines a flow, read from an encoded
// FLOW_MOD.
type flowStat struct {
	table                            uint8
	priority, idle, hard, flags, imp uint16
	cookie                           uint64
	match, instructions              []byte // match with its ofp_match header and padding
	mod                              []byte // the FLOW_MOD itself
}

// key identifies a flow as OVS does with --strict: table, priority, match.
func (f flowStat) key() string {
	return fmt.Sprintf("%d/%d/%x", f.table, f.priority, f.match)
}

// statFromFlowMod extracts a flowStat from an encoded FLOW_MOD.
func statFromFlowMod(b []byte) (flowStat, error) {
	if len(b) < 56 {
		return flowStat{}, fmt.Errorf("flow mod too short")
	}
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	end := 48 + (mlen+7)/8*8
	if end > len(b) {
		return flowStat{}, fmt.Errorf("bad match length")
	}
	return flowStat{
		cookie: binary.BigEndian.Uint64(b[8:]), table: b[24],
		idle: binary.BigEndian.Uint16(b[26:]), hard: binary.BigEndian.Uint16(b[28:]),
		priority: binary.BigEndian.Uint16(b[30:]), flags: binary.BigEndian.Uint16(b[44:]),
		imp: binary.BigEndian.Uint16(b[46:]), match: b[48:end], instructions: b[end:], mod: b,
	}, nil
}

// dumpSwitch reads br0's flows, groups and meters over OpenFlow 1.5 with
// flowstate's own driver, as the ADD messages it rebuilds from the raw dump
// entries (no libOpenflow decoding).
func dumpSwitch(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) (flows []flowStat, groups, meters map[uint32][]byte) {
	t.Helper()
	c, err := ofconn.Dial(ctx, sb.MgmtPath("br0"), ofconn.Options{})
	if err != nil {
		t.Fatalf("dial br0: %v", err)
	}
	defer c.Close()
	fs, err := c.DumpFlowsRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		m, err := f.FlowMod()
		if err != nil {
			t.Fatal(err)
		}
		st, err := statFromFlowMod(m)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, st)
	}
	gs, err := c.DumpGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	groups = map[uint32][]byte{}
	for _, g := range gs {
		m, err := g.GroupMod()
		if err != nil {
			t.Fatal(err)
		}
		groups[g.ID()] = m
	}
	ms, err := c.DumpMeters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meters = map[uint32][]byte{}
	for _, mt := range ms {
		m, err := mt.MeterMod()
		if err != nil {
			t.Fatal(err)
		}
		meters[mt.ID()] = m
	}
	return flows, groups, meters
}
