package entry

import (
	"bytes"
	"testing"
)

// FuzzGroupFromDesc: no dumped group description crashes the decoder, and
// a group it reads encodes to a valid group entry that splits back into the
// same buckets. Seeds: testdata/fuzz/FuzzGroupFromDesc.
func FuzzGroupFromDesc(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		g, err := GroupFromDesc(raw)
		if err != nil {
			return
		}
		p, err := g.Encode()
		if err != nil {
			return // too large for an entry
		}
		if _, _, err := Identify(KindGroup, p); err != nil {
			t.Fatalf("encoded group is not a group entry: %v", err)
		}
		var buckets [][]byte
		for _, m := range GroupMessages(p) {
			bs, err := SplitBuckets(m[groupModFixed : groupModFixed+int(be.Uint16(m[16:]))])
			if err != nil {
				t.Fatal(err)
			}
			buckets = append(buckets, bs...)
		}
		if len(buckets) != len(g.Buckets) {
			t.Fatalf("%d buckets back from %d", len(buckets), len(g.Buckets))
		}
		for i := range buckets {
			if !bytes.Equal(buckets[i], g.Buckets[i]) {
				t.Fatalf("bucket %d differs", i)
			}
		}
	})
}
