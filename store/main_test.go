package store

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(freelistChildEnv); path != "" {
		// The test binary re-run as a writer to kill (freelist_test.go).
		os.Exit(runFreelistChild(path))
	}
	os.Exit(m.Run())
}
