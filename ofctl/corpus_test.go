package ofctl

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// productionCorpusDir is the Antrea pipeline kept with the server's tests
// (FLOWSTATE_CORPUS names another directory of the same shape).
func productionCorpusDir() string {
	if dir := os.Getenv("FLOWSTATE_CORPUS"); dir != "" {
		return dir
	}
	return filepath.Join("..", "server", "testdata", "antrea-v1.15")
}

// corpusFiles lists the flow files every oracle test runs over: the
// package's own corpus and the production one.
func corpusFiles(t *testing.T) []string {
	t.Helper()
	prod := filepath.Join(productionCorpusDir(), "flows.txt")
	if _, err := os.Stat(prod); err != nil {
		t.Fatalf("production corpus: %v", err)
	}
	return []string{"testdata/flows.txt", "testdata/classes.txt", prod}
}

// withoutXid blanks the xid of an OpenFlow message.
func withoutXid(b []byte) []byte {
	c := append([]byte(nil), b...)
	if len(c) >= 8 {
		copy(c[4:8], []byte{0, 0, 0, 0})
	}
	return c
}

// TestCorpusMatchesOVS checks every corpus line against ovs-ofctl itself:
// our FlowMod bytes equal the bytes ovs-ofctl sends for the line (which are
// the bytes vswitchd returns in dumps, see TestSwitchDump), ovs-ofctl
// decodes our bytes to the same flow, and our printout parses back to the
// same bytes.
func TestCorpusMatchesOVS(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 50*time.Second)
	for _, file := range corpusFiles(t) {
		for i, line := range readCorpus(t, file) {
			t.Run(file+"#"+strconv.Itoa(i+1), func(t *testing.T) {
				fm, err := ParseFlow(line)
				if err != nil {
					t.Fatalf("ParseFlow(%q): %v", line, err)
				}
				got, err := fm.MarshalBinary()
				if err != nil {
					t.Fatalf("marshal: %v", err)
				}
				wantText, want, err := ofctlParse(ctx, line)
				if err != nil {
					t.Fatalf("ovs-ofctl parse-flow %q: %v", line, err)
				}
				if !bytes.Equal(withoutXid(got), withoutXid(want)) {
					t.Errorf("bytes differ for %q\n got %s\nwant %s", line, hex.EncodeToString(got), hex.EncodeToString(want))
				}
				printed, err := ofctlPrint(ctx, got)
				if err != nil {
					t.Fatalf("ovs-ofctl ofp-print: %v", err)
				}
				if normXid(printed) != normXid(wantText) {
					t.Errorf("ovs-ofctl decodes our bytes differently\n ours %s\nwant %s", printed, wantText)
				}
				text, err := FormatFlow(fm)
				if err != nil {
					t.Fatalf("FormatFlow: %v", err)
				}
				again, err := ParseFlow(text)
				if err != nil {
					t.Fatalf("ParseFlow(FormatFlow) %q: %v", text, err)
				}
				b2, _ := again.MarshalBinary()
				if !bytes.Equal(b2, got) {
					t.Errorf("round trip through %q changed the bytes\n got %s\nwant %s", text, hex.EncodeToString(b2), hex.EncodeToString(got))
				}
			})
		}
	}
}

func TestCorpusParsesAsFile(t *testing.T) {
	for _, file := range corpusFiles(t) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		flows, err := ParseFlows(f)
		f.Close()
		if err != nil {
			var n int
			for _, e := range unjoin(err) {
				t.Errorf("%s: %v", file, e)
				n++
			}
		}
		if want := len(readCorpus(t, file)); len(flows) != want {
			t.Errorf("%s: parsed %d flows, want %d", file, len(flows), want)
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{errors.Unwrap(err)}
}
