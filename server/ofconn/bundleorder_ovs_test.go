package ofconn

import (
	"fmt"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"
)

// TestCommitAfterRefusedAddInstallsTheRest: OVS drops a BUNDLE_ADD it
// refuses (here a goto to a lower table) and keeps the bundle open, and a
// COMMIT that follows installs the adds it took. This is why Bundle waits
// for the barrier after the adds, and commits only if none was refused,
// instead of writing OPEN, the adds and COMMIT at once (issue 35): the one
// write would save a round trip and lose the bundle's atomicity. A bundle of
// one message does write them at once (TestOneMessageBundleInOneWrite).
func TestCommitAfterRefusedAddInstallsTheRest(t *testing.T) {
	ctx, s := startOVS(t)
	good := encode(t, ipFlow(1, 10, 1))
	gotoLower := newFlow(2, 10, openflow15.NewInPortField(1))
	gotoLower.AddInstruction(openflow15.NewInstrGotoTable(1))
	bad := encode(t, gotoLower)
	const id, xid = 7, 100
	replies := rawBundle(ctx, t, s, rawCtrl(t, xid, id, openflow15.BCT_OPEN_REQUEST), rawAdd(xid+1, id, good),
		rawAdd(xid+2, id, bad), rawCtrl(t, xid+3, id, openflow15.BCT_COMMIT_REQUEST), controlMsg(openflow15.Type_BarrierRequest, xid+4, nil))
	var refused, committed bool
	for _, r := range replies {
		switch {
		case strings.HasPrefix(r, fmt.Sprintf("ERROR@%d ", xid+2)):
			refused = true
		case strings.HasPrefix(r, "ERROR@"):
			t.Fatalf("error %s", r)
		case r == fmt.Sprintf("BUNDLE_CONTROL@%d", xid+3):
			committed = true
		}
	}
	flows, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	var installed []string
	for _, f := range flows {
		if strings.Contains(f, "table=1,") {
			installed = append(installed, f)
		}
	}
	if !refused || !committed || len(installed) != 1 {
		t.Fatalf("refused %v, committed %v, br0 holds %q: want the bad add refused, the commit accepted and the good flow installed", refused, committed, flows)
	}
}
