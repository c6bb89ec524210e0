package store

import "time"

// File is the store file as a whole: what Open found of it (Preflight,
// CheckDuration, Migrated), the values reads found damaged since (Damaged,
// sum.go), the operations under way (Busy, busy.go) and a consistent copy
// (Backup, backup.go). Store.File makes one.
type File struct{ s *Store }

// Preflight is what Open learnt of the file before opening it.
func (fl File) Preflight() Preflight { return fl.s.pre }

// CheckDuration is how long the consistency check of the last Open took.
func (fl File) CheckDuration() time.Duration { return fl.s.checked }

// Migrated reports the migration Open ran, if any.
func (fl File) Migrated() Migration { return fl.s.migrated }
