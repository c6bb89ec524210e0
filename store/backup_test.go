package store

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

func put(s *Store, module string, es ...entry.Entry) error {
	return s.Update(func(w *Writer) error {
		_, err := w.Put("br-int", module, es)
		return err
	})
}

// firstWrite calls fn once, at the first Write.
type firstWrite struct {
	bytes.Buffer
	once sync.Once
	fn   func()
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(w.fn)
	return w.Buffer.Write(p)
}

// TestBackup: the copy is a store file with the same id holding the state
// as of the start of the backup; a write committed while it runs is not in it.
func TestBackup(t *testing.T) {
	s := openTest(t)
	if err := put(s, "pipeline", flow("pipeline", 0, 1, "a"), flow("pipeline", 1, 1, "b")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var putErr error
	w := &firstWrite{fn: func() {
		wg.Go(func() { putErr = put(s, "pod", flow("pod", 2, 1, "c")) })
	}}
	n, err := s.File().Backup(w)
	wg.Wait()
	if err != nil || putErr != nil || n != int64(w.Len()) || n == 0 {
		t.Fatalf("backup: %d bytes (%d written), %v; concurrent put: %v", n, w.Len(), err, putErr)
	}
	if got := list(t, s, Filter{}); len(got) != 3 {
		t.Fatalf("the live store holds %d entries, want 3", len(got))
	}

	path := filepath.Join(t.TempDir(), "restored.db")
	if err := os.WriteFile(path, w.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("opening the backup: %v", err)
	}
	defer r.Close()
	if r.Identity().ID() != s.Identity().ID() {
		t.Fatalf("restored store id %s, want %s", r.Identity().ID(), s.Identity().ID())
	}
	got := list(t, r, Filter{})
	if len(got) != 2 || got[0].Module != "pipeline" || got[1].Module != "pipeline" {
		t.Fatalf("restored entries %+v, want the two of pipeline only", got)
	}
}
