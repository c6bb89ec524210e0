package ofctl

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// TestDecTTLForms: dec_ttl and dec_ttl() are two actions. dec_ttl is
// OFPAT_DEC_NW_TTL (an expired TTL goes to controller 0); dec_ttl() is
// NXAST_DEC_TTL_CNT_IDS without controller ids (it goes to none), which
// ovn-controller sends and OVS prints so. Each parses to its own bytes,
// prints back as it was written, and the bytes a controller sends print
// as text that parses back to them. (ovs-ofctl itself reads dec_ttl() as
// dec_ttl.)
func TestDecTTLForms(t *testing.T) {
	for _, c := range []struct {
		text, action string // action: its encoding, in hex
	}{
		{"dec_ttl", "0018000800000000"},
		{"dec_ttl()", "ffff0010000023200015000000000000"},
		{"dec_ttl(0)", "ffff0018000023200015000100000000" + "0000000000000000"},
		{"dec_ttl(1,2)", "ffff0018000023200015000200000000" + "0001000200000000"},
	} {
		t.Run(c.text, func(t *testing.T) {
			want, err := hex.DecodeString(c.action)
			if err != nil {
				t.Fatal(err)
			}
			line := "ip,actions=" + c.text + ",output:1"
			b, err := ParseFlowBinary(line)
			if err != nil {
				t.Fatalf("ParseFlowBinary(%q): %v", line, err)
			}
			if !bytes.Contains(b, want) {
				t.Fatalf("%q encodes as %x: want the action %s", line, b, c.action)
			}
			text, err := FormatFlowMod(b)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, "actions="+c.text+",output:1") {
				t.Fatalf("%q prints as %q", line, text)
			}
			again, err := ParseFlowBinary(text)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("%q parses back as %x (%v), want %x", text, again, err, b)
			}
		})
	}
	// The other spellings keep what they meant: no argument is
	// OFPAT_DEC_NW_TTL, an argument without an id an error, as in OVS.
	for _, text := range []string{"dec_ttl:", "dec_ttl="} {
		b, err := ParseFlowBinary("ip,actions=" + text)
		if err != nil || !bytes.HasSuffix(b, []byte{0, 0x18, 0, 8, 0, 0, 0, 0}) {
			t.Errorf("%q encodes as %x (%v), want OFPAT_DEC_NW_TTL", text, b, err)
		}
	}
	for _, text := range []string{"dec_ttl( )", "dec_ttl(,)"} {
		if _, err := ParseFlowBinary("ip,actions=" + text); err == nil || !strings.Contains(err.Error(), "at least one controller id") {
			t.Errorf("%q: %v, want the error of no controller id", text, err)
		}
	}
}
