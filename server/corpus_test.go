package server_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// TestProductionCorpus puts a real CNI pipeline (Antrea v1.15: 167 flows,
// groups, a meter) through flowstate and checks that the bridge then holds
// exactly what ovs-ofctl installs from the same text on a second bridge, and
// that a reconcile finds nothing to change. The corpus is in
// testdata/antrea-v1.15; FLOWSTATE_CORPUS names another directory of the same
// shape.
func TestProductionCorpus(t *testing.T) {
	dir := os.Getenv("FLOWSTATE_CORPUS")
	if dir == "" {
		dir = filepath.Join("testdata", "antrea-v1.15")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Learned flows dumped with the corpus expire: not desired state.
	flows, refused := desiredOnly(t, readCorpus(t, filepath.Join(dir, "flows.txt")))
	groups := readCorpus(t, filepath.Join(dir, "groups.txt"))
	meters := readCorpus(t, filepath.Join(dir, "meters.txt"))

	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	var es []client.Entry
	for _, m := range meters {
		es = append(es, client.MeterText(m))
	}
	for _, g := range groups {
		es = append(es, client.GroupText(g))
	}
	es = append(es, texts(flows)...)
	applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "antrea"}, es...)
	if err != nil || !applied {
		t.Fatalf("put: applied=%v err=%v", applied, err)
	}

	// The oracle: ovs-ofctl installs the same text on br-ref.
	for _, m := range meters {
		if out, err := e.sb.Ofctl(ctx, "add-meter", "br-ref", m); err != nil {
			t.Fatal(err, out)
		}
	}
	if out, err := e.sb.Ofctl(ctx, "add-groups", "br-ref", filepath.Join(dir, "groups.txt")); err != nil {
		t.Fatal(err, out)
	}
	e.wantRefused(ctx, refused)
	e.ofctlFlows(ctx, "add-flows", flows)
	for _, d := range []struct {
		what string
		dump func(context.Context, string) ([]string, error)
	}{{"flows", e.sb.DumpFlows}, {"groups", e.sb.DumpGroups}, {"meters", e.sb.DumpMeters}} {
		want, err := d.dump(ctx, "br-ref")
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.dump(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s differ:\nflowstate:\n%s\novs-ofctl:\n%s", d.what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	resp, err := e.c.Reconcile(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if r := resp[0].LastReplay; r.Messages != 0 {
		changes, _ := e.c.Diff(ctx, "br-int")
		t.Fatalf("reconcile after put sent %d messages: %v", r.Messages, changes)
	}
	// dump-flows prints every flow back in ovs-ofctl syntax.
	stored, err := e.c.List(ctx, client.Filter{Bridge: "br-int"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stored {
		if s.Text == "" || strings.Contains(s.Text, "unprintable") {
			t.Errorf("%s not printable: %q", s.Kind, s.Text)
		}
	}
	if len(stored) != len(flows)+len(groups)+len(meters) {
		t.Fatalf("stored %d entries, want %d", len(stored), len(flows)+len(groups)+len(meters))
	}
}
