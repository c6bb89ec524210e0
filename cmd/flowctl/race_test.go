//go:build race

package main

// raceEnabled: the race detector slows parsing about fivefold, so the
// large-file test uses a smaller file (still beyond 4 MiB).
const raceEnabled = true
