package ofctl

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// corpusKind says what a corpus file holds, by its name.
func corpusKind(path string) string {
	switch base := filepath.Base(path); {
	case strings.Contains(base, "groups"):
		return "group"
	case strings.Contains(base, "meters"):
		return "meter"
	}
	return "flow"
}

// allCorpusFiles lists every corpus file of the repository: the package's
// testdata and the production corpus kept with the server's tests.
func allCorpusFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"testdata/*.txt", filepath.Join(productionCorpusDir(), "*.txt")} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 9 {
		t.Fatalf("found only %d corpus files: %v", len(files), files)
	}
	return files
}

// encodeText parses one line of the given kind and encodes it.
func encodeText(kind, line string) ([]byte, error) {
	switch kind {
	case "group":
		gm, err := ParseGroup(line)
		if err != nil {
			return nil, err
		}
		return gm.MarshalBinary()
	case "meter":
		mm, err := ParseMeter(line)
		if err != nil {
			return nil, err
		}
		return mm.MarshalBinary()
	}
	fm, err := ParseFlow(line)
	if err != nil {
		return nil, err
	}
	return fm.MarshalBinary()
}

// formatBytes prints an encoded entry of the given kind as flowctl's dumps
// do.
func formatBytes(kind string, b []byte) (string, error) {
	switch kind {
	case "group":
		return FormatGroupMod(b)
	case "meter":
		return FormatMeterMod(b)
	}
	return FormatFlowMod(b)
}

// roundTrip prints b and parses the text again; it fails unless that gives
// b back and prints the same text again. A meter from the switch compares
// as the restore engine compares meters: the userspace datapath dumps a
// band's rate as its burst size when the burst flag is off.
func roundTrip(t *testing.T, kind, from string, b []byte, fromSwitch bool) {
	t.Helper()
	text, err := formatBytes(kind, b)
	if err != nil {
		t.Errorf("%s: print %x: %v", from, b, err)
		return
	}
	again, err := encodeText(kind, text)
	if err != nil {
		t.Errorf("%s: printed as %q, which does not parse: %v", from, text, err)
		return
	}
	same := bytes.Equal(withoutXid(again), withoutXid(b))
	if kind == "meter" && fromSwitch {
		same = bytes.Equal(entry.Comparable(entry.KindMeter, again), entry.Comparable(entry.KindMeter, b))
	}
	if !same {
		t.Errorf("%s: printed as %q, which parses to different bytes\n  was %x\n  now %x", from, text, b, again)
		return
	}
	if text2, err := formatBytes(kind, again); err != nil || text2 != text {
		t.Errorf("%s: printed as %q, then as %q (%v)", from, text, text2, err)
	}
}

// TestRoundTripCorpora runs every line of every corpus in the repository
// through parse, encode, print (FormatFlowMod, FormatGroupMod,
// FormatMeterMod, what flowctl's dumps print) and parse again, and
// requires the same bytes: everything flowstate stores prints as text that
// reads back as the same entry.
func TestRoundTripCorpora(t *testing.T) {
	n := 0
	for _, file := range allCorpusFiles(t) {
		kind := corpusKind(file)
		for i, line := range readCorpus(t, file) {
			b, err := encodeText(kind, line)
			if err != nil {
				t.Errorf("%s line %d %q: %v", file, i+1, line, err)
				continue
			}
			roundTrip(t, kind, file+": "+line, b, false)
			n++
		}
	}
	t.Logf("%d entries round-tripped", n)
}

// TestRoundTripSwitch installs every corpus with ovs-ofctl into a private
// vswitchd and checks that what the switch holds reads back as the same
// entries: each flow and group vswitchd dumps (the raw OpenFlow 1.5 entry)
// prints and parses back to its own bytes, and so does each meter; and each
// line `ovs-ofctl dump-flows` and `dump-groups` print parses to the bytes
// of the switch's entry.
func TestRoundTripSwitch(t *testing.T) {
	onEachCorpus(t, func(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, _ switchCorpus, flows []flowStat, groups, meters map[uint32][]byte) {
		{
			byKey := map[string][]byte{}
			// ovsText holds, for a flow FormatFlow prints with an enqueue,
			// the text ovs-ofctl prints for it, which reads back with
			// max_len 0 (queue.go): its bytes are not the switch's.
			ovsText := map[string]string{}
			for _, f := range flows {
				roundTrip(t, "flow", "switch flow", f.mod, true)
				byKey[f.key()] = f.mod
				if s, err := formatBytes("flow", f.mod); err == nil && enqueueText.MatchString(s) {
					ovsText[f.key()] = asOVSPrints(s)
				}
			}
			for id, g := range groups {
				roundTrip(t, "group", "switch group "+strconv.FormatUint(uint64(id), 10), g, true)
			}
			for _, m := range meters {
				roundTrip(t, "meter", "switch meter", m, true)
			}

			dumped, err := sb.DumpFlows(ctx, "br0")
			if err != nil {
				t.Fatalf("dump-flows: %v", err)
			}
			if len(dumped) != len(flows) {
				t.Errorf("ovs-ofctl dumps %d flows, the switch holds %d", len(dumped), len(flows))
			}
			for _, l := range dumped {
				b, err := encodeText("flow", strings.TrimSpace(l))
				if err != nil {
					t.Errorf("ovs-ofctl dump-flows line %q does not parse: %v", l, err)
					continue
				}
				st, err := statFromFlowMod(b)
				if err != nil {
					t.Fatal(err)
				}
				if text, ok := ovsText[st.key()]; ok {
					if l = strings.TrimSpace(l); l != text {
						t.Errorf("ovs-ofctl dump-flows line %q is not FormatFlow's %q with its enqueue as OVS prints it", l, text)
					}
					continue
				}
				if want, ok := byKey[st.key()]; !ok || !bytes.Equal(withoutXid(b), withoutXid(want)) {
					t.Errorf("ovs-ofctl dump-flows line %q parses to %x, the switch holds %x", l, b, want)
				}
			}

			dumpedGroups, err := sb.DumpGroups(ctx, "br0")
			if err != nil {
				t.Fatalf("dump-groups: %v", err)
			}
			if len(dumpedGroups) != len(groups) {
				t.Errorf("ovs-ofctl dumps %d groups, the switch holds %d", len(dumpedGroups), len(groups))
			}
			for _, l := range dumpedGroups {
				gm, err := ParseGroup(strings.TrimSpace(l))
				if err != nil {
					t.Errorf("ovs-ofctl dump-groups line %q does not parse: %v", l, err)
					continue
				}
				b, err := gm.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if want := groups[gm.GroupId]; !bytes.Equal(withoutXid(b), withoutXid(want)) {
					t.Errorf("ovs-ofctl dump-groups line %q parses to %x, the switch holds %x", l, b, want)
				}
			}
		}
	})
}
