package store

// File is the store file as a whole: what Open found of it (Preflight,
// CheckDuration, Migrated), the values reads found damaged since (Damaged,
// sum.go), the operations under way (Busy, busy.go) and a consistent copy
// (Backup, backup.go). Store.File makes one.
type File struct{ s *Store }
