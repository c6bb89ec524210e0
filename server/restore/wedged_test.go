package restore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/store"
)

// TestWedgedStore: a store operation that does not return (here a read
// whose caller never finishes, as one waiting for a remap would) makes the
// engine report itself wedged once it is older than WedgeAfter, naming the
// store, so health, the watchdog and the guard lease see it; the report
// ends when the operation does.
func TestWedgedStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(filepath.Join(t.TempDir(), "fs.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fwd := flowEntry(t, "pipeline", "table=0,priority=10,in_port=1,actions=output:2")
	if err := st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "pipeline", []entry.Entry{fwd})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Store: st, RunDir: t.TempDir(), OVSDB: "unix:" + filepath.Join(t.TempDir(), "none.sock"),
		Bridges: []string{"br-int"}, WedgeAfter: 300 * time.Millisecond, BootID: "b", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if w := e.Wedged(); w != "" {
		t.Fatalf("idle engine wedged: %s", w)
	}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Entries().ScanFlows("br-int", nil, func(store.Record) error {
			<-release
			return nil
		})
	}()
	var w string
	for w = e.Wedged(); !strings.Contains(w, "store read busy"); w = e.Wedged() {
		if ctx.Err() != nil {
			t.Fatalf("a store read stuck past WedgeAfter: Wedged = %q", w)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Wedged: %s", w)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for w = e.Wedged(); w != ""; w = e.Wedged() {
		if ctx.Err() != nil {
			t.Fatalf("still wedged after the read returned: %q", w)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
