package chaos

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestFlowMod13 sends the OpenFlow 1.3 controller's messages straight to
// vswitchd: each add and strict delete is taken, and the dump shows what
// was sent.
func TestFlowMod13(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, Managed); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("unix", sb.RunDir()+"/"+Managed+".mgmt")
	if err != nil {
		t.Fatal(err)
	}
	c := &of13Ctl{nc: nc, br: bufio.NewReader(nc), mayRelay: func() bool { return false }}
	defer c.close()
	if err := c.writeMsg(header(of13Hello, 8, c.nextXid())); err != nil {
		t.Fatal(err)
	}
	if m, err := c.read(ctx); err != nil || m[1] != of13Hello {
		t.Fatalf("hello: %x %v", m, err)
	}
	for _, set := range []map[string]string{{"10.4.0.1": "drop", "10.4.0.2": "output:2", "10.4.0.3": "drop"}, {"10.4.0.3": ""}} {
		if err := c.write(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sb.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", Managed, "table=40")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if ip := fieldOf(l, "nw_dst="); ip != "" {
			have[ip] = actionsOf(l)
		}
	}
	if len(have) != 2 || have["10.4.0.1"] != "drop" || have["10.4.0.2"] != "output:2" {
		t.Fatalf("table 40 holds %v:\n%s", have, out)
	}
}
