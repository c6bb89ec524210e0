package store

import (
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Operations under way. A store operation that does not return (a read
// transaction held by a caller that stopped, a remap of the file waiting for
// it, a disk that hangs) stops every other one that needs the same lock, and
// with them the engine: the engine reports one older than its WedgeAfter as
// wedged (File.Busy), as it does a switch that does not answer. Each transaction
// the store opens, read or write, takes a slot for its duration, from before
// it waits for bbolt's locks: a wait counts.
type inflight struct {
	// since holds the start of an operation (unix nanoseconds), 0 when
	// the slot is free; op what it is.
	since [busySlots]atomic.Int64
	op    [busySlots]atomic.Uint32
}

// busySlots bounds the operations tracked at once; more run untracked (the
// oldest are those that matter, and they hold their slots).
const busySlots = 64

// Operation kinds, as Busy names them.
const (
	opRead uint32 = iota + 1
	opWrite
	opBackup
)

var opNames = [...]string{opRead: "read", opWrite: "write", opBackup: "backup copy"}

// begin takes a slot for an operation op starting now; end(slot) frees it.
// A slot of -1 (all taken) is not tracked.
func (f *inflight) begin(op uint32) int {
	now := time.Now().UnixNano()
	for i := range f.since {
		if f.since[i].Load() == 0 && f.since[i].CompareAndSwap(0, now) {
			f.op[i].Store(op)
			return i
		}
	}
	return -1
}

func (f *inflight) end(slot int) {
	if slot >= 0 {
		f.since[slot].Store(0)
	}
}

// Busy returns the oldest store operation under way: what it is and when it
// began (what is "" when none is). It takes no lock and opens no
// transaction, so it answers while the store is stuck.
func (fl File) Busy() (what string, since time.Time) {
	var oldest int64
	var op uint32
	for i := range fl.s.db.busy.since {
		if t := fl.s.db.busy.since[i].Load(); t != 0 && (oldest == 0 || t < oldest) {
			oldest, op = t, fl.s.db.busy.op[i].Load()
		}
	}
	if oldest == 0 {
		return "", time.Time{}
	}
	name := "operation"
	if int(op) < len(opNames) && opNames[op] != "" {
		name = opNames[op]
	}
	return name, time.Unix(0, oldest)
}

// trackedDB is the bbolt file whose every transaction, from view and
// update, takes a slot of busy for its duration (update also translates the
// file system's refusals, writeerr.go). Only Backup and the copy before a
// migration use bbolt's View directly, tracked by hand.
type trackedDB struct {
	*bolt.DB
	busy inflight
}

// view is db.View, tracked.
func (d *trackedDB) view(fn func(tx *bolt.Tx) error) error {
	slot := d.busy.begin(opRead)
	defer d.busy.end(slot)
	return d.View(fn)
}
