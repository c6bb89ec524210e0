package main

import (
	"strings"
	"testing"
)

// TestPermissionMessage: the permission error reads as one sentence, with
// no double negative ("nobody may not open it").
func TestPermissionMessage(t *testing.T) {
	msg := (&permissionError{server: "/run/flowstate/flowstate.sock", path: "/run/flowstate/flowstate.sock"}).Error()
	if strings.Contains(msg, "may not open") || !strings.Contains(msg, " is not allowed to open it; run flowctl as root") {
		t.Fatalf("permission message: %s", msg)
	}
}
