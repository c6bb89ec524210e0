// Package store keeps flowstate's desired state in a bbolt file. It is the only
// package that imports bbolt.
//
// # Layout
//
//	root
//	├── meta
//	│   ├── "schema"   uint32 big endian: the schema version (SchemaVersion)
//	│   └── "boot_id"  the host boot id when the store was last opened
//	├── modules
//	│   └── <module>   the boot id the module last marked itself ready for
//	└── bridges
//	    └── <bridge>
//	        ├── flow   identity -> record
//	        ├── group  identity -> record
//	        └── meter  identity -> record
//
// Identities are those of package entry. A record is
//
//	version (1 byte, 1) | len(module) (1 byte) | module | payload
//
// where payload is the canonical OpenFlow 1.5 message of the entry.
//
// # Transactions
//
// Every request is one read-write transaction (Put, Sync, Delete), committed durably (fsync). Put
// and Delete take an apply callback that runs inside the transaction before the
// commit: the server sends the change to the switch there, so the store commits
// only what the switch accepted, and nothing when it refused. The callback must
// not use the store.
package store
