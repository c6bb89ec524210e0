package ovsconfig

import (
	"testing"
)

// TestIdentity: Identity is the Open_vSwitch row's _uuid as ovs-vsctl reads
// it, and two databases have two identities.
func TestIdentity(t *testing.T) {
	ctx := testContext(t)
	a, b := startSandbox(ctx, t), startSandbox(ctx, t)
	ca, cb := dial(ctx, t, a.DBAddr(), Options{}), dial(ctx, t, b.DBAddr(), Options{})
	ida, err := ca.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := vsctl(ctx, t, a, "get", "Open_vSwitch", ".", "_uuid"); ida != want {
		t.Fatalf("identity %q, ovs-vsctl says %q", ida, want)
	}
	idb, err := cb.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ida == idb {
		t.Fatalf("two databases share the identity %s", ida)
	}
}
