package replay

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/plan"
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
			var dumped atomic.Int64
			dumped.Store(-1)
			want, err := digestDesired(fs.store, fs.bridge, nil, fs.sw, &dumped)
			if err != nil {
				t.Fatal(err)
			}
			if want.read != len(tc.desired) {
				t.Errorf("read %d desired flows, want %d", want.read, len(tc.desired))
			}
			fs.sw.desired = &want
			for _, s := range tc.skipped {
				fs.skip[plan.Key(entry.KindFlow, s.ID)] = true
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
			if _, err := fs.each(nil, true, func(plan.Op, store.Record) error { changes++; return nil }); err != nil {
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

// TestDigestMoot: once the dump is complete with fewer owned flows than the
// store holds (a vswitchd just restarted), the digest stops reading: the
// replay compares flow by flow anyway, and a restore should not wait for a
// scan it cannot use.
func TestDigestMoot(t *testing.T) {
	desired := make([]entry.Entry, 3000)
	for i := range desired {
		desired[i] = flowEnt(t, 0, uint16(i+1), 0, 0)
	}
	fs := testScan(t, desired, desired[:1], nil)
	var dumped atomic.Int64
	dumped.Store(1)
	d, err := digestDesired(fs.store, fs.bridge, nil, fs.sw, &dumped)
	if !errors.Is(err, errDigestMoot) || d.read > 1024 {
		t.Fatalf("digest of 3000 flows against a dump of 1: read %d, %v; want errDigestMoot after 1024", d.read, err)
	}
	dumped.Store(-1)
	if d, err = digestDesired(fs.store, fs.bridge, nil, fs.sw, &dumped); err != nil || d.read != len(desired) {
		t.Fatalf("digest while the dump runs: read %d, %v; want all %d", d.read, err, len(desired))
	}
}
