package ofctl

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// groupCorpora lists the group files: the package's own and the production
// one.
func groupCorpora(t *testing.T) []string {
	t.Helper()
	p := filepath.Join(productionCorpusDir(), "groups.txt")
	if !fileExists(p) {
		t.Fatalf("production corpus: %s is missing", p)
	}
	return []string{"testdata/groups.txt", p}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var groupAddRE = regexp.MustCompile(`(?m)^ ADD (.*)$`)

// TestGroupsMatchOVS checks every corpus group against `ovs-ofctl
// parse-group`: the same bytes, the same text, and a stable round trip.
func TestGroupsMatchOVS(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 30*time.Second)
	for _, file := range groupCorpora(t) {
		for _, line := range readCorpus(t, file) {
			t.Run(line, func(t *testing.T) {
				gm, err := ParseGroup(line)
				if err != nil {
					t.Fatalf("ParseGroup: %v", err)
				}
				got, err := gm.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				again, _ := gm.MarshalBinary()
				if !bytes.Equal(got, again) {
					t.Errorf("MarshalBinary is not repeatable: %x then %x", got, again)
				}
				out, err := ofctlCmd(ctx, "-mmmmm", "parse-group", line)
				if err != nil {
					t.Fatal(err)
				}
				want, err := hexDump(out)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(withoutXid(got), withoutXid(want)) {
					t.Errorf("bytes differ\n got %s\nwant %s", hex.EncodeToString(got), hex.EncodeToString(want))
				}
				text, err := FormatGroupMod(got)
				if err != nil {
					t.Fatalf("FormatGroupMod: %v", err)
				}
				if m := groupAddRE.FindStringSubmatch(out); m == nil || m[1] != text {
					t.Errorf("FormatGroupMod = %q, ovs-ofctl prints %q", text, m)
				}
				gm2, err := ParseGroup(text)
				if err != nil {
					t.Fatalf("ParseGroup(%q): %v", text, err)
				}
				if b2, _ := gm2.MarshalBinary(); !bytes.Equal(b2, got) {
					t.Errorf("round trip through %q changed the bytes", text)
				}
			})
		}
	}
}

// ofctlCmd runs ovs-ofctl -O OpenFlow15 with args and returns its output.
func ofctlCmd(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...).CombinedOutput()
	if err != nil {
		return "", &ofctlError{strings.TrimSpace(string(out))}
	}
	return string(out), nil
}

// hexDump extracts the bytes of ovs-ofctl's hex dump lines.
func hexDump(out string) ([]byte, error) {
	var hx strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if m := hexDumpLine.FindStringSubmatch(l); m != nil {
			hx.WriteString(strings.NewReplacer(" ", "", "-", "").Replace(m[1]))
		}
	}
	return hex.DecodeString(hx.String())
}

func TestGroupAndMeterErrors(t *testing.T) {
	cases := []struct {
		name, line string
		meter      bool
		col        int
		token, msg string
	}{
		{"no group id", "type=all,bucket=output:1", false, 10, "", "must specify a group_id"},
		{"no type", "group_id=1,bucket=output:1", false, 12, "", "must specify a type"},
		{"bad type", "group_id=1,type=foo", false, 17, "foo", "invalid group type"},
		{"weight outside select", "group_id=1,type=all,bucket=weight:5,output:1", false, 28, "weight:5", "only select groups"},
		{"two indirect buckets", "group_id=1,type=indirect,bucket=output:1,bucket=output:2", false, 1, "group_id=1,type=indirect,bucket=output:1,bucket=output:2", "at most one bucket"},
		{"duplicate bucket id", "group_id=1,type=all,bucket=bucket_id:0,output:1,bucket=output:2", false, 56, "output:2", "duplicate bucket id 0"},
		{"bucket without actions", "group_id=1,type=all,bucket=weight:0", false, 28, "weight:0", "bucket must specify actions"},
		{"bad bucket action", "group_id=1,type=all,bucket=actions=foo", false, 36, "foo", "unknown action"},
		{"instruction in bucket", "group_id=1,type=all,bucket=goto_table:1", false, 28, "goto_table:1", "not allowed in a group bucket"},
		{"no meter id", "pktps,band=type=drop,rate=1", true, 1, "pktps,band=type=drop,rate=1", "must specify 'meter'"},
		{"no rate unit", "meter=1,band=type=drop,rate=1", true, 1, "meter=1,band=type=drop,rate=1", "either 'kbps' or 'pktps'"},
		{"no bands", "meter=1,kbps", true, 13, "", "must specify bands"},
		{"bad band type", "meter=1,kbps,band=type=foo,rate=1", true, 24, "foo", "unknown band type"},
		{"burst without flag", "meter=1,kbps,band=type=drop,rate=1,burst_size=5", true, 19, "type=drop,rate=1,burst_size=5", "only when 'burst' flag"},
		{"meter id zero", "meter=0,kbps,band=type=drop,rate=1", true, 7, "0", "invalid meter id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.meter {
				_, err = ParseMeter(tc.line)
			} else {
				_, err = ParseGroup(tc.line)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T), want *SyntaxError", err, err)
			}
			if se.Col != tc.col || se.Token != tc.token || !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("got col %d token %q msg %q; want col %d token %q msg containing %q", se.Col, se.Token, se.Msg, tc.col, tc.token, tc.msg)
			}
		})
	}
}

