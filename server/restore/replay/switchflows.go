package replay

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"runtime/debug"
	"slices"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// A replay compares a bridge's flows without holding either side in memory:
// the desired flows are read from the store in identity order (store
// ScanFlows), and the switch's flows are kept as hashes, 28 bytes a flow in
// one sorted slice (switchState). A million flows on the switch cost some
// 30 MB during a no-op audit, and a restore after a vswitchd restart, when
// the switch holds just its default flow, costs next to nothing beyond the
// bundle buffer.
//
// Identities are hashed to 128 bits and contents to 64 with seeds drawn per
// dump: a collision, at a million flows, is about as likely as a one-bit
// memory error in the same second, and cannot be provoked from outside.

// largeDump is the number of flows on a switch past which a replay or a diff
// hands its memory back to the system when it is done (releaseMemory).
const largeDump = 100_000

// releaseMemory returns the garbage of a large dump to the system at once:
// Go's scavenger would take minutes, and an audit every 30 s would keep a
// node's flowstated at the peak of its last dump.
func (s *switchState) releaseMemory() {
	if s != nil && len(s.flows) >= largeDump {
		debug.FreeOSMemory()
	}
}

// keepFlows is how many dumped flows a switchState keeps whole, so the deletes
// of a replay after a restart (the default NORMAL flow) need no second dump.
const keepFlows = 4096

// flowKey is the hash of a flow's identity (table, priority, match).
type flowKey [2]uint64

func (k flowKey) compare(o flowKey) int {
	if c := cmp.Compare(k[0], o[0]); c != 0 {
		return c
	}
	return cmp.Compare(k[1], o[1])
}

// onSwitch is a flow the dump found: the hash of its identity and of its
// canonical FLOW_MOD.
type onSwitch struct {
	key flowKey
	sum uint64
}

// switchState is what one dump found on a bridge: groups and meters whole
// (they are few), flows within the owned cookie space as hashes.
type switchState struct {
	seeds  [3]maphash.Seed
	others []plan.ActualEntry
	// flows is sorted by key when first looked up (sealed); seen[i] is the
	// last pass that found flows[i] desired.
	flows []onSwitch
	seen  []uint32 // nil until sealed
	// digestSeeds key the digests (digest.go); have is the digest of flows,
	// desired that of the desired flows read beside the dump (nil when
	// they were not).
	digestSeeds [2]maphash.Seed
	have        flowDigest
	desired     *desiredDigest
	// foreignIn counts the flows outside the owned cookie space, left
	// alone, per table (they count against a flow_limit).
	foreignIn map[uint8]int
	// foreignFlows holds their canonical ADDs when the owned space is not
	// every cookie (the mirror of foreign entries, foreign.go).
	foreignFlows [][]byte
	keepForeign  bool
	// kept holds the canonical ADD of each owned flow while the dump had at
	// most keepFlows of them; complete says it holds every one.
	kept     map[flowKey][]byte
	complete bool
	// pass numbers the scans that mark flows seen (markScan).
	pass uint32
	// id is a scratch buffer for identities.
	id []byte
}

func (s *switchState) key(id []byte) flowKey {
	return flowKey{maphash.Bytes(s.seeds[0], id), maphash.Bytes(s.seeds[1], id)}
}

func (s *switchState) sum(payload []byte) uint64 { return maphash.Bytes(s.seeds[2], payload) }

// lookup classifies a desired flow: OpAdd when the switch lacks it, OpModify
// when it holds other content, 0 when it holds the same. With mark, the flow
// on the switch is marked seen by the current pass.
func (s *switchState) lookup(id, payload []byte, mark bool) plan.Op {
	s.seal()
	k := s.key(id)
	i, ok := slices.BinarySearchFunc(s.flows, k, func(f onSwitch, k flowKey) int { return f.key.compare(k) })
	if !ok {
		return plan.OpAdd
	}
	if mark {
		s.seen[i] = s.pass
	}
	if s.flows[i].sum != s.sum(payload) {
		return plan.OpModify
	}
	return 0
}

// seal sorts the flows for lookup once the dump is complete; a no-op
// Reconcile decided by digest never needs it.
func (s *switchState) seal() {
	if s.seen != nil {
		return
	}
	slices.SortFunc(s.flows, func(a, b onSwitch) int { return a.key.compare(b.key) })
	// Identities are unique on a switch; equal hashes would be a collision,
	// and the second one found would never be looked up: keep one.
	s.flows = slices.CompactFunc(s.flows, func(a, b onSwitch) bool { return a.key == b.key })
	s.seen = make([]uint32, len(s.flows))
}

