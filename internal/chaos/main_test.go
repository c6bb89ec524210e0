package chaos

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the foreign writer of foreign-writes.
func TestMain(m *testing.M) {
	MaybeChild()
	os.Exit(m.Run())
}