func TestMeterFormats(t *testing.T) {
	for _, line := range []string{
		"meter=256,pktps,band=type=drop,rate=100",
		"meter=2,kbps,burst,stats,band=type=drop,rate=1000,burst_size=100",
		"meter=3,pktps,band=type=dscp_remark,rate=10,prec_level=1,type=drop,rate=20",
		"meter=controller,pktps,band=type=drop,rate=5",
	} {
		mm, err := ParseMeter(line)
		if err != nil {
			t.Fatalf("ParseMeter(%q): %v", line, err)
		}
		b, err := mm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := FormatMeterMod(b); err != nil || got != line {
			t.Errorf("FormatMeterMod(ParseMeter(%q)) = %q, %v", line, got, err)
		}
	}
	if s, err := FormatMeterMod([]byte{6, 29, 0, 17, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0}); err == nil {
		t.Errorf("FormatMeterMod of a truncated band = %q, want an error", s)
	}
}

// FuzzParseGroup checks that ParseGroup never panics and that what parses
// prints and parses back to the same bytes.
func FuzzParseGroup(f *testing.F) {
	for _, file := range []string{"testdata/groups.txt", "testdata/classes-groups.txt"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			f.Add(l)
		}
	}
	// Buckets at and past OVS's limits on actions.
	f.Add("group_id=1,type=all,bucket=actions=" + nestClones(MaxActionDepth-1, "output:1"))
	f.Add("group_id=1,type=all,bucket=actions=" + nestClones(MaxActionDepth, "output:1"))
	f.Add("group_id=1,type=all,bucket=actions=learn(table=1," + repeatList("NXM_OF_VLAN_TCI[0..11]", 1638) + ")")
	f.Fuzz(func(t *testing.T, s string) {
		gm, err := ParseGroup(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Col < 1 || se.Col > len(s)+1 {
				t.Fatalf("ParseGroup(%q): bad error %v", s, err)
			}
			return
		}
		b, err := gm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		text, err := FormatGroupMod(b)
		if err != nil {
			t.Fatalf("FormatGroupMod(ParseGroup(%q)): %v", s, err)
		}
		gm2, err := ParseGroup(text)
		if err != nil {
			t.Fatalf("ParseGroup(%q) (printed from %q): %v", text, s, err)
		}
		if b2, _ := gm2.MarshalBinary(); !bytes.Equal(b, b2) {
			t.Fatalf("%q printed as %q encodes differently", s, text)
		}
	})
}

// FuzzParseMeter is FuzzParseGroup for meters.
func FuzzParseMeter(f *testing.F) {
	b, err := os.ReadFile("testdata/meters.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mm, err := ParseMeter(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Col < 1 || se.Col > len(s)+1 {
				t.Fatalf("ParseMeter(%q): bad error %v", s, err)
			}
			return
		}
		b, err := mm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		text, err := FormatMeterMod(b)
		if err != nil {
			t.Fatalf("FormatMeterMod(ParseMeter(%q)): %v", s, err)
		}
		mm2, err := ParseMeter(text)
		if err != nil {
			t.Fatalf("ParseMeter(%q) (printed from %q): %v", text, s, err)
		}
		if b2, _ := mm2.MarshalBinary(); !bytes.Equal(b, b2) {
			t.Fatalf("%q printed as %q encodes differently", s, text)
		}
	})
}
