package ofconn

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/errdefs"
)

func TestHandshake(t *testing.T) {
	ctx, s := startOVS(t)
	c, err := Dial(ctx, s.MgmtPath("br0"), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	if got := c.Stats().Sent["BARRIER_REQUEST"]; got != 1 {
		t.Errorf("barriers sent = %d, want 1", got)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
	if err := c.Barrier(ctx); !errors.Is(err, ErrClosed) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("barrier after Close = %v, want ErrClosed and errdefs.ErrUnavailable", err)
	}
}

func TestBundleCommits(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	const n = 1000
	msgs := ipFlows(t, 0, 100, 0, n)
	msgs = append(msgs, encode(t, applyActions(newFlow(1, 10, openflow15.NewInPortField(1)), output(2))))
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	flows, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(flows), n+2; got != want { // plus the bridge's priority=0 actions=NORMAL
		t.Fatalf("ovs-ofctl dump-flows shows %d flows, want %d:\n%s", got, want, strings.Join(flows[:min(len(flows), 10)], "\n"))
	}
	for _, want := range []string{
		"priority=100,ip,nw_dst=10.0.0.0 actions=output:2",
		"priority=100,ip,nw_dst=10.0.3.231 actions=output:2",
		"table=1, priority=10,in_port=1 actions=output:2",
	} {
		if !slices.Contains(flows, want) {
			t.Errorf("dump lacks %q; first flows:\n%s", want, strings.Join(flows[:5], "\n"))
		}
	}
	st := c.Stats()
	if st.Sent["FLOW_MOD"] != n+1 || st.Sent["BUNDLE_ADD_MESSAGE"] != n+1 || st.BundlesCommitted != 1 {
		t.Errorf("stats = %+v, want %d FLOW_MODs and BUNDLE_ADDs and 1 bundle", st, n+1)
	}
}

func TestBundleRejectsBadAdds(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	if err := c.Bundle(ctx, ipFlows(t, 0, 100, 0, 3)); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	before, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}

	gotoLower := newFlow(2, 10, openflow15.NewInPortField(1))
	gotoLower.AddInstruction(openflow15.NewInstrGotoTable(1))
	badPort := applyActions(newFlow(0, 10, openflow15.NewInPortField(1)), output(0xff00))
	noGroup := applyActions(newFlow(0, 10, openflow15.NewInPortField(2)), openflow15.NewActionGroup(99))
	noPrereq := applyActions(newFlow(0, 10, openflow15.NewTcpDstField(80)), output(2))

	for _, tc := range []struct {
		name     string
		bad      map[int]Message // index in the bundle -> bad message
		want     []AddError      // Index and Name are checked
		atCommit bool
	}{
		{"goto lower table", map[int]Message{6: encode(t, gotoLower)}, []AddError{{Index: 6, Name: "OFPBIC_BAD_TABLE_ID"}}, false},
		{"bad output port", map[int]Message{6: encode(t, badPort)}, []AddError{{Index: 6, Name: "OFPBAC_BAD_OUT_PORT"}}, false},
		{"two bad", map[int]Message{2: encode(t, noPrereq), 9: encode(t, gotoLower)},
			[]AddError{{Index: 2, Name: "OFPBMC_BAD_PREREQ"}, {Index: 9, Name: "OFPBIC_BAD_TABLE_ID"}}, false},
		// OVS checks that groups exist at commit: a group may be added earlier in the same bundle.
		{"unknown group", map[int]Message{4: encode(t, noGroup)}, []AddError{{Index: 4, Name: "OFPBAC_BAD_OUT_GROUP"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := ipFlows(t, 0, 200, 1000, 10)
			for i, m := range tc.bad {
				msgs[i] = m
			}
			err := c.Bundle(ctx, msgs)
			var be *BundleError
			if !errors.As(err, &be) {
				t.Fatalf("bundle = %v, want a *BundleError", err)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%v does not match errdefs.ErrInvalidArgument", err)
			}
			if be.AtCommit != tc.atCommit || be.Committed {
				t.Errorf("AtCommit=%v Committed=%v, want %v, false", be.AtCommit, be.Committed, tc.atCommit)
			}
			if len(be.Failed) != len(tc.want) {
				t.Fatalf("failed = %+v, want %+v", be.Failed, tc.want)
			}
			for i, w := range tc.want {
				if got := be.Failed[i]; got.Index != w.Index || got.Name != w.Name {
					t.Errorf("failed[%d] = index %d %s, want index %d %s", i, got.Index, got.Name, w.Index, w.Name)
				}
			}
			after, err := s.DumpFlows(ctx, "br0")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(before, after) {
				t.Errorf("flows changed by a rejected bundle:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
	if st := c.Stats(); st.BundlesFailed != 4 || st.BundlesCommitted != 1 {
		t.Errorf("stats: %d bundles failed, %d committed; want 4 and 1", st.BundlesFailed, st.BundlesCommitted)
	}
	// The connection is still usable.
	if err := c.Bundle(ctx, ipFlows(t, 0, 100, 3, 1)); err != nil {
		t.Fatalf("bundle after rejections: %v", err)
	}
}

func TestBundleCommitFailure(t *testing.T) {
	ctx, s := startOVS(t)
	// Table 0 refuses more than 5 flows; it holds the bridge's NORMAL flow.
	limitTable(ctx, t, s, 0, 5)
	c := dial(ctx, t, s, Options{})
	if err := c.Bundle(ctx, ipFlows(t, 0, 100, 0, 3)); err != nil {
		t.Fatalf("bundle within the limit: %v", err)
	}
	before, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	err = c.Bundle(ctx, ipFlows(t, 0, 100, 100, 3))
	var be *BundleError
	if !errors.As(err, &be) {
		t.Fatalf("bundle over the limit = %v, want a *BundleError", err)
	}
	t.Logf("commit failure: %v", err)
	if !be.AtCommit || be.Committed {
		t.Errorf("AtCommit=%v Committed=%v, want true, false", be.AtCommit, be.Committed)
	}
	if len(be.Failed) != 1 || be.Failed[0].Name != "OFPFMFC_TABLE_FULL" || be.Failed[0].Index != 1 {
		t.Errorf("failed = %+v, want message 1 with OFPFMFC_TABLE_FULL", be.Failed)
	}
	after, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("flows changed by a failed commit:\nbefore %q\nafter  %q", before, after)
	}
}
