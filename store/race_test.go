//go:build race

package store

// raceEnabled: the race detector slows the store about fivefold, so the
// large-store tests use smaller sets.
const raceEnabled = true
