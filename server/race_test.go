//go:build race

package server_test

// raceEnabled: the race detector slows parsing and the store about fivefold,
// so the large-set tests use smaller sets (still beyond 4 MiB per request).
const raceEnabled = true
