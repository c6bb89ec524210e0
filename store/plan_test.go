package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// TestPlanSameAsPut: PlanPut then PutPlanned in a later transaction leaves
// exactly the store (entries and refs index) Put leaves, reports the same
// changes, and refuses what Put refuses with the same error, over random
// requests on a bridge that other modules share.
func TestPlanSameAsPut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 40 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			usual, planned := openTest(t), openTest(t)
			sc := newSharedCase(rng, func(c *sharedCase) {
				switch round % 8 {
				case 5: // another module's identity: refused
					c.req = append(c.req, c.other[rng.IntN(len(c.other))])
					c.req[len(c.req)-1].Module = "a"
				case 6: // a group nobody declared: refused
					c.req = append(c.req, withRef(flow("a", 9, 9, "new"), entry.KindGroup, 77))
				case 7: // a duplicate identity: refused
					c.req = append(c.req, c.req[rng.IntN(len(c.req))])
				}
			})
			req := sc.req
			sc.load(t, usual, planned)
			var want Result
			wantErr := usual.Update(func(w *Writer) error {
				var err error
				want, err = w.Put("br0", "a", req)
				return err
			})
			p, err := planned.Entries().PlanPut("br0", "a", req)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("PlanPut: %v; Put: %v", err, wantErr)
			}
			if err != nil {
				var ee *errdefs.EntryError
				if errors.As(wantErr, &ee) != errors.As(err, &ee) {
					t.Errorf("PlanPut's error %v does not name the entry as Put's (%v) does", err, wantErr)
				}
				return
			}
			if err := planned.Update(func(w *Writer) error { return w.PutPlanned(p) }); err != nil {
				t.Fatal(err)
			}
			got := p.Result
			sameLines(t, dumpStore(t, planned), dumpStore(t, usual))
			sameChanges(t, got.Changed, want.Changed)
			for i, c := range got.Changed {
				if string(c.Old) != string(want.Changed[i].Old) {
					t.Errorf("change %d: old content %q, Put's %q", i, c.Old, want.Changed[i].Old)
				}
			}
		})
	}
}

// TestPlanOnlyFlows: a plan of a group is refused, naming the entry, and
// writes nothing.
func TestPlanOnlyFlows(t *testing.T) {
	s := openTest(t)
	_, err := s.Entries().PlanPut("br0", "lb", []entry.Entry{flow("lb", 1, 1, "x"), groupOrMeter(entry.KindGroup, 1)})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("plan of a group: %v, want ErrInvalidArgument", err)
	}
	if got := dumpStore(t, s); len(got) != 0 {
		t.Fatalf("a refused plan left %q", got)
	}
}

// TestPutPlannedSeveral: plans made against one snapshot, of disjoint
// identities, written by one PutPlanned (in key order across them, merged or
// sorted) leave the store their Puts one after the other leave.
func TestPutPlannedSeveral(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 10 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			usual, planned := openTest(t), openTest(t)
			sc := newSharedCase(rng, nil)
			sc.load(t, usual, planned)
			// Three plans are merged; twelve, more than mergePlans, sorted.
			k := 3
			if round%2 == 1 {
				k = 12
			}
			var parts [][]entry.Entry
			for i := range k {
				parts = append(parts, sc.req[i*len(sc.req)/k:(i+1)*len(sc.req)/k])
			}
			var plans []PutPlan
			for _, part := range parts {
				if err := usual.Update(func(w *Writer) error {
					_, err := w.Put("br0", "a", part)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				p, err := planned.Entries().PlanPut("br0", "a", part)
				if err != nil {
					t.Fatal(err)
				}
				plans = append(plans, p)
			}
			if err := planned.Update(func(w *Writer) error { return w.PutPlanned(plans...) }); err != nil {
				t.Fatal(err)
			}
			sameLines(t, dumpStore(t, planned), dumpStore(t, usual))
		})
	}
}
