package main

import (
	"testing"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

// TestOVNLine: status's ovn-controller line, from its answer or the
// server's reason.
func TestOVNLine(t *testing.T) {
	for _, tc := range []struct {
		in   *flowstatev1.OvnController
		want string
	}{
		{&flowstatev1.OvnController{Version: "23.03.1", Reply: "ovn-controller 23.03.1\nOpen vSwitch Library 3.1.0"},
			"ovn-controller: 23.03.1 (Open vSwitch Library 3.1.0)"},
		{&flowstatev1.OvnController{Version: "25.03.0", Reply: "ovn-controller 25.03.0"}, "ovn-controller: 25.03.0"},
		{&flowstatev1.OvnController{Reason: "not found in /var/run/ovn: unixctl: no pidfile /var/run/ovn/ovn-controller.pid: open /var/run/ovn/ovn-controller.pid: no such file or directory"},
			"ovn-controller: not found in /var/run/ovn: unixctl: no pidfile /var/run/ovn/ovn-controller.pid: open /var/run/ovn/ovn-controller.pid: no such file or directory"},
		{nil, "ovn-controller: unknown (not reported by this flowstated)"},
	} {
		if got := ovnLine(tc.in); got != tc.want {
			t.Errorf("ovnLine(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
