package ofconn

import "testing"

func TestHelloVersions(t *testing.T) {
	bitmap := func(v uint32) []byte {
		return []byte{6, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	}
	for _, tc := range []struct {
		name string
		f    []byte
		want uint32
	}{
		{"bitmap 1.0 and 1.5", bitmap(1<<1 | 1<<6), 1<<1 | 1<<6},
		{"no elements, 1.3", []byte{4, 0, 0, 8, 0, 0, 0, 1}, 1<<1 | 1<<2 | 1<<3 | 1<<4},
		{"no elements, 1.0", []byte{1, 0, 0, 8, 0, 0, 0, 1}, 1 << 1},
		{"truncated bitmap element", []byte{6, 0, 0, 12, 0, 0, 0, 1, 0, 1, 0, 4}, 0},
		{"short", []byte{6, 0}, 0},
	} {
		if got := HelloVersions(tc.f); got != tc.want {
			t.Errorf("%s: HelloVersions(%x) = %b, want %b", tc.name, tc.f, got, tc.want)
		}
	}
}
