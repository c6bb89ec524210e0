package canon

import (
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// BenchmarkDecodeEntryGroup: DecodeEntry of a select group of 64 buckets,
// each with a weight and two actions (a Service group's shape).
func BenchmarkDecodeEntryGroup(b *testing.B) {
	benchDecodeGroup(b, serviceGroup(b, 10, 0, 0, 64))
}

// BenchmarkDecodeEntryGroupLarge: DecodeEntry of a group of 4000 buckets,
// an ADD and its INSERT_BUCKETs.
func BenchmarkDecodeEntryGroupLarge(b *testing.B) {
	p, _, err := Parse(entry.KindGroup, serviceText(10, 4000))
	if err != nil {
		b.Fatal(err)
	}
	benchDecodeGroup(b, p)
}

func benchDecodeGroup(b *testing.B, msg []byte) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEntry(entry.KindGroup, msg); err != nil {
			b.Fatal(err)
		}
	}
}
