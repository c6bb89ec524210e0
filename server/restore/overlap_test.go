package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

// allStored lists every entry te's store holds, with its owner and content.
func allStored(t *testing.T, te *testEngine) []string {
	t.Helper()
	var out []string
	if err := te.cfg.Store.Entries().List(store.Filter{}, func(bridge string, e entry.Entry) error {
		out = append(out, fmt.Sprintf("%s %s %s %x %x", bridge, e.Kind, e.Module, e.ID, e.Payload))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPipeRefusalUndone: a pipelined Put's store commits while the switch
// decides; when the switch refuses it, the commit is taken back before the
// caller is answered. A new flow refused at commit (a full table) and a
// changed flow refused when added (an unmapped TLV field) each fail with the
// switch's error, and leave the store as it was before them (the changed
// flow's old content back, on the switch too); while the undo waited, the
// store held the write (the commit overlapped the verdict).
func TestPipeRefusalUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var count pipeCount
	var te *testEngine
	var undos atomic.Int32
	var heldAtUndo atomic.Value // string: what the store held of module "pod" at the undo
	// A TLV field the switch has no mapping for: vswitchd refuses it when
	// its BUNDLE_ADD arrives (NXFMFC_INVALID_TLV_FIELD).
	changed := flows(t, "table=7,priority=3,ip,nw_dst=10.37.0.1,actions=set_field:0x1->tun_metadata0")
	te = startEngine(ctx, t, &Faults{
		Piped: count.piped,
		BeforeUndo: func() {
			undos.Add(1)
			heldAtUndo.Store(fmt.Sprint(stored(t, te, "pod")))
		},
	})
	full := fullTable5(ctx, t, te)
	if _, err := te.Writes().Put(ctx, testBridge, "fill", write.Declared{Entries: flows(t, full[:100]...)}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Writes().Put(ctx, testBridge, "pod", write.Declared{Entries: flows(t, "table=7,priority=3,ip,nw_dst=10.37.0.1,actions=drop")}); err != nil {
		t.Fatal(err)
	}
	before := allStored(t, te)
	piped := count.reqs.Load()

	_, err := te.Writes().Put(ctx, testBridge, "pod", write.Declared{Entries: flows(t, full[100])})
	var ee *errdefs.EntryError
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.As(err, &ee) || !strings.Contains(err.Error(), "TABLE_FULL") {
		t.Fatalf("a Put into a full table: %v, want INVALID_ARGUMENT naming OFPFMFC_TABLE_FULL and the entry", err)
	}
	if n := undos.Load(); n != 1 {
		t.Fatalf("%d undos, want the refused Put's", n)
	}
	if held, _ := heldAtUndo.Load().(string); held != "2" {
		t.Fatalf("at the undo the store held %s entries of pod, want 2: the write committed before the verdict", held)
	}
	if after := allStored(t, te); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the refusal the store holds\n%q\nwant what it held before\n%q", after, before)
	}

	_, err = te.Writes().Put(ctx, testBridge, "pod", write.Declared{Entries: changed})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.As(err, &ee) || !strings.Contains(err.Error(), "INVALID_TLV_FIELD") {
		t.Fatalf("a refused change: %v, want INVALID_ARGUMENT with the switch's error", err)
	}
	if n := undos.Load(); n != 2 {
		t.Fatalf("%d undos, want the refused change's too", n)
	}
	if after := allStored(t, te); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the refused change the store holds\n%q\nwant the old content\n%q", after, before)
	}
	if got := count.reqs.Load() - piped; got != 2 {
		t.Fatalf("%d of the two refused Puts went through a pipe", got)
	}
	out, err := te.sb.Ofctl(ctx, "dump-flows", testBridge, "table=7")
	if err != nil || !strings.Contains(out, "actions=drop") {
		t.Fatalf("table 7 does not hold the old content (%v):\n%s", err, out)
	}
	poll(ctx, t, "bridge converged", func() bool { return te.bridges[testBridge].IsConverged() })
	if cs, err := diffAll(ctx, te.Engine, testBridge); err != nil || len(cs) != 0 {
		t.Fatalf("diff: %d changes, %v", len(cs), err)
	}
}
