package ofconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// rawBundle writes HELLO, then the messages of one bundle (id) as one write on a fresh connection to br0, and
// returns the replies up to the barrier that ends msgs, each as "TYPE@xid" or "ERROR@xid NAME".
func rawBundle(ctx context.Context, t *testing.T, s *sandbox.Sandbox, msgs ...[]byte) []string {
	t.Helper()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", s.MgmtPath("br0"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	w := controlMsg(openflow15.Type_Hello, 1, nil)
	for _, m := range msgs {
		w = append(w, m...)
	}
	if _, err := nc.Write(w); err != nil {
		t.Fatal(err)
	}
	last := frameXid(msgs[len(msgs)-1])
	var got []string
	for {
		f, err := ReadMessage(nc)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		x := frameXid(f)
		switch f[1] {
		case openflow15.Type_Hello:
		case openflow15.Type_Error:
			got = append(got, fmt.Sprintf("ERROR@%d %s", x, decodeError(f).Name))
		default:
			got = append(got, fmt.Sprintf("%s@%d", TypeName(f[1]), x))
			if f[1] == openflow15.Type_BarrierReply && x == last {
				return got
			}
		}
	}
}

// rawCtrl is a BUNDLE_CONTROL of bundle id with xid x.
func rawCtrl(t *testing.T, x, id uint32, typ uint16) []byte {
	t.Helper()
	m, err := bundleCtrlMsg(x, id, typ, bundleFlags)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rawAdd is a BUNDLE_ADD of m to bundle id, the add and m with xid x.
func rawAdd(x, id uint32, m Message) []byte {
	b := make([]byte, bundleAddHeaderLen, bundleAddHeaderLen+len(m))
	putBundleAddHeader(b, len(m), x, id, bundleFlags)
	b = append(b, m...)
	be.PutUint32(b[bundleAddHeaderLen+4:], x)
	return b
}

// TestOneMessageBundleInOneWrite: what OVS does with OPEN, one ADD and COMMIT written at once, the bundle
// Conn.Bundle writes for one message (issue 35). A refused ADD leaves the bundle open and empty and the COMMIT
// that follows commits nothing; a message refused at commit rolls back. In every case the switch holds what it
// held before, or the one flow.
func TestOneMessageBundleInOneWrite(t *testing.T) {
	ctx, s := startOVS(t)
	// Table 5 holds at most one flow, and holds one.
	limitTable(ctx, t, s, 5, 1)
	for _, f := range []string{"table=5,priority=1,actions=drop", "table=0,priority=300,ip,nw_dst=10.9.9.9,actions=drop"} {
		if out, err := s.Ofctl(ctx, "add-flow", "br0", f); err != nil {
			t.Fatal(err, out)
		}
	}
	before, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}

	gotoLower := newFlow(2, 10, openflow15.NewInPortField(1))
	gotoLower.AddInstruction(openflow15.NewInstrGotoTable(1))
	overlap := applyActions(newFlow(0, 300, openflow15.NewEthTypeField(0x0800)), output(2))
	overlap.Flags = openflow15.FF_CHECK_OVERLAP
	for _, tc := range []struct {
		name string
		m    Message
		// want lists the replies by the role of their xid: open, add, commit, barrier.
		want    []string
		install string // the flow the switch holds afterwards, if any
	}{
		{"accepted", encode(t, applyActions(ipFlow(1, 10, 1), output(2))),
			[]string{"BUNDLE_CONTROL@open", "BUNDLE_CONTROL@commit", "BARRIER_REPLY@barrier"},
			"table=1, priority=10,ip,nw_dst=10.0.0.1 actions=output:2"},
		{"refused at add: goto lower table", encode(t, gotoLower),
			[]string{"BUNDLE_CONTROL@open", "ERROR@add OFPBIC_BAD_TABLE_ID", "BUNDLE_CONTROL@commit", "BARRIER_REPLY@barrier"}, ""},
		{"refused at add: bad output port", encode(t, applyActions(newFlow(0, 10, openflow15.NewInPortField(1)), output(0xff00))),
			[]string{"BUNDLE_CONTROL@open", "ERROR@add OFPBAC_BAD_OUT_PORT", "BUNDLE_CONTROL@commit", "BARRIER_REPLY@barrier"}, ""},
		{"refused at commit: unknown group", encode(t, applyActions(newFlow(0, 10, openflow15.NewInPortField(2)), openflow15.NewActionGroup(99))),
			[]string{"BUNDLE_CONTROL@open", "ERROR@add OFPBAC_BAD_OUT_GROUP", "ERROR@commit OFPBFC_MSG_FAILED", "BARRIER_REPLY@barrier"}, ""},
		{"refused at commit: unknown meter", encode(t, applyActions(newFlow(0, 10, openflow15.NewInPortField(2)), openflow15.NewActionMeter(7), output(2))),
			[]string{"BUNDLE_CONTROL@open", "ERROR@add OFPMMFC_INVALID_METER", "ERROR@commit OFPBFC_MSG_FAILED", "BARRIER_REPLY@barrier"}, ""},
		{"refused at commit: table full", encode(t, applyActions(ipFlow(5, 10, 1), output(2))),
			[]string{"BUNDLE_CONTROL@open", "ERROR@add OFPFMFC_TABLE_FULL", "ERROR@commit OFPBFC_MSG_FAILED", "BARRIER_REPLY@barrier"}, ""},
		{"refused at commit: overlap", encode(t, overlap),
			[]string{"BUNDLE_CONTROL@open", "ERROR@add OFPFMFC_OVERLAP", "ERROR@commit OFPBFC_MSG_FAILED", "BARRIER_REPLY@barrier"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const id, xid = 7, 100
			got := rawBundle(ctx, t, s, rawCtrl(t, xid, id, openflow15.BCT_OPEN_REQUEST), rawAdd(xid+1, id, tc.m),
				rawCtrl(t, xid+2, id, openflow15.BCT_COMMIT_REQUEST), controlMsg(openflow15.Type_BarrierRequest, xid+3, nil))
			role := strings.NewReplacer(
				fmt.Sprintf("@%d", xid+3), "@barrier", fmt.Sprintf("@%d", xid+2), "@commit",
				fmt.Sprintf("@%d", xid+1), "@add", fmt.Sprintf("@%d", xid), "@open")
			for i := range got {
				got[i] = role.Replace(got[i])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("replies %q, want %q", got, tc.want)
			}
			after, err := s.DumpFlows(ctx, "br0")
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(before)
			if tc.install != "" {
				want = append(want, tc.install)
			}
			slices.Sort(want)
			slices.Sort(after)
			if !slices.Equal(after, want) {
				t.Errorf("br0 holds %q, want %q", after, want)
			}
			if tc.install != "" {
				if out, err := s.Ofctl(ctx, "del-flows", "--strict", "br0", "table=1,priority=10,ip,nw_dst=10.0.0.1"); err != nil {
					t.Fatal(err, out)
				}
			}
		})
	}
}

