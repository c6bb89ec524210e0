package ofctl

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// binarySeeds are the lines of the corpora, the error cases and the fuzz
// seeds of FuzzParseFlow.
func binarySeeds(t *testing.T) []string {
	var lines []string
	for _, file := range append(corpusFiles(t), "testdata/tunmetadata.txt") {
		lines = append(lines, readCorpus(t, file)...)
	}
	for _, tc := range errorCases {
		lines = append(lines, tc.line)
	}
	seeds, err := filepath.Glob("testdata/fuzz/FuzzParseFlow/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range seeds {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(string(b)) {
			if q, ok := strings.CutPrefix(strings.TrimSpace(l), "string("); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					lines = append(lines, s)
				}
			}
		}
	}
	// Past 64 KiB libOpenflow's lengths wrap, and ParseFlowBinary keeps
	// its bytes.
	lines = append(lines, "priority=1,actions="+strings.Repeat("set_field:0x1->reg0,", 5000)+"goto_table:1")
	lines = append(lines, "priority=1,actions="+strings.Repeat("output:1,", 6000)+"output:2")
	return lines
}

// TestParseFlowBinary: ParseFlowBinary gives the bytes ParseFlow's
// FlowMod marshals to, and the same errors.
func TestParseFlowBinary(t *testing.T) {
	for _, l := range binarySeeds(t) {
		want, werr := ParseFlow(l)
		got, gerr := ParseFlowBinary(l)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Errorf("%.200s: error %v, want %v", l, gerr, werr)
			continue
		}
		if werr != nil {
			continue
		}
		wb, err := want.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, wb) {
			t.Errorf("%.200s:\n%x\nwant\n%x", l, got, wb)
		}
	}
}

// TestActionSlots: the actions of every corpus flow canonicalise the same
// in a context that keeps only actionSlots of the flow's match, which is
// what makes AppendActionKey a complete cache key.
func TestActionSlots(t *testing.T) {
	n := 0
	for _, l := range binarySeeds(t) {
		b, err := ParseFlowBinary(l)
		if err != nil || len(b) > 0xffff {
			continue
		}
		var fm FlowMatch
		mlen := int(binary.BigEndian.Uint16(b[50:]))
		if _, err := fm.Canonical(nil, b[52:48+mlen], b[24]); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		var reduced match
		for _, s := range actionSlots {
			reduced.v[s], reduced.m[s] = fm.back.v[s], fm.back.m[s]
		}
		full, part := fm.Actions(), &ActionContext{cx: actx{mt: reduced, table: fm.table}}
		for ins := b[48+(mlen+7)/8*8:]; len(ins) > 0; ins = ins[binary.BigEndian.Uint16(ins[2:]):] {
			typ, acts := binary.BigEndian.Uint16(ins), ins[8:binary.BigEndian.Uint16(ins[2:])]
			fcx, pcx := full, part
			switch typ {
			case 3:
				fcx, pcx = full.WriteActions(), part.WriteActions()
			case 4:
			default:
				continue
			}
			for len(acts) > 0 {
				a := acts[:binary.BigEndian.Uint16(acts[2:])]
				acts = acts[len(a):]
				fb, fok := fcx.Canonical(a)
				pb, pok := pcx.Canonical(a)
				if fok != pok || !bytes.Equal(fb, pb) {
					t.Errorf("%s: action %x: %x (%v) in the full context, %x (%v) in the reduced one", l, a, fb, fok, pb, pok)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no action checked")
	}
}
