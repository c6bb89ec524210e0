// Package owner decides, per managed bridge, what of it the restore engine
// may change (Owners):
//
//   - whether this store manages the bridge at all: it claims the bridge
//     before its first replay, or stands aside from a bridge another store
//     manages or that holds flows this store never declared (owner.go,
//     whose claim states the protocol in numbered steps), and one live
//     flowstated per bridge is ensured by LockBridges;
//   - the cookie space it manages (cookie.go): a store with flows outside
//     it is refused at start (CheckStoreOwned);
//   - what a controller relayed by the guard installed while flowstated was
//     away, learned as its module's by the bridge's first replay instead of
//     overwritten (adopt.go, AdoptRelayed);
//   - what unrecorded controllers behind the OpenFlow proxy installed, left
//     alone by every dump and kept across flowstated restarts on the same
//     vswitchd (kept.go, keptsave.go, Kept).
//
// It reaches the bridges' state through package bridge, the flag and the
// OVSDB client through Flag, and the running vswitchd through Vswitchd; it
// never imports the coordinator. The replay asks it through the engine
// (Check, Learning, KeptFilter); a Learning is stored as a write of the
// bridge's queue (write.Writes.Adopt).
package owner
