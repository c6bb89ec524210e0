package store

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Crash records: what flowstated remembers of the deaths of ovs-vswitchd
// during or shortly after a replay, so a replay never becomes a crash loop
// (server/restore's poison.go says how they are used). One small record per
// bridge, rewritten whole; no schema version: a store without the bucket
// reads as one without records, and an older flowstated ignores it.
// (bucketCrashes, buckets.go)

// CrashRecord is the crash record of one bridge. Every field is optional.
type CrashRecord struct {
	// Deaths are the times vswitchd died during or shortly after a
	// replay, in order, the oldest dropped once out of the window.
	Deaths []time.Time `json:"deaths,omitempty"`
	// Survived is the digest of the entries the switch held after the last
	// replay vswitchd survived (8 bytes per digest bucket), nil when none is
	// known.
	Survived []byte `json:"survived,omitempty"`
	// Dirty is the bitmap of the digest buckets the suspects are drawn
	// from (those that differed from Survived at the second death).
	Dirty []byte `json:"dirty,omitempty"`
	// Suspects are the key ranges still held out, in key order.
	Suspects []SuspectRange `json:"suspects,omitempty"`
	// Probe is the range sent back to the switch and watched, nil when
	// none is.
	Probe *SuspectRange `json:"probe,omitempty"`
	// Poisoned are the entries found to crash vswitchd.
	Poisoned []PoisonedEntry `json:"poisoned,omitempty"`
	// Since is when the suspects were first held out.
	Since time.Time `json:"since,omitzero"`
}

// SuspectRange is the suspects with keys in [Lo, Hi) (Hi empty: no upper
// bound). Bad is true when the range is believed to hold an entry that
// crashes vswitchd (probes then halve it): drawn from the deaths of full
// replays, or what is left of a range a probe died on once its first half
// survived. Only Died proves it.
type SuspectRange struct {
	Lo  []byte `json:"lo,omitempty"`
	Hi  []byte `json:"hi,omitempty"`
	Bad bool   `json:"bad,omitempty"`
	// Died is, on a suspect range, how many suspects the probe of exactly
	// this range sent when vswitchd died on it (0: no probe of it died); on
	// the Probe, how many it sends. A range is named as crashing vswitchd
	// only when Died is 1 (added in schema 3 without a migration: a record
	// without it reads as no dying probe, so the entry is probed alone
	// before it is named).
	Died int `json:"died,omitempty"`
	// Crashed says the death behind Died was a crash by the evidence
	// (exit signal, vswitchd's log), not one no evidence explained: only
	// then is what is left of the range, once a part survived, proven too.
	Crashed bool `json:"crashed,omitempty"`
}

// PoisonedEntry is an entry that crashed vswitchd: its key (kind |
// identity) and a hash of its payload, so a module that changes it lifts
// the quarantine.
type PoisonedEntry struct {
	Key []byte `json:"key"`
	Sum uint64 `json:"sum"`
	// Module and Name (its ovs-ofctl text, at most 200 characters) name
	// it in metrics and logs.
	Module string `json:"module,omitempty"`
	Name   string `json:"name,omitempty"`
}

// Empty reports whether r records nothing.
func (r CrashRecord) Empty() bool {
	return len(r.Deaths) == 0 && r.Survived == nil && len(r.Suspects) == 0 && r.Probe == nil && len(r.Poisoned) == 0
}

// Crashes are the crash records, one a bridge. Store.Crashes makes one.
type Crashes struct{ db *trackedDB }

// Get returns the crash record of bridge (the zero record if none).
func (cr Crashes) Get(bridge string) (CrashRecord, error) {
	var r CrashRecord
	err := cr.db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCrashes)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(bridge))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return CrashRecord{}, fmt.Errorf("store: crash record of %s: %w", bridge, err)
	}
	return r, nil
}

// Set replaces the crash record of bridge, durably; an empty record
// deletes it.
func (cr Crashes) Set(bridge string, r CrashRecord) error {
	var v []byte
	if !r.Empty() {
		var err error
		if v, err = json.Marshal(r); err != nil {
			return fmt.Errorf("store: crash record of %s: %w", bridge, err)
		}
	}
	err := cr.db.update(func(tx *bolt.Tx) error {
		if v == nil {
			b := tx.Bucket(bucketCrashes)
			if b == nil {
				return nil
			}
			return b.Delete([]byte(bridge))
		}
		b, err := tx.CreateBucketIfNotExists(bucketCrashes)
		if err != nil {
			return err
		}
		return b.Put([]byte(bridge), v)
	})
	if err != nil {
		return fmt.Errorf("store: crash record of %s: %w", bridge, err)
	}
	return nil
}
