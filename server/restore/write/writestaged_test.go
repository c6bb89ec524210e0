package write

import (
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// TestStagedNonFlowsAt: a refused bundle position maps back to its change
// whether it falls in a group of several messages ahead of the flows, in
// the flows (added or removed) or in the groups removed after them.
func TestStagedNonFlowsAt(t *testing.T) {
	head := []plan.Change{{Kind: entry.KindGroup, Index: 0}, {Kind: entry.KindGroup, Index: 5}, {Kind: entry.KindGroup, Index: 9}}
	tail := []plan.Change{{Op: plan.OpDelete, Kind: entry.KindGroup, Index: -1, Actual: []byte("g")}}
	nf := stagedNonFlows{head: head, headEnds: []int{3, 4, 7}, tail: tail}
	flows := []int32{1, -1, 2}
	for _, tc := range []struct {
		x    int
		want plan.Change
		ok   bool
	}{
		{0, head[0], true}, {2, head[0], true}, {3, head[1], true}, {4, head[2], true}, {6, head[2], true},
		{7, plan.Change{Op: plan.OpAdd, Kind: entry.KindFlow, Index: 1}, true},
		{8, plan.Change{Op: plan.OpDelete, Kind: entry.KindFlow, Index: -1}, true},
		{9, plan.Change{Op: plan.OpAdd, Kind: entry.KindFlow, Index: 2}, true},
		{10, tail[0], true},
		{11, plan.Change{}, false}, {-1, plan.Change{}, false},
	} {
		got, ok := nf.at(tc.x, flows)
		if ok != tc.ok || got.Kind != tc.want.Kind || got.Op != tc.want.Op || got.Index != tc.want.Index || string(got.Actual) != string(tc.want.Actual) {
			t.Errorf("position %d: %+v %v, want %+v %v", tc.x, got, ok, tc.want, tc.ok)
		}
	}
}
