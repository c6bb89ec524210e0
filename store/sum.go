package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// Checksums (schema 3). Every value of a bucket that holds what may reach the
// switch ends with a CRC-32C (Castagnoli, hardware-assisted on amd64 and
// arm64) over its key and the value before it:
//
//	bridges/<bridge>/flow|group|meter   records (recordVersion 2)
//	stage/<bridge>/flow                 records, as staged
//	mirror/<bridge>/flow|group|meter    payload | sum
//
// The key is covered so that a damaged key (an identity, which is the
// match of a flow) is caught as surely as a damaged payload. bbolt checks
// only its meta pages; a flipped byte inside a leaf page's value passes
// every structural check and would be replayed as it reads.
//
// Open checks the sum of every such value (check.go) and refuses a store
// with one that does not match, naming the bucket and key. A value damaged
// while flowstated runs is found by the read that meets it: the read leaves
// it out, as if it were not stored, and records it (File.Damaged), so the engine
// quarantines it and reports it; nothing damaged is handed to a caller.
// meta, managed and modules hold no sums: their values are small, read at
// Open, and none of them is sent to the switch.

// sumSize is the size of a value's checksum.
const sumSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// valueSum is the checksum of value v (without its sum) stored at key k.
func valueSum(k, v []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, k), castagnoli, v)
}

// appendSum appends the checksum of b[at:], stored at key k, to b.
func appendSum(b []byte, k []byte, at int) []byte {
	return binary.BigEndian.AppendUint32(b, valueSum(k, b[at:]))
}

// sealed returns v with its checksum for key k, in a new slice.
func sealed(k, v []byte) []byte {
	b := make([]byte, 0, len(v)+sumSize)
	return appendSum(append(b, v...), k, 0)
}

// unseal returns v without its checksum, aliasing v, or errChecksum when the
// checksum does not match key k and the rest of v.
func unseal(k, v []byte) ([]byte, error) {
	if len(v) < sumSize {
		return nil, errShortValue
	}
	n := len(v) - sumSize
	if binary.BigEndian.Uint32(v[n:]) != valueSum(k, v[:n]) {
		return nil, errChecksum
	}
	return v[:n], nil
}

// damageError is a value whose checksum does not match.
type damageError string

func (e damageError) Error() string { return string(e) }

const (
	errChecksum   damageError = "checksum mismatch"
	errShortValue damageError = "value shorter than its checksum"
)

// Damage is a stored value a read found damaged while flowstated runs. It is
// left out of every read from then on; Bucket and Key name it, Kind and
// Module say what it claims to be (they may be the damaged part).
type Damage struct {
	// Bucket is the path of its bucket ("bridges/br-int/flow").
	Bucket string
	// Bridge and Kind: where it was read from.
	Bridge string
	Kind   entry.Kind
	// Key is its key as stored (a copy); Module the owner it names, if
	// one could be read.
	Key    []byte
	Module string
	Detail string
	// Since is when a read first found it.
	Since time.Time
}

func (d Damage) String() string {
	return fmt.Sprintf("store: %s key %s: %s", d.Bucket, keyHex(d.Key), d.Detail)
}

// keyHex prints a key for a message: in hex, its first 64 bytes (a damaged
// key length can make it run over its neighbours).
func keyHex(k []byte) string {
	if len(k) > 64 {
		return fmt.Sprintf("%x... (%d bytes)", k[:64], len(k))
	}
	return fmt.Sprintf("%x", k)
}

// damaged is the set of values found damaged since Open, by bucket and key.
type damaged struct {
	mu   sync.Mutex
	seen map[string]Damage
}

// note records damage found in bucket bridge/kind at key k (aliasing the
// store's pages; copied).
func (d *damaged) note(root, bridge string, kind entry.Kind, k, v []byte, err error) {
	bucket := root + "/" + bridge + "/" + kindName(kind)
	id := bucket + "\x00" + string(k)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[id]; ok {
		return
	}
	if d.seen == nil {
		d.seen = map[string]Damage{}
	}
	dm := Damage{Bucket: bucket, Bridge: bridge, Kind: kind, Key: bytes.Clone(k), Detail: err.Error(), Since: time.Now()}
	if root == string(bucketBridges) {
		if owner, _, perr := splitRecord(v); perr == nil {
			dm.Module = string(owner)
		}
	}
	d.seen[id] = dm
}

// Damaged returns the desired entries of bridge found damaged since Open
// ("" for every bridge, mirrors included), ordered by bucket and key. One
// that a write has since replaced (or removed) is taken off.
func (fl File) Damaged(bridge string) []Damage {
	fl.s.damage.mu.Lock()
	out := make([]Damage, 0, len(fl.s.damage.seen))
	for _, d := range fl.s.damage.seen {
		if bridge == "" || (d.Bridge == bridge && strings.HasPrefix(d.Bucket, string(bucketBridges)+"/")) {
			out = append(out, d)
		}
	}
	fl.s.damage.mu.Unlock()
	if len(out) == 0 {
		return out
	}
	var healed []Damage
	_ = fl.s.db.view(func(tx *bolt.Tx) error {
		for _, d := range out {
			if d.healed(tx) {
				healed = append(healed, d)
			}
		}
		return nil
	})
	if len(healed) > 0 {
		fl.s.damage.mu.Lock()
		for _, d := range healed {
			delete(fl.s.damage.seen, d.Bucket+"\x00"+string(d.Key))
		}
		fl.s.damage.mu.Unlock()
		out = slices.DeleteFunc(out, func(d Damage) bool {
			return slices.ContainsFunc(healed, func(h Damage) bool { return h.Bucket == d.Bucket && bytes.Equal(h.Key, d.Key) })
		})
	}
	slices.SortFunc(out, func(a, b Damage) int {
		if c := strings.Compare(a.Bucket, b.Bucket); c != 0 {
			return c
		}
		return bytes.Compare(a.Key, b.Key)
	})
	return out
}

// healed reports whether the value d names is gone or whole again.
func (d Damage) healed(tx *bolt.Tx) bool {
	root := tx.Bucket([]byte(strings.SplitN(d.Bucket, "/", 2)[0]))
	if root == nil {
		return true
	}
	br := root.Bucket([]byte(d.Bridge))
	if br == nil {
		return true
	}
	kb := br.Bucket(kindBuckets[d.Kind])
	if kb == nil {
		return true
	}
	v := kb.Get(d.Key)
	if v == nil {
		return true
	}
	if strings.HasPrefix(d.Bucket, string(bucketBridges)+"/") {
		_, _, err := openRecord(d.Key, v)
		return err == nil
	}
	_, err := unseal(d.Key, v)
	return err == nil
}

func kindName(k entry.Kind) string {
	if b, ok := kindBuckets[k]; ok {
		return string(b)
	}
	return fmt.Sprintf("kind-%d", k)
}
