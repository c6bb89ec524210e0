package ofconn

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestFlowCounters: the counters read from a raw dump are those ovs-ofctl
// prints for the same flow.
func TestFlowCounters(t *testing.T) {
	ctx, sb := startOVS(t)
	c := dial(ctx, t, sb, Options{})
	if out, err := sb.Ofctl(ctx, "add-flow", "br0", "table=0,priority=7,tcp,actions=output:2"); err != nil {
		t.Fatal(err, out)
	}
	const sent = 3
	for range sent {
		if err := sb.InjectSYN(ctx, "br0", "p1", sandbox.Packet{}); err != nil {
			t.Fatal(err)
		}
	}
	// Packets that hit a datapath flow reach the OpenFlow counters when the
	// revalidator runs (every 500 ms): poll until all are counted.
	var got FlowCounters
	for got.Packets < sent {
		flows, err := c.DumpFlowsRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			if f.Priority() == 7 {
				if got, err = f.Counters(); err != nil {
					t.Fatal(err)
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("counters %+v, want %d packets: %v", got, sent, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	out, err := sb.Ofctl(ctx, "dump-flows", "br0", "tcp")
	if err != nil {
		t.Fatal(err, out)
	}
	m := regexp.MustCompile(`n_packets=(\d+), n_bytes=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ovs-ofctl dump-flows: %s", out)
	}
	wantBytes, _ := strconv.ParseUint(m[2], 10, 64)
	if got.Packets != sent || m[1] != strconv.Itoa(sent) || got.Bytes != wantBytes || got.Duration <= 0 || got.Duration > time.Minute {
		t.Fatalf("counters %+v; ovs-ofctl says %s", got, m[0])
	}
}
