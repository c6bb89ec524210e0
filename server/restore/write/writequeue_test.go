package write

import (
	"fmt"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// TestTakeBounded: a group commit takes queued requests in order up to
// maxBatchEntries entries, a larger request alone, so concurrent large
// requests never add up to one transaction of their sum.
func TestTakeBounded(t *testing.T) {
	q := newWriteQueue()
	sizes := []int{20_000, 20_000, 20_000, 70_000, 1, 1, maxBatchEntries - 2, 1}
	for _, n := range sizes {
		if err := q.push(&writeReq{declared: make([]entry.Entry, n)}); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]int
	for b := q.take(); len(b) > 0; b = q.take() {
		var ns []int
		for _, r := range b {
			if !r.taken {
				t.Fatal("a request taken is not marked taken")
			}
			ns = append(ns, len(r.declared))
		}
		got = append(got, ns)
	}
	want := [][]int{{20_000, 20_000}, {20_000}, {70_000}, {1, 1, maxBatchEntries - 2}, {1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
