package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// TestTunMetadataCompareClean: vswitchd stores a tun_metadata field at the
// option length of the bridge's TLV map, ovs-ofctl (and flowstate) encode it
// as wide as its value. Flows that match on, set and move tun_metadata are
// declared as text, installed, and compare clean: reconcile after reconcile
// sends nothing, diff is empty, and the switch holds what ovs-ofctl installs.
func TestTunMetadataCompareClean(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	for _, br := range []string{"br-int", "br-ref"} {
		if out, err := e.sb.Ofctl(ctx, "add-tlv-map", br, "{class=0xffff,type=0,len=4}->tun_metadata0,{class=0xffff,type=1,len=8}->tun_metadata1"); err != nil {
			t.Fatal(err, out)
		}
	}
	flows := []string{
		"table=0,priority=30,tun_metadata0=0x5,actions=drop",
		"table=0,priority=20,tun_metadata1=0x1200/0xff00,actions=resubmit(,1)",
		"table=0,priority=10,ip,actions=set_field:0x7->tun_metadata0,move:NXM_NX_TUN_METADATA0[0..15]->NXM_NX_REG0[0..15],resubmit(,1)",
	}
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "geneve"}, texts(flows)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	for i := range 2 {
		st, err := e.c.Reconcile(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range st {
			if b.Name == "br-int" && b.LastReplay.Messages != 0 {
				t.Fatalf("reconcile %d sent %d messages: the switch's tun_metadata encoding drifts", i, b.LastReplay.Messages)
			}
		}
	}
	e.wantNoDiff(ctx, "with tun_metadata flows")
	e.assertExact(ctx, flows)
}
