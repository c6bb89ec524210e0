package ofctl

import (
	"bytes"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestParseTLVMap(t *testing.T) {
	m, err := ParseTLVMap("{class=0xffff,type=0,len=4}->tun_metadata0, {class=0x1,type=2,len=124}->tun_metadata63")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[0] != 4 || m[63] != 124 {
		t.Errorf("got %v, want tun_metadata0 4 bytes and tun_metadata63 124", m)
	}
	for _, bad := range []string{"{class=0xffff,type=0,len=5}->tun_metadata0", "{class=1,type=0}->tun_metadata0", "{len=4}->tun_metadata64", "len=4"} {
		if _, err := ParseTLVMap(bad); err == nil {
			t.Errorf("ParseTLVMap(%q) accepted", bad)
		}
	}
	if _, err := ParseFlowTLV("tun_metadata9=1,actions=drop", m); err == nil || !strings.Contains(err.Error(), "NXFMFC_INVALID_TLV_FIELD") {
		t.Errorf("a field outside the map: got %v, want vswitchd's refusal named", err)
	}
	if _, err := ParseFlowTLV("tun_metadata0=0x1122334455,actions=drop", m); err == nil || !strings.Contains(err.Error(), "4 bytes wide") {
		t.Errorf("a value wider than its option: got %v", err)
	}
}

// TestTunMetadataSwitch installs testdata/tunmetadata.txt with ovs-ofctl
// on a bridge with the TLV map of testdata/tunmetadata.tlv and checks that
// ParseFlow encodes every line as ovs-ofctl does, ParseFlowTLV as vswitchd
// holds it, FormatFlowMod prints the switch's flows as ovs-ofctl dump-flows
// does, and those lines read back (with the map) as the switch's bytes.
func TestTunMetadataSwitch(t *testing.T) {
	ctx := testCtx(t, 40*time.Second)
	tlvText, err := os.ReadFile("testdata/tunmetadata.tlv")
	if err != nil {
		t.Fatal(err)
	}
	tlv, err := ParseTLVMap(strings.TrimSpace(string(tlvText)))
	if err != nil {
		t.Fatalf("ParseTLVMap: %v", err)
	}
	lines := readCorpus(t, "testdata/tunmetadata.txt")
	for _, l := range lines {
		fm, err := ParseFlow(l)
		if err != nil {
			t.Fatalf("ParseFlow(%q): %v", l, err)
		}
		got, _ := fm.MarshalBinary()
		if _, want, err := ofctlParse(ctx, l); err != nil || !bytes.Equal(withoutXid(got), withoutXid(want)) {
			t.Errorf("ParseFlow(%q) = %x, ovs-ofctl sends %x (%v)", l, got, want, err)
		}
	}

	sb := startSwitch(ctx, t)
	if out, err := sb.Ofctl(ctx, "add-tlv-map", "br0", strings.TrimSpace(string(tlvText))); err != nil {
		t.Fatalf("add-tlv-map: %v %s", err, out)
	}
	if out, err := sb.Ofctl(ctx, "del-flows", "br0"); err != nil {
		t.Fatalf("del-flows: %v %s", err, out)
	}
	if out, err := sb.Ofctl(ctx, "add-flows", "br0", "testdata/tunmetadata.txt"); err != nil {
		t.Fatalf("add-flows: %v %s", err, out)
	}
	flows, _, _ := dumpSwitch(ctx, t, sb)
	if len(flows) != len(lines) {
		t.Fatalf("switch holds %d flows, corpus has %d", len(flows), len(lines))
	}
	onSwitch := map[string][]byte{}
	var printed []string
	for _, f := range flows {
		onSwitch[f.key()] = f.mod
		s, err := FormatFlowMod(f.mod)
		if err != nil {
			t.Fatalf("FormatFlowMod(%x): %v", f.mod, err)
		}
		printed = append(printed, s)
	}
	// checkTLV parses a line with the map and finds it on the switch.
	checkTLV := func(what, l string) {
		t.Helper()
		fm, err := ParseFlowTLV(l, tlv)
		if err != nil {
			t.Errorf("ParseFlowTLV(%s %q): %v", what, l, err)
			return
		}
		b, _ := fm.MarshalBinary()
		st, err := statFromFlowMod(b)
		if err != nil {
			t.Fatal(err)
		}
		if want := onSwitch[st.key()]; !bytes.Equal(withoutXid(b), withoutXid(want)) {
			t.Errorf("ParseFlowTLV(%s %q) = %x, the switch holds %x", what, l, b, want)
		}
	}
	for _, l := range lines {
		checkTLV("corpus line", l)
	}
	dumped, err := sb.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range dumped {
		dumped[i] = strings.TrimSpace(dumped[i])
		checkTLV("dump-flows line", dumped[i])
	}
	sort.Strings(dumped)
	sort.Strings(printed)
	if a, b := diffSets(printed, dumped); len(a)+len(b) > 0 {
		t.Errorf("FormatFlowMod differs from ovs-ofctl dump-flows\n  only ours:\n    %s\n  only ovs-ofctl:\n    %s",
			strings.Join(a, "\n    "), strings.Join(b, "\n    "))
	}
}

// TestTunMetadataWiderThanMask: a value with bits outside its mask widens
// a field sized by its text, which OVS would print narrower: refused
// (errors_test.go). With a TLV map the option's length fixes the width, so
// the match is the one its masked form gives.
func TestTunMetadataWiderThanMask(t *testing.T) {
	m, err := ParseTLVMap("{class=0xffff,type=0,len=4}->tun_metadata0")
	if err != nil {
		t.Fatal(err)
	}
	enc := func(line string) []byte {
		t.Helper()
		fm, err := ParseFlowTLV(line, m)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		b, err := fm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if a, b := enc("tun_metadata0=0x100/0x1,actions=drop"), enc("tun_metadata0=0/0x1,actions=drop"); !bytes.Equal(a, b) {
		t.Fatalf("with a TLV map, 0x100/0x1 encodes as\n%x\nnot as its masked form 0/0x1\n%x", a, b)
	}
	if _, err := ParseFlow("tun_metadata0=0x100/0x1,actions=drop"); err == nil {
		t.Fatal("without a TLV map, a value wider than its mask is taken")
	}
}
