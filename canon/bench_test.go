package canon

import (
	"path/filepath"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// BenchmarkDecodeAntrea: Decode (the same work as Opaque) of each flow of
// the production Antrea pipeline, per flow.
func BenchmarkDecodeAntrea(b *testing.B) {
	var ps [][]byte
	for _, l := range corpusLines(&testing.T{}, filepath.Join("..", "server", "testdata", "antrea-v1.15", "flows.txt")) {
		if p, _, err := Parse(entry.KindFlow, l); err == nil {
			ps = append(ps, p)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := Decode(entry.KindFlow, ps[i%len(ps)]); err != nil {
			b.Fatal(err)
		}
	}
}
