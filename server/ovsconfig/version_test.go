package ovsconfig

import (
	"testing"
)

// TestOVSVersion: ovs_version reads "" until something (ovs-ctl) writes it,
// then what was written.
func TestOVSVersion(t *testing.T) {
	checkLeaks(t)
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})
	if v, err := c.OVSVersion(); err != nil || v != "" {
		t.Fatalf("OVSVersion() of a fresh database = %q, %v; want \"\"", v, err)
	}
	vsctl(ctx, t, s, "--no-wait", "set", "Open_vSwitch", ".", "ovs_version=2.15.0")
	waitFor(ctx, t, c, "OVSVersion() == 2.15.0", func() (bool, string) {
		v, err := c.OVSVersion()
		return err == nil && v == "2.15.0", v
	})
}
