package owner

import "testing"

// TestEntriesOn: deletions are learned from a relayed vswitchd only when
// the store's entries were on it: the recorded vswitchd of the last replay
// decides; without a record a renewal or a release under it does; with
// nothing known, none are.
func TestEntriesOn(t *testing.T) {
	for _, c := range []struct {
		name                        string
		now, placed, live, released string
		want                        bool
	}{
		{"replayed on it", "2@b", "2@b", "", "", true},
		{"replayed on another, restarted since", "2@b", "1@a", "", "", false},
		{"a renewal under it, replayed on another", "2@b", "1@a", "2@b", "", false},
		{"released without a replay (max hold)", "2@b", "1@a", "", "2@b", false},
		{"an old store, a renewal under it", "2@b", "", "2@b", "", true},
		{"an old store, released", "2@b", "", "", "2@b", true},
		{"an old store, others", "2@b", "", "1@a", "1@a", false},
		{"nothing known", "2@b", "", "", "", false},
		{"vswitchd unknown", "", "", "", "", false},
	} {
		if got := entriesOn(c.now, c.placed, c.live, c.released); got != c.want {
			t.Errorf("%s: entriesOn(%q, %q, %q, %q) = %v, want %v", c.name, c.now, c.placed, c.live, c.released, got, c.want)
		}
	}
}
