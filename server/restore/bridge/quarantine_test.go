package bridge

import (
	"fmt"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// TestQuarantineSet: counts per module, kind and reason follow adds and
// removes, a re-added key moves to its new cause, the sample puts the
// crashing entries first and is bounded, and reset empties the set.
func TestQuarantineSet(t *testing.T) {
	var q Quarantine
	now := time.Now()
	for i := range 10 {
		q.add(plan.Key(entry.KindFlow, []byte{7, 0, byte(i)}), entry.KindFlow, "pod", "OFPFMFC_TABLE_FULL (predicted)", now, true)
	}
	q.add(plan.Key(entry.KindGroup, []byte{0, 0, 0, 5}), entry.KindGroup, "pipeline", "OFPGMFC_BAD_BUCKET", now, false)
	if q.Len() != 11 {
		t.Fatalf("len %d, want 11", q.Len())
	}
	causes := q.Causes()
	if len(causes) != 2 || causes[0].Module != "pipeline" || causes[0].Entries != 1 || causes[1].Entries != 10 {
		t.Fatalf("causes %+v", causes)
	}
	k3 := plan.Key(entry.KindFlow, []byte{7, 0, 3})
	q.add(k3, entry.KindFlow, "pod", poison.ReasonPoisoned, now, false)
	if reason, predicted, ok := q.Reason(k3); !ok || predicted || reason != poison.ReasonPoisoned {
		t.Fatalf("re-added entry: %q %v %v", reason, predicted, ok)
	}
	if c := q.Causes(); len(c) != 3 || c[1].Entries != 9 || c[2].Entries != 1 {
		t.Fatalf("causes after a re-add %+v", c)
	}
	v := q.version
	if !q.remove(plan.Key(entry.KindFlow, []byte{7, 0, 0})) || q.remove(plan.Key(entry.KindFlow, []byte{7, 0, 0})) || q.version == v {
		t.Fatal("remove: want true once, then false, and a new version")
	}
	s := q.sample(4, func(k string) bool { return k == k3 })
	if len(s) != 4 || s[0].key != k3 || s[0].reason != poison.ReasonPoisoned {
		t.Fatalf("sample %+v: want 4, the crashing entry first", s)
	}
	for i := 2; i < len(s); i++ {
		if s[i-1].key > s[i].key {
			t.Fatalf("sample not in key order after the first: %+v", s)
		}
	}
	q.reset()
	if q.Len() != 0 || len(q.Causes()) != 0 || q.Has(k3) {
		t.Fatal("reset left entries")
	}
}

// TestQuarantineStrings: past the table's capacity, distinct reasons share
// the last slot instead of growing it.
func TestQuarantineStrings(t *testing.T) {
	var tab strTable
	for i := range maxQuarantineStrings + 10 {
		tab.intern(fmt.Sprint("reason ", i))
	}
	if len(tab.strs) != maxQuarantineStrings {
		t.Fatalf("%d strings kept, want %d", len(tab.strs), maxQuarantineStrings)
	}
	if got := tab.get(tab.intern("another")); got != tab.strs[maxQuarantineStrings-1] {
		t.Fatalf("overflow got %q", got)
	}
}
