package owner

// entriesOn reports whether the store's entries of a bridge are on the
// running vswitchd now, so that what it lacks a relayed controller deleted
// (adopt.go). now is the running vswitchd; placed is the vswitchd of the
// bridge's last successful replay (store.Placed, recorded by package
// replay); live the one the guard last saw flowstated renew its lease
// under (Relayed.Live); released the one a flowstated of this store last
// released.
//
// Every vswitchd start empties a bridge, and only the next full replay
// puts the store's entries back: on the vswitchd that held them an entry
// gone was deleted by the controller; on one that started while
// flowstated was away it is gone because vswitchd restarted.
func entriesOn(now, placed, live, released string) bool {
	switch {
	case now == "":
		return false
	case placed != "":
		// Only the vswitchd of the last full replay holds them: a
		// renewal or a release under another (MaxHold gives up on a
		// bridge that cannot be restored) put nothing on it.
		return placed == now
	default:
		// Nothing recorded: a store of a flowstated from before the
		// record, or a bridge never replayed in full. A renewal or a
		// release under this vswitchd is the best evidence left. With
		// neither, the learning takes no deletions: an entry removed
		// wrongly is an acknowledged write lost for good, while one
		// kept wrongly is back on the switch only until the
		// controller's resync through flowstated deletes it again.
		return live == now || released == now
	}
}
