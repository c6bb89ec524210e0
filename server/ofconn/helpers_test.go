package ofconn

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// testTimeout bounds each test that talks to OVS.
const testTimeout = 30 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startOVS starts a private sandbox with bridge br0 and dummy ports p1 (1) and p2 (2), closed when the test ends.
// A missing OVS fails the test with sandbox.InstallHint in the message.
func startOVS(t testing.TB) (context.Context, *sandbox.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	s, err := sandbox.Start(ctx, sandbox.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p1", "p2"} {
		if err := s.AddPort(ctx, "br0", p, i+1); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, s
}

// limitTable makes table of br0 refuse more than limit flows.
func limitTable(ctx context.Context, t testing.TB, s *sandbox.Sandbox, table, limit int) {
	t.Helper()
	if out, err := s.Vsctl(ctx, "--", "--id=@ft", "create", "Flow_Table", fmt.Sprintf("flow_limit=%d", limit), "overflow_policy=refuse",
		"--", "set", "Bridge", "br0", fmt.Sprintf("flow_tables:%d=@ft", table)); err != nil {
		t.Fatal(err, out)
	}
}

// dial connects to br0 and closes the connection when the test ends.
func dial(ctx context.Context, t testing.TB, s *sandbox.Sandbox, opts Options) *Conn {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	c, err := Dial(ctx, s.MgmtPath("br0"), opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// The flow builders encode flows the way OVS encodes them (match fields in OVS's order, output max_len 0), so
// that a dump re-encodes to the same bytes.

func newFlow(table uint8, priority uint16, fields ...*openflow15.MatchField) *openflow15.FlowMod {
	fm := openflow15.NewFlowMod()
	fm.TableId = table
	fm.Priority = priority
	for _, f := range fields {
		fm.Match.AddField(*f)
	}
	return fm
}

func output(port uint32) *openflow15.ActionOutput {
	a := openflow15.NewActionOutput(port)
	a.MaxLen = 0 // what ovs-ofctl sends
	return a
}

func applyActions(fm *openflow15.FlowMod, actions ...openflow15.Action) *openflow15.FlowMod {
	in := openflow15.NewInstrApplyActions()
	for _, a := range actions {
		if err := in.AddAction(a, false); err != nil {
			panic(err) // a test bug: AddAction fails only on a nil action
		}
	}
	fm.AddInstruction(in)
	return fm
}

func ipDst(i int) *openflow15.MatchField {
	return openflow15.NewIpv4DstField(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), nil)
}

func ipFlow(table uint8, priority uint16, i int) *openflow15.FlowMod {
	return newFlow(table, priority, openflow15.NewEthTypeField(0x0800), ipDst(i))
}

func encode(t testing.TB, m interface{ MarshalBinary() ([]byte, error) }) Message {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

// ipFlows returns n flows "table=<table>,priority=<priority>,ip,nw_dst=10.x.y.z,actions=output:2".
func ipFlows(t testing.TB, table uint8, priority uint16, first, n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = encode(t, applyActions(ipFlow(table, priority, first+i), output(2)))
	}
	return msgs
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
