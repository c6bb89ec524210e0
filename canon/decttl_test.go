package canon

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// Actions as ovn-controller sends them: dec_ttl() is NXAST_DEC_TTL_CNT_IDS
// with no controller id, dec_ttl OFPAT_DEC_NW_TTL.
const (
	decTTLNoIDs = "ffff0010000023200015000000000000"
	decNwTTL    = "0018000800000000"
	output1     = "00000010000000010000000000000000"
)

// ovnFlow returns the FLOW_MOD ADD of line (which has no actions) with an
// apply_actions instruction of the actions in hex, as a controller
// encodes it.
func ovnFlow(t testing.TB, line, actions string) []byte {
	t.Helper()
	acts, err := hex.DecodeString(actions)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ofctl.ParseFlowBinary(line)
	if err != nil {
		t.Fatal(err)
	}
	b = binary.BigEndian.AppendUint16(b, 4) // OFPIT_APPLY_ACTIONS
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(acts)))
	b = append(append(b, 0, 0, 0, 0), acts...)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// TestDecTTLKeepsItsForm: the canonical form of a flow keeps the dec_ttl a
// controller sent (canon prints an action and parses it back): dec_ttl()
// stays NXAST_DEC_TTL_CNT_IDS without ids and prints as dec_ttl(), plain
// dec_ttl stays OFPAT_DEC_NW_TTL; the text of each parses back to it.
func TestDecTTLKeepsItsForm(t *testing.T) {
	for _, c := range []struct{ action, text string }{
		{decTTLNoIDs, "dec_ttl()"},
		{decNwTTL, "dec_ttl"},
	} {
		t.Run(c.text, func(t *testing.T) {
			raw := ovnFlow(t, "table=3,priority=7,ip,actions=drop", c.action+output1)
			payload, id, err := Decode(entry.KindFlow, raw)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := hex.DecodeString(c.action + output1)
			if !bytes.HasSuffix(payload, want) {
				t.Fatalf("canonical form %x does not end with the actions sent, %x", payload, want)
			}
			text, err := Format(entry.KindFlow, payload)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(text, "actions="+c.text+",output:1") {
				t.Fatalf("prints as %q, want actions=%s,output:1", text, c.text)
			}
			p2, id2, err := Parse(entry.KindFlow, text)
			if err != nil || !bytes.Equal(p2, payload) || !bytes.Equal(id2, id) {
				t.Fatalf("%q parses back as %x (%v), want %x", text, p2, err, payload)
			}
		})
	}
}

// TestDecTTLOnSwitch: what flowstate installs for ovn-controller's
// dec_ttl() is what ovn-controller installs directly. vswitchd holds the
// flow sent as is on one bridge, and flowstate's canonical form of it on
// another; both dump as dec_ttl() (ovs-ofctl) and as the same bytes (an
// OpenFlow dump, brought to canonical form as the restore engine does),
// which are the canonical form.
func TestDecTTLOnSwitch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	raw := ovnFlow(t, "table=3,priority=7,ip,actions=drop", decTTLNoIDs+output1)
	payload, _, err := Decode(entry.KindFlow, raw)
	if err != nil {
		t.Fatal(err)
	}
	type dumped struct {
		text    string
		payload []byte
	}
	install := func(br string, msg []byte) dumped {
		t.Helper()
		if err := sb.AddBridge(ctx, br); err != nil {
			t.Fatal(err)
		}
		c, err := ofconn.Dial(ctx, sb.MgmtPath(br), ofconn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Send(ctx, msg); err != nil {
			t.Fatalf("%s: install: %v", br, err)
		}
		text, err := sb.Ofctl(ctx, "--no-stats", "dump-flows", br, "table=3")
		if err != nil {
			t.Fatal(err, text)
		}
		flows, err := c.DumpFlowsRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var d dumped
		for _, f := range flows {
			m, err := f.FlowMod()
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := entry.Identify(entry.KindFlow, FromSwitch(m))
			if err != nil {
				t.Fatal(err)
			}
			if p[24] == 3 {
				d.payload = p
			}
		}
		for _, l := range strings.Split(text, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "table=3") {
				d.text = l
			}
		}
		return d
	}
	direct, viaFlowstate := install("direct", raw), install("flowstate", payload)
	if !strings.HasSuffix(direct.text, "actions=dec_ttl(),output:1") {
		t.Fatalf("the flow installed directly dumps as %q, want dec_ttl()", direct.text)
	}
	if viaFlowstate.text != direct.text {
		t.Errorf("flowstate's flow dumps as %q, installed directly as %q", viaFlowstate.text, direct.text)
	}
	if !bytes.Equal(viaFlowstate.payload, direct.payload) || !bytes.Equal(direct.payload, payload) {
		t.Errorf("dumped bytes: flowstate's %x, installed directly %x; canonical form %x", viaFlowstate.payload, direct.payload, payload)
	}
	// What the dump prints is what flowstate parses into the stored form.
	p, _, err := Parse(entry.KindFlow, direct.text)
	if err != nil || !bytes.Equal(p, payload) {
		t.Errorf("the dumped text %q parses as %x (%v), want %x", direct.text, p, err, payload)
	}
}
