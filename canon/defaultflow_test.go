package canon

import (
	"bytes"
	"context"
	"encoding/binary"
	"os/exec"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// printsAsDefault is the check server/restore made before IsDefaultFlow: an
// identity of table 0, priority 0 and no match, printing as the default
// flow. IsDefaultFlow must agree with it wherever the text tells flows apart.
func printsAsDefault(payload []byte) bool {
	id, err := entry.FlowID(payload)
	if err != nil || len(id) != 3 || id[0] != 0 || id[1] != 0 || id[2] != 0 {
		return false
	}
	s, err := ofctl.FormatFlowMod(payload)
	return err == nil && s == DefaultFlowText
}

// defaultFlowCases are the default flow in the spellings ovs-ofctl takes, and
// near misses: each field the default flow has, changed once.
var defaultFlowCases = []struct {
	text string
	want bool
}{
	{"priority=0 actions=NORMAL", true},
	{"priority=0,actions=NORMAL", true},
	{"table=0,priority=0,actions=normal", true},
	{"priority=0,actions=output:NORMAL", true},
	{"cookie=0x1,priority=0,actions=NORMAL", false},
	{"table=1,priority=0,actions=NORMAL", false},
	{"priority=1,actions=NORMAL", false},
	{"actions=NORMAL", false}, // priority 32768
	{"priority=0,ip,actions=NORMAL", false},
	{"priority=0,in_port=1,actions=NORMAL", false},
	{"priority=0,actions=LOCAL", false},
	{"priority=0,actions=drop", false},
	{"priority=0,actions=NORMAL,LOCAL", false},
	{"priority=0,actions=set_field:1->reg0,NORMAL", false},
	{"priority=0,idle_timeout=60,actions=NORMAL", false},
	{"priority=0,hard_timeout=60,actions=NORMAL", false},
	{"priority=0,importance=1,actions=NORMAL", false},
	{"priority=0,send_flow_rem,actions=NORMAL", false},
	{"priority=0,actions=NORMAL,goto_table:1", false},
}

func TestIsDefaultFlow(t *testing.T) {
	for _, c := range defaultFlowCases {
		t.Run(c.text, func(t *testing.T) {
			payload, _, err := Parse(entry.KindFlow, c.text)
			if err != nil {
				t.Fatal(err)
			}
			if got := IsDefaultFlow(payload); got != c.want {
				t.Errorf("IsDefaultFlow %v, want %v", got, c.want)
			}
			if old := printsAsDefault(payload); old != c.want {
				t.Errorf("the text comparison says %v, want %v", old, c.want)
			}
		})
	}
	// Where the text cannot tell flows apart, the bytes can: an output's
	// max_len does not print, and the switch keeps it.
	normal := bytes.Clone(defaultFlow())
	at := len(normal) - 8 // output: type, len, port, max_len, 6 bytes of pad
	if binary.BigEndian.Uint32(normal[at-4:]) != openflow15.P_NORMAL || binary.BigEndian.Uint16(normal[at:]) != 0 {
		t.Fatalf("the default flow %x does not end in output:NORMAL with max_len 0", normal)
	}
	binary.BigEndian.PutUint16(normal[at:], 0xffff)
	if IsDefaultFlow(normal) {
		t.Error("output:NORMAL with max_len 0xffff taken for the default flow")
	}
	if !printsAsDefault(normal) {
		t.Error("the text comparison tells max_len apart: the test no longer shows where the bytes are stricter")
	}
	if IsDefaultFlow(nil) || IsDefaultFlow([]byte{}) {
		t.Error("nothing taken for the default flow")
	}
}

// TestIsDefaultFlowOnSwitch checks IsDefaultFlow against the text comparison
// on what a real vswitchd holds: the flow it puts on a fresh bridge, and each
// near miss of defaultFlowCases installed with ovs-ofctl and dumped back.
func TestIsDefaultFlowOnSwitch(t *testing.T) {
	for _, b := range []string{"ovs-vswitchd", "ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-ofctl"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s not found: install Open vSwitch", b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	if err := sb.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	conn, err := ofconn.Dial(ctx, sb.MgmtPath("br0"), ofconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dump := func(t *testing.T) [][]byte {
		t.Helper()
		fs, err := conn.DumpFlowsRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for _, f := range fs {
			m, err := f.FlowMod()
			if err != nil {
				t.Fatal(err)
			}
			// As the restore engine reads a dump (appendActual).
			payload, _, err := entry.Identify(entry.KindFlow, FromSwitch(m))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, payload)
		}
		return out
	}

	t.Run("fresh bridge", func(t *testing.T) {
		flows := dump(t)
		if len(flows) != 1 {
			t.Fatalf("a fresh bridge holds %d flows, want vswitchd's default flow alone", len(flows))
		}
		if !IsDefaultFlow(flows[0]) || !printsAsDefault(flows[0]) {
			t.Fatalf("IsDefaultFlow %v, text comparison %v on the default flow of a fresh bridge", IsDefaultFlow(flows[0]), printsAsDefault(flows[0]))
		}
	})
	for _, c := range defaultFlowCases {
		t.Run(c.text, func(t *testing.T) {
			if _, err := sb.Ofctl(ctx, "-O", "OpenFlow15", "del-flows", "br0"); err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Ofctl(ctx, "-O", "OpenFlow15", "add-flow", "br0", c.text); err != nil {
				t.Fatal(err)
			}
			flows := dump(t)
			if len(flows) != 1 {
				t.Fatalf("the switch holds %d flows, want 1", len(flows))
			}
			got, old := IsDefaultFlow(flows[0]), printsAsDefault(flows[0])
			if got != old || got != c.want {
				t.Errorf("IsDefaultFlow %v, text comparison %v, want %v", got, old, c.want)
			}
		})
	}
}
