package owner

// entriesOn reports whether the store's entries of a bridge are on its
// switch now, so that what it lacks a relayed controller deleted
// (adopt.go). now is the running vswitchd and bridge its switch of the
// bridge (vswitchd and the bridge's incarnation in it,
// ovsconfig.BridgeIdentity); placed is the switch of the bridge's last
// successful replay (store.Placed, recorded by package replay); live the
// vswitchd the guard last saw flowstated renew its lease under
// (Relayed.Live); released the vswitchd a flowstated of this store last
// released.
//
// Every vswitchd start empties a bridge, and so does a bridge deleted and
// created again under the same vswitchd (a managed-recreate of the chaos
// harness: ovs-vsctl del-br, add-br); only the next full replay puts the
// store's entries back: on the switch that held them an entry gone was
// deleted by the controller; on one that started, or was created, while
// flowstated was away it is gone because of that.
func entriesOn(now, bridge, placed, live, released string) bool {
	switch {
	case now == "" || bridge == "":
		return false
	case placed != "":
		// Only the switch of the last full replay holds them: a
		// renewal or a release under another (MaxHold gives up on a
		// bridge that cannot be restored) put nothing on it. A record
		// of a flowstated from before the bridge's incarnation was
		// recorded names the vswitchd only: it matches no switch, and
		// no deletions are learned until the next replay records one.
		return placed == bridge
	default:
		// Nothing recorded: a store of a flowstated from before the
		// record, or a bridge never replayed in full. A renewal or a
		// release under this vswitchd is the best evidence left (it
		// cannot tell a bridge created again under it). With
		// neither, the learning takes no deletions: an entry removed
		// wrongly is an acknowledged write lost for good, while one
		// kept wrongly is back on the switch only until the
		// controller's resync through flowstated deletes it again.
		return live == now || released == now
	}
}