// TestOneMessageBundle: a bundle of one message is one round trip (no barrier) with the verdicts of a bundle of
// several: nil, a refusal at add time or at commit time with the message's index, nothing installed when refused.
func TestOneMessageBundle(t *testing.T) {
	ctx, s := startOVS(t)
	limitTable(ctx, t, s, 5, 1)
	c := dial(ctx, t, s, Options{})
	if err := c.Bundle(ctx, ipFlows(t, 5, 1, 0, 1)); err != nil {
		t.Fatalf("bundle of one flow: %v", err)
	}
	before, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(before, "table=5, priority=1,ip,nw_dst=10.0.0.0 actions=output:2") {
		t.Fatalf("br0 holds %q, want the flow of table 5", before)
	}
	gotoLower := newFlow(2, 10, openflow15.NewInPortField(1))
	gotoLower.AddInstruction(openflow15.NewInstrGotoTable(1))
	for _, tc := range []struct {
		name, want string
		m          Message
		atCommit   bool
	}{
		{"refused at add", "OFPBIC_BAD_TABLE_ID", encode(t, gotoLower), false},
		{"unknown group, refused at commit", "OFPBAC_BAD_OUT_GROUP",
			encode(t, applyActions(newFlow(0, 10, openflow15.NewInPortField(2)), openflow15.NewActionGroup(99))), true},
		{"table full, refused at commit", "OFPFMFC_TABLE_FULL", ipFlows(t, 5, 1, 1, 1)[0], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Bundle(ctx, []Message{tc.m})
			var be *BundleError
			if !errors.As(err, &be) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("bundle = %v, want a *BundleError", err)
			}
			if be.AtCommit != tc.atCommit || be.Committed || len(be.Failed) != 1 || be.Failed[0].Index != 0 || be.Failed[0].Name != tc.want {
				t.Errorf("bundle = %+v, want message 0 refused with %s, AtCommit %v", be, tc.want, tc.atCommit)
			}
			after, err := s.DumpFlows(ctx, "br0")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(before, after) {
				t.Errorf("flows changed by a refused bundle:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
	// A stream announced with room for more that makes one message is a bundle of one message too.
	if err := c.BundleStreamUpTo(ctx, 3, func(emit func(Message) error) error {
		return emit(ipFlows(t, 0, 100, 7, 1)[0])
	}); err != nil {
		t.Fatalf("stream of one flow: %v", err)
	}
	st := c.Stats()
	if st.BundlesCommitted != 2 || st.BundlesFailed != 3 {
		t.Errorf("%d bundles committed, %d failed; want 2 and 3", st.BundlesCommitted, st.BundlesFailed)
	}
	// No barrier; an OPEN and a COMMIT a bundle.
	if st.Sent["BARRIER_REQUEST"] != 0 || st.Sent["BUNDLE_CONTROL"] != 10 || st.Sent["BUNDLE_ADD_MESSAGE"] != 5 || st.Sent["FLOW_MOD"] != 5 {
		t.Errorf("sent %v, want no barrier, 10 bundle controls, 5 adds and flow mods", st.Sent)
	}
	flows, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(flows, "priority=100,ip,nw_dst=10.0.0.7 actions=output:2") {
		t.Errorf("br0 holds %q, want the streamed flow", flows)
	}
}
