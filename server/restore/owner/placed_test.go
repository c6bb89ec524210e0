package owner

import "testing"

// TestEntriesOn: deletions are learned from a relayed switch only when the
// store's entries were on it: the recorded switch (vswitchd and bridge) of
// the last replay decides, so a bridge created again under the same
// vswitchd is not it; without a record a renewal or a release under the
// vswitchd does; with nothing known, none are.
func TestEntriesOn(t *testing.T) {
	const (
		a, b   = "1@a", "2@b"
		onB    = b + " br-int.mgmt#7@t"
		onBNew = b + " br-int.mgmt#9@u"
	)
	for _, c := range []struct {
		name                                string
		now, bridge, placed, live, released string
		want                                bool
	}{
		{"replayed on it", b, onB, onB, "", "", true},
		{"replayed on another, restarted since", b, onB, a + " br-int.mgmt#7@t", "", "", false},
		{"replayed on it, the bridge created again since", b, onBNew, onB, b, b, false},
		{"a record naming the vswitchd only", b, onB, b, "", "", false},
		{"a renewal under it, replayed on another", b, onB, a + " br-int.mgmt#7@t", b, "", false},
		{"released without a replay (max hold)", b, onB, a + " br-int.mgmt#7@t", "", b, false},
		{"an old store, a renewal under it", b, onB, "", b, "", true},
		{"an old store, released", b, onB, "", "", b, true},
		{"an old store, others", b, onB, "", a, a, false},
		{"nothing known", b, onB, "", "", "", false},
		{"the bridge missing", b, "", onB, "", "", false},
		{"vswitchd unknown", "", "", "", "", "", false},
	} {
		if got := entriesOn(c.now, c.bridge, c.placed, c.live, c.released); got != c.want {
			t.Errorf("%s: entriesOn(%q, %q, %q, %q, %q) = %v, want %v", c.name, c.now, c.bridge, c.placed, c.live, c.released, got, c.want)
		}
	}
}
