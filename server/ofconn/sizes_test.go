package ofconn

import (
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// TestSizesAgree: the largest message an entry is stored and sent in
// (entry.MaxMessage, which package canon splits large groups by) is the
// largest message a bundle takes.
func TestSizesAgree(t *testing.T) {
	if entry.MaxMessage != MaxBundledMessage {
		t.Fatalf("entry.MaxMessage %d, ofconn.MaxBundledMessage %d", entry.MaxMessage, MaxBundledMessage)
	}
}
