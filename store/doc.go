// Package store keeps flowstate's desired state in a bbolt file. It is the only
// package that imports bbolt.
//
// # Layout
//
//	root
//	├── meta
//	│   ├── "schema"   uint32 big endian: the schema version (SchemaVersion);
//	│   │              older stores are migrated at Open (migrations, in order)
//	│   ├── "boot_id"      the host boot id when the store was last opened (boot.go)
//	│   ├── "boot_since"   RFC 3339: when flowstated first started in that boot
//	│   ├── "gate_opened"  the boot id whose cold-start gate last opened
//	│   ├── "released_vswitchd"  pid@start of the vswitchd last released (release.go)
//	│   ├── "last_release" RFC 3339: when that release was (release.go)
//	│   └── "store_id"     a UUID drawn when the store was created (identity.go)
//	├── managed
//	│   └── <bridge>   RFC 3339: when this store first managed the bridge
//	├── modules
//	│   └── <module>   the boot id the module last marked itself ready for
//	├── bridges
//	│   └── <bridge>
//	│       ├── flow   identity -> record (checksummed)
//	│       ├── group  identity -> record (checksummed)
//	│       ├── meter  identity -> record (checksummed)
//	│       └── refs   kind | group or meter id | flow identity -> module
//	├── mirror         (created by the first Mirrors.Set, mirror.go)
//	│   └── <bridge>   an unmanaged bridge, as last dumped
//	│       ├── "hash" SHA-256 of the entries: an unchanged dump is not rewritten
//	│       ├── flow   identity -> payload | sum
//	│       ├── group  identity -> payload | sum
//	│       └── meter  identity -> payload | sum
//	├── aside          (created by the first Identity.SetStoodAside, aside.go)
//	│   └── <bridge>   RFC 3339 \n reason: flowstated stands aside from the bridge until it is adopted
//	├── forms          (created by the first Forms.Put; Forms.Prune drops what no entry leads to)
//	│   └── SHA-256 of a declared payload -> the form the switch gave it
//	├── crashes        (created by the first Crashes.Set, crashes.go)
//	│   └── <bridge>   JSON store.CrashRecord: vswitchd deaths at replays, the digest of the
//	│                  last survived replay, suspects under bisection, entries found to crash it
//	├── stage          (a staged write under way, stage.go; Open deletes it)
//	│   └── <bridge>
//	│       └── flow   the bridge's flows as the write makes them, swapped in by Staged.Commit
//	├── tlv            (created by the first TLVMaps.Update, tlv.go)
//	│   └── <bridge>
//	│       └── index (uint16 big endian, tun_metadata<index>) -> record of class | type | len
//	├── kept           (created by the first Kept.Update, kept.go)
//	│   └── <bridge>   what unrecorded (OpenFlow < 1.5) controllers installed, left alone
//	│       ├── "vswitchd" pid@start of the vswitchd it belongs to | sum
//	│       ├── "all"      sum, present when every undeclared entry is left alone
//	│       ├── id     kind | identity -> sum
//	│       └── rule   table << 16 | priority (uint32 big endian) -> sum
//	├── placed         (created by the first Placed.SetVswitchd, placed.go)
//	│   └── <bridge>   pid@start of the vswitchd its entries were last replayed on | sum
//	└── ahead          (created by the first Writer.SetAhead, ahead.go; Placed.SetVswitchd drops a bridge's)
//	    └── <bridge>   module | 0 | kind and identity -> digest of the switch's copy that a resync
//	                   keeps apart from the store | sum
//
// Identities are those of package entry. refs indexes which flows use which
// group or meter (schema 2), kept in the transaction that writes the flows:
// a group or meter in use cannot be removed (InUseError), and checking
// costs one seek whatever the number of users. A record is
//
//	version (1 byte, 2) | len(module) (1 byte) | module | payload | sum (4 bytes)
//
// where payload is the canonical OpenFlow 1.5 message of the entry and sum a
// CRC-32C (Castagnoli, big endian) over the key and the bytes before it
// (schema 3, sum.go; version 1 records of schemas 1 and 2 had no sum and are
// rewritten at Open, in transactions of sealChunk records, migrate.go). Mirrors hold payloads with the same sum: no
// module owns what flowstated only copies. Adding the
// mirror bucket needed no new schema version: a store without it reads as
// one without mirrors, and an older flowstated ignores it. The same holds for
// forms (forms.go): what OVS made of entries package canon keeps in part as
// sent, learned after flowstated installed them (canon.Forms); for aside
// (aside.go), where an older flowstated would forget only the decisions;
// for tlv (tlv.go), the TLV tables an OpenFlow proxy recorded, which an
// older flowstated would not restore; for kept (kept.go), which an older
// flowstated would not leave alone after its restart (nor did it before);
// for placed (placed.go), which an older flowstated neither writes nor
// reads; and for ahead (ahead.go), which an older flowstated's learning
// after a relay would not consult (nor did it before).
//
// # Stores
//
// Store holds the file (Open, Close, Path) and the write transaction
// (Update and its Writer). Every other concern is a small store reached
// from it, a value that shares its file, with the buckets it reads and
// writes:
//
//	Entries   bridges                     List, All, Get, ScanFlows, RefTargets,
//	                                      EachUser, Counts, PlanPut
//	Identity  meta store_id, managed,     ID, Managed, MarkManaged, SetStoodAside,
//	          aside                       StoodAsideBridges, ClearStoodAside
//	Modules   modules                     SetReady, ReadyBoots, Forget
//	Boots     meta boot_*, gate_opened    Record, SetGateOpened
//	Releases  meta released_vswitchd,     Vswitchd, SetVswitchd, Last, SetLast
//	          last_release
//	Mirrors   mirror                      Set, Get, Bridges, Delete
//	Crashes   crashes                     Get, Set
//	Kept      kept                        Get, Update
//	Placed    placed                      Vswitchd, SetVswitchd
//	Ahead     ahead                       Of (written by Writer.SetAhead, DropAhead, ClearAhead)
//	Forms     forms                       All, Put, Prune
//	TLVMaps   tlv                         Get, Update
//	Staging   stage, spools               NewSpool, Plan, Bound, Stage
//	File      the file as a whole         Preflight, CheckDuration, Migrated,
//	                                      Damaged, Busy, Backup
//
// A consumer declares the few methods it needs, as containerd's do of its
// metadata store, and is handed the store that has them (st.Mirrors()).
//
// # Transactions
//
// Writes go through Update: one read-write transaction, committed durably
// (fsync), in which a Writer makes one or several requests (Put, Sync,
// Delete), so several requests can share one commit (group commit). The
// caller sends the changes the Writer reports to the switch before Update
// returns, so the store commits only what the switch accepted, and nothing
// when it refused; except a pipe's Put of flows (server/restore/write),
// which commits while the switch decides and, refused, takes the commit
// back in the next transaction (Writer.UndoPlanned, undo.go). Code running
// inside an Update must not use the store.
//
// A write too large to hold in memory is staged instead (Staging, stage.go): the
// request comes as a Spool (sorted runs in an unlinked file beside the
// store), is merged with the bridge's flows into the stage bucket in
// transactions of bounded size, and becomes the bridge's flows in one small
// transaction that moves the bucket. The stage bucket needs no schema
// version: an older flowstated ignores it.
//
// # Damage
//
// Open reads the file before bbolt maps it (check.go), verifying the sum of
// every record and mirrored payload, and runs bbolt's consistency check; a
// damaged file fails with a CorruptError that names the damage (the bucket
// and key of a value whose sum does not match) and says how to recover,
// never a panic or a fault. A value found damaged by a read while the store
// is open is left out of every read and reported by File.Damaged (sum.go).
//
// # Operations under way
//
// Every transaction is tracked for its duration (busy.go): File.Busy names the
// oldest, so a store operation that does not return shows as a wedged
// engine. No read transaction waits on a caller that may stall: File.Backup
// spools first, Entries.List and Entries.ScanFlows read in chunks.
package store
