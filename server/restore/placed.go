package restore

import "log/slog"

// Which vswitchd holds the store's entries.
//
// A bridge's entries are on a vswitchd once a replay of the bridge on it
// succeeded; every vswitchd start empties the bridge, and the next replay
// (flowstated's, on the next connection) puts them back. The learning of a
// relayed controller (adopt.go) needs to know it: on the vswitchd that held
// them, an entry gone was deleted by the controller; on one that started
// while flowstated was away, it is gone because vswitchd restarted. So the
// engine records, durably, the vswitchd of each bridge's last successful
// replay (store.Placed).

// notePlaced records that b's entries are on vswitchd id after a
// successful replay; id is the vswitchd that ran before the replay started,
// and nothing is recorded unless the same one still runs (a vswitchd
// started during the replay never got it). A failed write is logged: the
// record then names an older vswitchd, and the learning takes no deletions
// from this one, the safe side.
func (e *Engine) notePlaced(b *bridge, id string, log *slog.Logger) {
	if id == "" || e.vswitchdIdentity() != id {
		return
	}
	if err := e.cfg.Store.Placed().SetVswitchd(b.name, id); err != nil {
		log.Warn("cannot record the vswitchd the bridge's entries were replayed on: deletions of a controller relayed while flowstated is away will not be learned", "vswitchd", id, "err", err)
	}
}

// entriesOn reports whether the store's entries of a bridge are on the
// running vswitchd now, so that what it lacks a relayed controller deleted
// (adopt.go). placed is the vswitchd of the bridge's last successful replay
// (store.Placed), live the one the guard last saw flowstated renew its
// lease under (Relayed.Live), released the one a flowstated of this store
// last released.
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
