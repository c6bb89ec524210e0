package server_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// encapMPLS is a flow that Open vSwitch takes from 2.17 on and 2.15 refuses:
// encap(mpls) arrived with OVS commit 1917ace89 ("Encap & Decap actions for
// MPLS packet type", NEWS of v2.17.0). 2.15's vswitchd decodes NXAST_ENCAP
// of an MPLS packet type as NXBAC_BAD_HEADER_TYPE (lib/ofp-actions.c,
// decode_NXAST_RAW_ENCAP), at BUNDLE_ADD.
const encapMPLS = "table=0,priority=10,ip,actions=encap(mpls),set_mpls_label:2,encap(ethernet),output:2"

// takesEncapMPLS reports whether vswitchd version v (as OFPMP_DESC gives
// it, "3.1.0") has encap(mpls): 2.17 and later.
func takesEncapMPLS(t *testing.T, v string) bool {
	t.Helper()
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		t.Fatalf("vswitchd version %q is not MAJOR.MINOR...", v)
	}
	return ma > 2 || ma == 2 && mi >= 17
}

// TestVersionDecides (issue 33): an entry the running vswitchd's version
// cannot take is refused at declaration with an error that names that
// version, leaving nothing behind, and one stored while the bridge was away
// is quarantined by the replay with a reason that names it, the rest of the
// replay applied and the node released. A version that takes the entry
// applies it both ways. Run against each root of scripts/test-matrix.sh:
// on 2.15 the entry is refused, on 3.1 and 3.5 it is taken.
func TestVersionDecides(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	v := e.vswitchdBuild(ctx).GetVersion()
	takes := takesEncapMPLS(t, v)
	t.Logf("ovs-vswitchd %s: encap(mpls) taken: %v", v, takes)

	// At declaration.
	pod := client.Module{Bridge: "br-int", Name: "pod"}
	applied, err := e.c.Put(ctx, pod, client.FlowText(pipeline[0]), client.FlowText(encapMPLS))
	if takes {
		if err != nil || !applied {
			t.Fatalf("ovs-vswitchd %s: put of %q: applied %v, %v", v, encapMPLS, applied, err)
		}
		if got := strings.Join(e.dump(ctx, "br-int"), "\n"); !strings.Contains(got, "encap(mpls)") {
			t.Fatalf("ovs-vswitchd %s holds\n%s\nwant the encap(mpls) flow", v, got)
		}
		if _, err := e.c.Delete(ctx, pod, client.FlowText(pipeline[0]), client.FlowText(encapMPLS)); err != nil {
			t.Fatal(err)
		}
	} else {
		var ee *errdefs.EntryError
		want := "ovs-vswitchd " + v + " refused the flow: NXBAC_BAD_HEADER_TYPE"
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.As(err, &ee) || ee.Index != 1 || !strings.Contains(err.Error(), want) {
			t.Fatalf("put of %q: %v; want INVALID_ARGUMENT naming entry 1 and %q", encapMPLS, err, want)
		}
		if es, err := e.c.List(ctx, client.Filter{}); err != nil || len(es) != 0 {
			t.Fatalf("after a refused put the store holds %d entries (%v)", len(es), err)
		}
		if got := e.dump(ctx, "br-int"); len(got) != 0 {
			t.Fatalf("after a refused put the switch holds %q", got)
		}
	}

	// At a replay: stored while vswitchd was away (as by a vswitchd that
	// took it, before a downgrade), then replayed into this one.
	if err := e.sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "br-int disconnected", func() (bool, error) {
		return !e.bridgeStatus(ctx, "br-int").Connected, nil
	})
	flows := []string{pipeline[0], pipeline[5], encapMPLS}
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(flows)...); err != nil || applied {
		t.Fatalf("put while vswitchd is away: applied %v, %v", applied, err)
	}
	if err := e.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitRestored(ctx)
	st := e.status(ctx)
	if r := st.Bridges[0].LastReplay; r.Error != "" {
		t.Fatalf("ovs-vswitchd %s: the replay failed: %s", v, r.Error)
	}
	if takes {
		if len(st.Quarantined) != 0 {
			t.Fatalf("ovs-vswitchd %s: quarantined %v", v, st.Quarantined)
		}
		e.assertExact(ctx, flows)
		return
	}
	want := "NXBAC_BAD_HEADER_TYPE (refused by ovs-vswitchd " + v + ")"
	if q := st.Quarantined; len(q) != 1 || q[0].Error != want || !strings.Contains(q[0].Entry.Text, "encap(mpls)") {
		t.Fatalf("ovs-vswitchd %s: quarantined %v; want the encap(mpls) flow with %q", v, q, want)
	}
	e.assertExact(ctx, flows[:2])
	// Settled: the next replay sends nothing, the entry still left out.
	bs, err := e.c.Reconcile(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if r := bs[0].LastReplay; r.Error != "" || r.Messages != 0 {
		t.Fatalf("ovs-vswitchd %s: a replay after the quarantine: %+v, want nothing sent", v, r)
	}
	if q := e.status(ctx).Quarantined; len(q) != 1 || q[0].Error != want {
		t.Fatalf("ovs-vswitchd %s: quarantined after a replay %v", v, q)
	}
}
