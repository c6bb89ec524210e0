package canon

import (
	"bytes"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// FuzzDecode: no input crashes Decode, and what it accepts is canonical for
// good: a valid entry of its kind, with the same identity, that Decode
// leaves as it is (so desired and dumped forms cannot drift apart through
// canon), that Format never panics on, and that Messages sends in messages
// that each fit a bundle. Seeds: testdata/fuzz/FuzzDecode (kind 0 flow,
// 1 group, 2 meter).
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, k uint8, msg []byte) {
		kind := entry.Kinds[int(k)%len(entry.Kinds)]
		p, id, err := Decode(kind, msg)
		if err != nil {
			return
		}
		if _, id2, err := entry.Identify(kind, p); err != nil || !bytes.Equal(id, id2) {
			t.Fatalf("canonical %s does not identify as itself: %v", kind, err)
		}
		p2, id2, err := Decode(kind, p)
		if err != nil || !bytes.Equal(p, p2) || !bytes.Equal(id, id2) {
			t.Fatalf("canonical %s is not a fixed point (%v):\n%x\n%x", kind, err, p, p2)
		}
		_, _ = Format(kind, p)
		for i, m := range Messages(kind, true, p) {
			if len(m) > MaxMessage || len(m) < headerLen || int(be.Uint16(m[2:])) != len(m) {
				t.Fatalf("message %d of %d bytes, length field %d", i, len(m), be.Uint16(m[2:]))
			}
		}
	})
}