// dumpSwitch dumps bridge's flows, groups and meters into a switchState.
// Flows outside the owned cookie space are counted, not kept. While vswitchd
// builds the dump, the desired flows are digested on another goroutine
// (digest.go), which dumpSwitch waits for whatever happens.
func (rp *Replayer) dumpSwitch(ctx context.Context, conn *ofconn.Conn, bridge string) (*switchState, error) {
	s := newSwitchState()
	s.keepForeign = !rp.cfg.OwnedCookie.All()
	var (
		want    desiredDigest
		wantErr error
		done    = make(chan struct{})
		// dumped is the number of owned flows the dump found, -1 until
		// it is complete.
		dumped atomic.Int64
	)
	dumped.Store(-1)
	go func() {
		defer close(done)
		want, wantErr = digestDesired(rp.cfg.Store, bridge, rp.cfg.Forms, s, &dumped)
	}()
	// The entries of unrecorded controllers are left out, as flows
	// outside the owned space are (Rooms.Kept).
	kf := rp.cfg.Rooms.Kept(bridge)
	err := plan.EachFlowMod(ctx, conn, rp.cfg.OwnedCookie, func(m []byte, owned bool) {
		if owned && kf != nil {
			s.id = entry.AppendFlowID(s.id[:0], m)
			if kf.Leaves(entry.KindFlow, s.id) {
				s.foreignIn[entry.FlowModTable(m)]++
				return
			}
		}
		s.addFlow(m, owned)
	})
	dumped.Store(int64(len(s.flows)))
	<-done
	if err != nil {
		return nil, err
	}
	switch {
	case errors.Is(wantErr, errDigestMoot):
	case wantErr != nil:
		return nil, wantErr
	default:
		s.desired = &want
	}
	if s.others, err = plan.DumpGroupsMeters(ctx, conn); err != nil {
		return nil, err
	}
	if kf != nil {
		s.others = slices.DeleteFunc(s.others, func(a plan.ActualEntry) bool { return kf.Leaves(a.Kind, a.ID) })
		kf.Done()
	}
	return s, nil
}

func newSwitchState() *switchState {
	return &switchState{
		seeds:       [3]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed(), maphash.MakeSeed()},
		digestSeeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		foreignIn:   make(map[uint8]int),
		kept:        make(map[flowKey][]byte),
		complete:    true,
	}
}

// addFlow records a dumped flow, given as its canonical FLOW_MOD, which it
// may keep.
func (s *switchState) addFlow(m []byte, owned bool) {
	if !owned {
		s.foreignIn[entry.FlowModTable(m)]++
		if s.keepForeign {
			s.foreignFlows = append(s.foreignFlows, bytes.Clone(m))
		}
		return
	}
	s.id = entry.AppendFlowID(s.id[:0], m)
	k, sum := s.key(s.id), s.sum(m)
	s.flows = append(s.flows, onSwitch{key: k, sum: sum})
	s.have.add(s, k, sum)
	if len(s.kept) < keepFlows {
		s.kept[k] = bytes.Clone(m)
	} else {
		s.complete = false
	}
}

// unseen returns the canonical ADD of every owned flow on the switch that the
// last marking scan did not find desired: the flows a replay deletes. When
// the dump kept only hashes, it dumps again for them.
func (rp *Replayer) unseen(ctx context.Context, conn *ofconn.Conn, s *switchState) ([][]byte, error) {
	s.seal()
	want := make(map[flowKey]bool)
	for i, f := range s.flows {
		if s.seen[i] != s.pass {
			want[f.key] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	out := make([][]byte, 0, len(want))
	if s.complete {
		for k := range want {
			out = append(out, s.kept[k])
		}
		return out, nil
	}
	var id []byte
	err := plan.EachFlowMod(ctx, conn, rp.cfg.OwnedCookie, func(m []byte, owned bool) {
		if !owned {
			return
		}
		id = entry.AppendFlowID(id[:0], m)
		if k := s.key(id); want[k] {
			delete(want, k)
			out = append(out, bytes.Clone(m))
		}
	})
	if err != nil {
		return nil, err
	}
	// A flow that went away between the dumps needs no delete.
	return out, nil
}
