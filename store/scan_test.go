package store

import (
	"errors"
	"testing"
)

// TestScanFlowsCallerError: an error of the caller's fn (a switch that went
// away during a replay) comes back as it is, not as the store's ("store:
// scan flows: ..." blamed the store for a dead vswitchd).
func TestScanFlowsCallerError(t *testing.T) {
	s := openTest(t)
	if err := s.Entries().Put("br-int", "pod", benchEntries(3, 0), nil); err != nil {
		t.Fatal(err)
	}
	gone := errors.New("ofconn: bundle: connection to the switch closed: read: EOF")
	err := s.Entries().ScanFlows("br-int", nil, func(Record) error { return gone })
	if err != gone { //nolint:errorlint // the very error, unwrapped
		t.Fatalf("ScanFlows = %v, want the caller's error as it is", err)
	}
}
