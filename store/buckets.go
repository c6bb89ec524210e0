package store

import "github.com/flowstate-io/flowstate/entry"

// Bucket and key names, declared once: the tree in doc.go draws where each
// sits, and the file named beside a name holds the code that reads and
// writes it.
var (
	// Top level.
	bucketMeta    = []byte("meta")    // store.go
	bucketBridges = []byte("bridges") // writer.go, entries.go
	bucketModules = []byte("modules") // modules.go
	bucketManaged = []byte("managed") // identity.go
	bucketMirror  = []byte("mirror")  // mirror.go
	bucketAside   = []byte("aside")   // aside.go
	bucketForms   = []byte("forms")   // forms.go
	bucketCrashes = []byte("crashes") // crashes.go
	bucketStage   = []byte("stage")   // stage.go
	bucketTLV     = []byte("tlv")     // tlv.go
	bucketKept    = []byte("kept")    // kept.go
	bucketPlaced  = []byte("placed")  // placed.go
	bucketAhead   = []byte("ahead")   // ahead.go

	// Keys of meta.
	keySchema      = []byte("schema")            // store.go
	keyBootID      = []byte("boot_id")           // boot.go
	keyBootSince   = []byte("boot_since")        // boot.go
	keyGateOpened  = []byte("gate_opened")       // boot.go
	keyReleased    = []byte("released_vswitchd") // release.go
	keyLastRelease = []byte("last_release")      // release.go
	keyStoreID     = []byte("store_id")          // identity.go

	// Buckets of a bridge (under bridges, mirror and stage), and the key of
	// a mirror's hash.
	kindBuckets = map[entry.Kind][]byte{
		entry.KindFlow:  []byte("flow"),
		entry.KindGroup: []byte("group"),
		entry.KindMeter: []byte("meter"),
	}
	bucketRefs = []byte("refs") // refs.go
	keyHash    = []byte("hash") // mirror.go
)
