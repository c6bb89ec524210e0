package restore

import (
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/store"
)

// TestSameFlows checks the digest that lets a no-op reconcile skip the flow
// by flow comparison: it must say "same" exactly when the comparison would
// find nothing to send.
func TestSameFlows(t *testing.T) {
	a, b, c := flowEnt(t, 0, 1, 0, 0), flowEnt(t, 0, 2, 6, 0), flowEnt(t, 3, 2, 0, 0)
	bOther := flowEnt(t, 0, 2, 7, 0) // b's identity, other actions
	tests := []struct {
		name             string
		desired, onSw    []entry.Entry
		foreign, skipped []entry.Entry
		want             bool
	}{
		{name: "equal", desired: []entry.Entry{a, b, c}, onSw: []entry.Entry{c, a, b}, want: true},
		{name: "both empty", want: true},
		{name: "other content", desired: []entry.Entry{a, b, c}, onSw: []entry.Entry{a, bOther, c}},
		{name: "missing on the switch", desired: []entry.Entry{a, b, c}, onSw: []entry.Entry{a, b}},
		{name: "undeclared on the switch", desired: []entry.Entry{a, b}, onSw: []entry.Entry{a, b, c}},
		{name: "empty switch", desired: []entry.Entry{a}},
		{name: "foreign flows do not count", desired: []entry.Entry{a, b}, onSw: []entry.Entry{a, b}, foreign: []entry.Entry{c}, want: true},
		{name: "skipped and absent", desired: []entry.Entry{a, b, c}, onSw: []entry.Entry{a, c}, skipped: []entry.Entry{b}, want: true},
		{name: "skipped but on the switch", desired: []entry.Entry{a, b, c}, onSw: []entry.Entry{a, b, c}, skipped: []entry.Entry{b}},
		{name: "skipped, never declared", desired: []entry.Entry{a}, onSw: []entry.Entry{a}, skipped: []entry.Entry{c}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The groups the flows use are declared, not compared here.
			fs := testScan(t, append([]entry.Entry{groupEnt(t, 6), groupEnt(t, 7)}, tc.desired...), tc.onSw, tc.foreign)
			want, err := digestDesired(fs.store, fs.bridge, nil, fs.sw)
			if err != nil {
				t.Fatal(err)
			}
			if want.read != len(tc.desired) {
				t.Errorf("read %d desired flows, want %d", want.read, len(tc.desired))
			}
			fs.sw.desired = &want
			for _, s := range tc.skipped {
				fs.skip[key(entry.KindFlow, s.ID)] = true
			}
			got, err := fs.sameFlows()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("sameFlows = %v, want %v", got, tc.want)
			}
			// Against the comparison flow by flow.
			fs.sw.pass++
			changes := 0
			if _, err := fs.each(nil, true, func(Op, store.Record) error { changes++; return nil }); err != nil {
				t.Fatal(err)
			}
			for i := range fs.sw.flows {
				if fs.sw.seen[i] != fs.sw.pass {
					changes++
				}
			}
			if (changes == 0) != tc.want {
				t.Errorf("the flow by flow comparison finds %d changes, the digest says same=%v", changes, got)
			}
		})
	}
	t.Run("no digest", func(t *testing.T) {
		fs := testScan(t, []entry.Entry{a}, []entry.Entry{a}, nil)
		if same, err := fs.sameFlows(); err != nil || same {
			t.Fatalf("sameFlows without a digest = %v, %v; want false", same, err)
		}
	})
}
