package ofctl

import (
	"bytes"
	"errors"
	"testing"
)

// fuzzSeeds are the package's corpus lines and error cases.
func fuzzSeeds(f *testing.F) []string {
	var seeds []string
	for _, file := range []string{"testdata/flows.txt", "testdata/classes.txt", "testdata/tunmetadata.txt"} {
		seeds = append(seeds, readCorpus(f, file)...)
	}
	for _, tc := range errorCases {
		seeds = append(seeds, tc.line)
	}
	return seeds
}

// FuzzParseFlow checks that ParseFlow never panics, reports errors as
// *SyntaxError pointing inside the line, and that whatever parses prints
// with FormatFlow and parses back to the same bytes.
func FuzzParseFlow(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fm, err := ParseFlow(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("ParseFlow(%q) error %v is %T, want *SyntaxError", s, err, err)
			}
			if se.Col < 1 || se.Col > len(s)+1 {
				t.Fatalf("ParseFlow(%q): column %d outside the line", s, se.Col)
			}
			return
		}
		b, err := fm.MarshalBinary()
		if err != nil {
			t.Fatalf("marshal %q: %v", s, err)
		}
		text, err := FormatFlow(fm)
		if err != nil {
			t.Fatalf("FormatFlow(ParseFlow(%q)): %v", s, err)
		}
		again, err := ParseFlow(text)
		if err != nil {
			t.Fatalf("ParseFlow(FormatFlow(ParseFlow(%q))) = ParseFlow(%q): %v", s, text, err)
		}
		b2, err := again.MarshalBinary()
		if err != nil {
			t.Fatalf("marshal %q: %v", text, err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("%q printed as %q encodes differently:\n%x\n%x", s, text, b, b2)
		}
	})
}

// FuzzFormatFlowBytes checks that printing arbitrary FLOW_MOD bytes, as a
// switch or a client might send them, never panics.
func FuzzFormatFlowBytes(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		if fm, err := ParseFlow(s); err == nil {
			if b, err := fm.MarshalBinary(); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := FormatFlowMod(b); err == nil {
			// Whatever prints must be text ParseFlow can at least read
			// without panicking.
			_, _ = ParseFlow(s)
		}
		fm, err := DecodeFlowMod(b)
		if err != nil {
			return
		}
		b1, err := fm.MarshalBinary()
		if err != nil {
			t.Fatalf("DecodeFlowMod(%x) does not marshal: %v", b, err)
		}
		fm2, err := DecodeFlowMod(b1)
		if err != nil {
			t.Fatalf("DecodeFlowMod(MarshalBinary(DecodeFlowMod(%x))): %v", b, err)
		}
		if b2, err := fm2.MarshalBinary(); err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("decode and encode is not stable for %x: %x then %x (%v)", b, b1, b2, err)
		}
		_, _ = FormatFlow(fm)
	})
}
