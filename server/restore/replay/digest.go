package replay

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/store"
)

// A no-op replay (an audit, a Reconcile, a restart of flowstated beside a
// vswitchd that kept its flows) used to sort the dump's hashes and look up
// every desired flow in them. Most audits find nothing to do, so both sides
// are first reduced to an order-independent digest: the desired flows on one
// goroutine while vswitchd builds its dump on the other CPU, the switch's
// flows as their replies are decoded. Equal digests and counts mean equal
// sets of (identity, content) pairs and the flow scans are skipped; anything
// else takes the comparison flow by flow, which finds what differs.
//
// The digest is a sum of keyed hashes of each flow's identity and content
// hashes (a multiset hash): order does not matter, and a flow can be taken
// out again by subtracting its hash. Two lanes of 64 bits, with the seeds of
// the switchState, drawn per dump: two different sets agree by chance about
// once in 2^128 comparisons, and the seeds are never seen outside.

// flowDigest is the multiset digest of a set of flows.
type flowDigest struct {
	n    int
	a, b uint64
}

func (s *switchState) flowHash(k flowKey, sum uint64) (uint64, uint64) {
	var buf [24]byte
	binary.LittleEndian.PutUint64(buf[0:], k[0])
	binary.LittleEndian.PutUint64(buf[8:], k[1])
	binary.LittleEndian.PutUint64(buf[16:], sum)
	return maphash.Bytes(s.digestSeeds[0], buf[:]), maphash.Bytes(s.digestSeeds[1], buf[:])
}

// add puts the flow (k, sum) into d.
func (d *flowDigest) add(s *switchState, k flowKey, sum uint64) {
	a, b := s.flowHash(k, sum)
	d.n++
	d.a += a
	d.b += b
}

// remove takes the flow (k, sum) out of d.
func (d *flowDigest) remove(s *switchState, k flowKey, sum uint64) {
	a, b := s.flowHash(k, sum)
	d.n--
	d.a -= a
	d.b -= b
}

// desiredDigest is the digest of a bridge's desired flows, in the forms the
// switch holds them (canon.Forms), before any is skipped.
type desiredDigest struct {
	flowDigest
	// read counts the desired flows, skipped or not.
	read int
}

// errDigestMoot ends a digest that cannot match: the dump is complete and
// found fewer owned flows than the store holds (after a vswitchd restart,
// one). The replay then compares flow by flow, as it must anyway.
var errDigestMoot = errors.New("restore: more desired flows than the switch holds")

// digestDesired reads every desired flow of bridge into a digest with the
// seeds of s. It only reads the store and s's seeds, so it runs beside the
// dump that fills s; dumped is the number of owned flows the dump found
// once it is complete (-1 before), which may make the digest moot.
func digestDesired(st *store.Store, bridge string, forms *canon.Forms, s *switchState, dumped *atomic.Int64) (desiredDigest, error) {
	var d desiredDigest
	err := st.Entries().ScanFlows(bridge, nil, func(rec store.Record) error {
		d.read++
		if d.read%1024 == 0 {
			if n := dumped.Load(); n >= 0 && int64(d.read) > n {
				// Skipped (quarantined) flows could still make the
				// counts meet, but that is the comparison's job.
				return errDigestMoot
			}
		}
		d.add(s, s.key(rec.ID), s.sum(forms.Form(rec.Payload)))
		return nil
	})
	return d, err
}

// sameFlows reports whether the switch of fs holds exactly the desired flows
// that fs does not skip, by digest. False when there is no digest (the
// caller then compares flow by flow).
func (fs *flowScan) sameFlows() (bool, error) {
	want := fs.sw.desired
	if want == nil {
		return false, nil
	}
	d := want.flowDigest
	for k, skipped := range fs.skip {
		if !skipped || len(k) == 0 || entry.Kind(k[0]) != entry.KindFlow {
			continue
		}
		id := []byte(k[1:])
		en, ok, err := fs.store.Entries().Get(fs.bridge, entry.KindFlow, id)
		if err != nil {
			return false, err
		}
		if ok {
			d.remove(fs.sw, fs.sw.key(id), fs.sw.sum(fs.forms.Form(en.Payload)))
		}
	}
	return d == fs.sw.have, nil
}
