package canon

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// listCache memoises canonical action lists, and single actions (lists of
// one). A CNI pipeline sends the same action lists with thousands of flows,
// and, where lists differ by a per-pod value, the same actions in many of
// them; canonicalising an action prints and parses it back. The key holds
// all the result depends on, byte for byte: for a list, the instruction
// type, the action context's key (ofctl.FlowMatch.AppendActionKey) and the
// list as sent; for an action, the context's key at that action
// (ofctl.ActionContext.AppendKey) and the action as sent. The cache is
// bounded: a shard that fills up starts afresh. Shards keep goroutines
// canonicalising on every CPU from queueing on one lock.
type listCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cachedList
	// seen holds hashes of keys offered once (offer): most lists and
	// actions of a real pipeline carry a per-flow value and never come
	// again, and caching them would only churn the map and allocate.
	seen [seenSlots]atomic.Uint64
}

// cachedList is a canonical action list and whether part of it is kept as
// sent.
type cachedList struct {
	acts []byte
	kept bool
}

const (
	cacheShards     = 16
	cacheShardLimit = 256 // 4096 entries in all
	seenSlots       = 512
)

func newListCache() *listCache {
	return &listCache{seed: maphash.MakeSeed()}
}

// hash returns the hash of key, for lookup and offer.
func (c *listCache) hash(key []byte) uint64 {
	return maphash.Bytes(c.seed, key)
}

// get returns the entry cached under key. Its bytes are shared: read only.
func (c *listCache) get(key []byte) (cachedList, bool) {
	return c.lookup(c.hash(key), key)
}

// lookup is get of a key whose hash is h.
func (c *listCache) lookup(h uint64, key []byte) (cachedList, bool) {
	s := &c.shards[h%cacheShards]
	s.mu.RLock()
	l, ok := s.m[string(key)]
	s.mu.RUnlock()
	return l, ok
}

// offer caches acts under key, whose hash is h, when the key was offered
// before: the first time it only remembers the hash, without locking or
// allocating. A slot of seen holds one hash: a key whose slot was taken
// in between is offered afresh.
func (c *listCache) offer(h uint64, key, acts []byte, kept bool) {
	s := &c.shards[h%cacheShards]
	slot := &s.seen[(h/cacheShards)%seenSlots]
	if slot.Load() != h {
		slot.Store(h)
		return
	}
	s.put(key, acts, kept)
}

// put caches a copy of acts under key.
func (c *listCache) put(key, acts []byte, kept bool) {
	c.shards[c.hash(key)%cacheShards].put(key, acts, kept)
}

func (s *cacheShard) put(key, acts []byte, kept bool) {
	l := cachedList{acts: append([]byte(nil), acts...), kept: kept}
	s.mu.Lock()
	if len(s.m) >= cacheShardLimit || s.m == nil {
		s.m = make(map[string]cachedList, cacheShardLimit)
	}
	s.m[string(key)] = l
	s.mu.Unlock()
}

// len returns the number of entries cached.
func (c *listCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
