package store

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// The store opens bbolt with NoFreelistSync (boltOptions): its commits write
// no freelist, and bbolt rebuilds it at open from the pages the tree does not
// reach. These tests hold it to what a store must keep: a store of either
// kind opens under either option with its entries and the right free pages,
// after a clean close or a kill -9 in the middle of writes.

// checkFreePages fails t unless the pages bbolt holds free in s are exactly
// those below the high-water mark that neither the tree nor a synced
// freelist page holds, as the file says (read without bbolt).
func checkFreePages(t *testing.T, s *Store) {
	t.Helper()
	f, err := os.Open(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m0 := parseMeta(readAt(f, 0, pageHeaderSize+metaSize))
	ps := int(m0.pageSize)
	m := m0
	if m1 := parseMeta(readAt(f, int64(ps), pageHeaderSize+metaSize)); m1.invalid == "" && (m0.invalid != "" || m1.txid > m0.txid) {
		m = m1
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(m.pgid)*ps, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(data) }()
	w := &walker{data: data, pageSize: ps, hwm: m.pgid, seen: map[uint64]bool{}}
	if err := w.walk(m.freelist, m.root); err != nil {
		t.Fatal(err)
	}
	held := map[uint64]bool{}
	hold := func(id uint64) {
		overflow := binary.LittleEndian.Uint32(data[int(id)*ps+12:])
		for i := range uint64(overflow) + 1 {
			held[id+i] = true
		}
	}
	for id := range w.seen {
		hold(id)
	}
	if m.freelist != pgidNoFreelist {
		hold(m.freelist)
	}
	var want, got []uint64
	for id := uint64(2); id < m.pgid; id++ {
		if !held[id] {
			want = append(want, id)
		}
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		for id := 2; id < int(m.pgid); id++ {
			p, err := tx.Page(id)
			if err != nil {
				return err
			}
			if p != nil && p.Type == "free" {
				got = append(got, uint64(id))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bbolt's free pages %v, want the %d pages the tree does not reach %v (high-water mark %d)", got, len(want), want, m.pgid)
	}
}

// metaFreelists returns the freelist page ids both meta pages name.
func metaFreelists(t *testing.T, path string) [2]uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m0 := parseMeta(readAt(f, 0, pageHeaderSize+metaSize))
	m1 := parseMeta(readAt(f, int64(m0.pageSize), pageHeaderSize+metaSize))
	return [2]uint64{m0.freelist, m1.freelist}
}

// freelistFlows is the i-th write of these tests: a Sync of module "pod" to
// a run of flows whose start and length move with i, so that each write
// frees pages and takes others.
func freelistFlows(i int) []entry.Entry {
	return benchEntries(50+(i*397)%3000, (i*131)%5000)
}

// checkFlows fails t unless s holds exactly es as module pod's flows on br-int.
func checkFlows(t *testing.T, s *Store, es []entry.Entry) {
	t.Helper()
	got, err := s.Entries().All("br-int")
	if err != nil {
		t.Fatal(err)
	}
	if !sameFlows(got, es) {
		t.Fatalf("the store holds %d flows, want %d", len(got), len(es))
	}
}

func sameFlows(got, want []entry.Entry) bool {
	if len(got) != len(want) {
		return false
	}
	ids := map[string]bool{}
	for _, e := range want {
		ids[string(e.ID)] = true
	}
	for _, e := range got {
		if !ids[string(e.ID)] || e.Module != "pod" {
			return false
		}
	}
	return true
}

// TestFreelistBothWays: a store written by a flowstated that synced its
// freelist opens here, with its entries and its free pages, and takes
// writes; and that flowstated (a downgrade) opens the store this one wrote,
// whose meta pages name no freelist, the same way; three times over.
func TestFreelistBothWays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	i := 0
	for round, synced := range []bool{true, false, true, false, true, false} {
		s, err := Open(path, Options{Timeout: time.Second, syncFreelist: synced})
		if err != nil {
			t.Fatalf("round %d (synced freelist %v): %v", round, synced, err)
		}
		if round > 0 {
			checkFlows(t, s, freelistFlows(i-1))
		}
		checkFreePages(t, s)
		for range 5 {
			if err := s.Entries().Sync("br-int", "pod", freelistFlows(i), nil); err != nil {
				t.Fatal(err)
			}
			i++
		}
		checkFreePages(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fl := metaFreelists(t, path)
		if none := fl[0] == pgidNoFreelist && fl[1] == pgidNoFreelist; none == synced {
			t.Fatalf("round %d (synced freelist %v): the meta pages name freelists %v", round, synced, fl)
		}
	}
}

// TestFreelistAfterKill: a flowstated writing without syncing its freelist
// is killed (SIGKILL) at random moments of a stream of writes, most of them
// inside a transaction or its commit. Each time, the store opens with every
// acknowledged write (and at most the one under way), bbolt's free pages are
// exactly the pages the tree does not reach, and writes go on; at the end a
// flowstated that syncs its freelist opens it the same way.
func TestFreelistAfterKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 35))
	next := 0 // the child's first write
	acked := -1
	for kill := range 6 {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), freelistChildEnv+"="+path, "FLOWSTATE_FREELIST_FROM="+strconv.Itoa(next))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random number of acknowledged writes: the next one is
		// under way.
		after := 3 + rng.IntN(30)
		sc := bufio.NewScanner(out)
		n := 0
		for n < after && sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "acked "); ok {
				if acked, err = strconv.Atoi(v); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		// A random moment of the write under way (a write takes 1-20 ms).
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if n < after {
			t.Fatalf("kill %d: the child stopped after %d acknowledged writes, before %d", kill, n, after)
		}
		s, err := Open(path, Options{Timeout: time.Second})
		if err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
		// The last acknowledged write, or the one that was under way.
		got, err := s.Entries().All("br-int")
		if err != nil {
			t.Fatal(err)
		}
		at := acked
		if !sameFlows(got, freelistFlows(acked)) {
			at = acked + 1
			if !sameFlows(got, freelistFlows(acked+1)) {
				t.Fatalf("kill %d: the store holds %d flows, neither write %d (acknowledged last) nor %d", kill, len(got), acked, acked+1)
			}
		}
		checkFreePages(t, s)
		if err := s.Entries().Sync("br-int", "pod", freelistFlows(at+1), nil); err != nil {
			t.Fatal(err)
		}
		checkFreePages(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		acked = at + 1
		next = at + 2
	}
	s, err := Open(path, Options{Timeout: time.Second, syncFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkFlows(t, s, freelistFlows(acked))
	checkFreePages(t, s)
	if err := s.Entries().Sync("br-int", "pod", freelistFlows(next), nil); err != nil {
		t.Fatal(err)
	}
	checkFreePages(t, s)
}

// freelistChildEnv makes the test binary run as TestFreelistAfterKill's
// writer (TestMain), the store's path the value.
const freelistChildEnv = "FLOWSTATE_FREELIST_CHILD"

// runFreelistChild writes until killed, printing each write's number once
// it is acknowledged (committed).
func runFreelistChild(path string) int {
	from, err := strconv.Atoi(os.Getenv("FLOWSTATE_FREELIST_FROM"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := Open(path, Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := from; ; i++ {
		if err := s.Entries().Sync("br-int", "pod", freelistFlows(i), nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Printf("acked %d\n", i)
	}
}
