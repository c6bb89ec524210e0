package poison

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/store"
)

// digestBuckets is the number of buckets of a survived digest (step 2).
const digestBuckets = 1024

// keyHash and sumHash are the digest's hashes of an entry (step 2): FNV-1a,
// whose low bits mix poorly for keys that differ in their last bytes,
// finished with a mixer (MurmurHash3's fmix64).
func keyHash(k []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(k)
	return fmix(h.Sum64())
}

func sumHash(k, payload []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(k)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(payload)
	return fmix(h.Sum64())
}

func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func digestBucket(k []byte) int { return int(keyHash(k) % digestBuckets) }

// eachDesired calls fn with the key (kind | identity), module and payload
// of every desired entry of bridge, in key order. The slices are valid
// during the call only.
func eachDesired(st Desired, bridge string, fn func(k []byte, module string, payload []byte) error) error {
	var k []byte
	err := st.ScanFlows(bridge, nil, func(rec store.Record) error {
		k = append(append(k[:0], byte(entry.KindFlow)), rec.ID...)
		return fn(k, string(rec.Module), rec.Payload)
	})
	if err != nil {
		return err
	}
	for _, kind := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		var es []entry.Entry
		err := st.List(store.Filter{Bridge: bridge, Kind: kind}, func(_ string, d entry.Entry) error {
			es = append(es, d)
			return nil
		})
		if err != nil {
			return err
		}
		slices.SortFunc(es, func(a, b entry.Entry) int { return bytes.Compare(a.ID, b.ID) })
		for _, d := range es {
			k = append(append(k[:0], byte(kind)), d.ID...)
			if err := fn(k, d.Module, d.Payload); err != nil {
				return err
			}
		}
	}
	return nil
}

// digest computes the digest of the desired entries of bridge (step 2),
// leaving out those for which skip is true.
func digest(st Desired, bridge string, skip func(k string) bool) ([]byte, error) {
	var d [digestBuckets]uint64
	err := eachDesired(st, bridge, func(k []byte, _ string, payload []byte) error {
		if skip != nil && skip(string(k)) {
			return nil
		}
		d[digestBucket(k)] ^= sumHash(k, payload)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8*digestBuckets)
	for i, x := range d {
		binary.BigEndian.PutUint64(out[8*i:], x)
	}
	return out, nil
}

func inRange(k []byte, r store.SuspectRange) bool {
	return bytes.Compare(k, r.Lo) >= 0 && (len(r.Hi) == 0 || bytes.Compare(k, r.Hi) < 0)
}

func dirty(bitmap []byte, k []byte) bool {
	i := digestBucket(k)
	return i/8 < len(bitmap) && bitmap[i/8]&(1<<(i%8)) != 0
}

// suspect reports whether the entry of key k is a suspect of rec: in a
// dirty bucket, in one of its ranges, and not poisoned.
func suspect(rec *store.CrashRecord, k []byte) bool {
	if len(rec.Suspects) == 0 || !dirty(rec.Dirty, k) {
		return false
	}
	for _, r := range rec.Suspects {
		if inRange(k, r) {
			return true
		}
	}
	return false
}

func poisonedAt(rec *store.CrashRecord, k []byte) int {
	return slices.IndexFunc(rec.Poisoned, func(p store.PoisonedEntry) bool { return bytes.Equal(p.Key, k) })
}
