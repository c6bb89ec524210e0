package canon

import (
	"hash/maphash"
	"sync"
)

// listCache memoises canonical action lists. A CNI pipeline sends the same
// action lists with thousands of flows, and canonicalising an action prints
// and parses it back. The key holds all the result depends on, byte for
// byte: the instruction type, the action context's key
// (ofctl.FlowMatch.AppendActionKey) and the list as sent. The cache is
// bounded: a shard that fills up starts afresh. Shards keep goroutines
// canonicalising on every CPU from queueing on one lock.
type listCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cachedList
	_  [40]byte // a shard per cache line
}

// cachedList is a canonical action list and whether part of it is kept as
// sent.
type cachedList struct {
	acts []byte
	kept bool
}

const (
	cacheShards     = 16
	cacheShardLimit = 256 // 4096 lists in all
)

func newListCache() *listCache {
	return &listCache{seed: maphash.MakeSeed()}
}

func (c *listCache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// get returns the list cached under key. Its bytes are shared: read only.
func (c *listCache) get(key []byte) (cachedList, bool) {
	s := c.shard(key)
	s.mu.RLock()
	l, ok := s.m[string(key)]
	s.mu.RUnlock()
	return l, ok
}

// put caches a copy of acts under key.
func (c *listCache) put(key, acts []byte, kept bool) {
	l := cachedList{acts: append([]byte(nil), acts...), kept: kept}
	s := c.shard(key)
	s.mu.Lock()
	if len(s.m) >= cacheShardLimit || s.m == nil {
		s.m = make(map[string]cachedList, cacheShardLimit)
	}
	s.m[string(key)] = l
	s.mu.Unlock()
}

// len returns the number of lists cached.
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
