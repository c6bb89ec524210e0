package entry

import (
	"strings"
	"testing"
)

func TestParseCookieSpace(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want CookieSpace
		err  string
	}{
		{in: "0/0", want: CookieSpace{}},
		{in: "0x1000/0xf000", want: CookieSpace{Value: 0x1000, Mask: 0xf000}},
		{in: "4096/61440", want: CookieSpace{Value: 0x1000, Mask: 0xf000}},
		{in: "0x5", want: CookieSpace{Value: 5, Mask: ^uint64(0)}},
		{in: "0x1001/0xf000", err: "bits outside the mask (0x1)"},
		{in: "x/0", err: "value"},
		{in: "1/y", err: "mask"},
	} {
		got, err := ParseCookieSpace(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("%q: error %v, want one naming the input and %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	s := CookieSpace{Value: 0x1000, Mask: 0xf000}
	if !s.Owns(0x1fff) || s.Owns(0x2000) || s.Owns(0) || !(CookieSpace{}).Owns(42) || s.String() != "0x1000/0xf000" {
		t.Fatalf("Owns/String of %v", s)
	}
}

func FuzzParseCookieSpace(f *testing.F) {
	for _, s := range []string{"0/0", "0x1000/0xf000", "7", "0x1/0x0", "/", "18446744073709551615/18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseCookieSpace(in)
		if err != nil {
			return
		}
		if s.Value&^s.Mask != 0 {
			t.Fatalf("%q: value 0x%x outside mask 0x%x", in, s.Value, s.Mask)
		}
		back, err := ParseCookieSpace(s.String())
		if err != nil || back != s {
			t.Fatalf("%q: %v does not round-trip: %+v, %v", in, s, back, err)
		}
	})
}
