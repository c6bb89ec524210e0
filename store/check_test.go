package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// corruptFixture writes a store with enough flows for a branch page, and
// pages freed, and returns its path and layout. syncedFreelist writes it as
// flowstated did before NoFreelistSync (boltOptions): with a freelist page
// that is not empty, as stores in the field still are; else there is none.
type fixture struct {
	path      string
	pageSize  int
	branch    uint64 // root page of br-int's flow bucket (a branch page)
	leaf      uint64 // its first child
	freelist  uint64
	newerMeta int
	// used is the size of the pages the meta counts; the file may be
	// larger (bbolt grows it ahead).
	used int64
}

func corruptFixture(t *testing.T, syncedFreelist bool) fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second, syncFreelist: syncedFreelist})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Entries().Put("br-int", "pod", benchEntries(2000, 0), nil); err != nil {
		t.Fatal(err)
	}
	// Free some pages, so a synced freelist holds ids.
	if err := s.Entries().Sync("br-int", "pod", benchEntries(1500, 0), nil); err != nil {
		t.Fatal(err)
	}
	fx := fixture{path: path, pageSize: s.db.Info().PageSize}
	err = s.db.View(func(tx *bolt.Tx) error {
		fb := tx.Bucket(bucketBridges).Bucket([]byte("br-int")).Bucket(kindBuckets[entry.KindFlow])
		fx.branch = uint64(fb.RootPage())
		fx.newerMeta = int(tx.ID() % 2)
		fx.used = tx.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b := fx.read(t, fx.branch)
	if flags := binary.LittleEndian.Uint16(b[8:10]); flags != flagBranch {
		t.Fatalf("flow bucket root %d has type %#x, want a branch page", fx.branch, flags)
	}
	fx.leaf = binary.LittleEndian.Uint64(b[pageHeaderSize+8:])
	m := parseMeta(fx.read(t, uint64(fx.newerMeta)))
	fx.freelist = m.freelist
	return fx
}

func (fx fixture) read(t *testing.T, id uint64) []byte {
	t.Helper()
	f, err := os.Open(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, fx.pageSize)
	if _, err := f.ReadAt(b, int64(id)*int64(fx.pageSize)); err != nil {
		t.Fatal(err)
	}
	return b
}

// patch writes b at byte off of page id.
func (fx fixture) patch(t *testing.T, id uint64, off int, b []byte) {
	t.Helper()
	f, err := os.OpenFile(fx.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(id)*int64(fx.pageSize)+int64(off)); err != nil {
		t.Fatal(err)
	}
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// TestOpenCorrupt injects each kind of damage into a real store file, one
// whose commits wrote no freelist and one whose commits did (as stores in
// the field were written): Open refuses it with one CorruptError that names
// the damage and the recovery, never a panic or a fault.
func TestOpenCorrupt(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, fx fixture)
		want   string
	}{
		{"data page zeroed", func(t *testing.T, fx fixture) {
			fx.patch(t, fx.leaf, 0, make([]byte, fx.pageSize))
		}, "identifies itself as page 0"},
		{"data page elements garbage", func(t *testing.T, fx fixture) {
			junk := make([]byte, 64)
			for i := range junk {
				junk[i] = 0xA5
			}
			fx.patch(t, fx.leaf, pageHeaderSize, junk)
		}, "outside the page"},
		{"data page key damaged", func(t *testing.T, fx fixture) {
			// The leaf's first key rises above its successors: its
			// record's checksum covers the key.
			p := fx.read(t, fx.leaf)
			at := pageHeaderSize
			pos := int(binary.LittleEndian.Uint32(p[at+4:]))
			fx.patch(t, fx.leaf, at+pos, []byte{0xFF})
		}, "bucket bridges/br-int/flow key ff"},
		{"data page keys out of order", func(t *testing.T, fx fixture) {
			// The same, with the checksum made to match the new key:
			// only bbolt's own check sees that.
			p := fx.read(t, fx.leaf)
			at := pageHeaderSize
			pos, ks, vs := int(binary.LittleEndian.Uint32(p[at+4:])), int(binary.LittleEndian.Uint32(p[at+8:])), int(binary.LittleEndian.Uint32(p[at+12:]))
			k := append([]byte(nil), p[at+pos:at+pos+ks]...)
			k[0] = 0xFF
			v := p[at+pos+ks : at+pos+ks+vs]
			fx.patch(t, fx.leaf, at+pos, k[:1])
			fx.patch(t, fx.leaf, at+pos+ks+vs-sumSize, binary.BigEndian.AppendUint32(nil, valueSum(k, v[:vs-sumSize])))
		}, "consistency check"},
		{"branch page child out of range", func(t *testing.T, fx fixture) {
			fx.patch(t, fx.branch, pageHeaderSize+8, u64(1<<40))
		}, "out of range"},
		{"branch page type", func(t *testing.T, fx fixture) {
			fx.patch(t, fx.branch, 8, []byte{0x10, 0})
		}, "want a branch or leaf page"},
		{"half-truncated file", func(t *testing.T, fx fixture) {
			if err := os.Truncate(fx.path, fx.used/2); err != nil {
				t.Fatal(err)
			}
		}, "the file was truncated"},
		{"newer meta page", func(t *testing.T, fx fixture) {
			fx.patch(t, uint64(fx.newerMeta), pageHeaderSize+48, u64(1<<33)) // its txid
		}, "bbolt would silently fall back to the older meta page"},
		{"older meta page", func(t *testing.T, fx fixture) {
			fx.patch(t, uint64(1-fx.newerMeta), pageHeaderSize+56, u64(0)) // its checksum
		}, "is invalid (bad checksum)"},
		{"both meta pages", func(t *testing.T, fx fixture) {
			fx.patch(t, 0, pageHeaderSize, u64(0))
			fx.patch(t, 1, pageHeaderSize, u64(0))
		}, "both meta pages are invalid"},
	}
	// A store's freelist page, as a flowstated from before NoFreelistSync
	// left it: damaged, it is refused by this one too.
	freelistCases := []struct {
		name   string
		damage func(t *testing.T, fx fixture)
		want   string
	}{
		{"freelist id out of range", func(t *testing.T, fx fixture) {
			fx.patch(t, fx.freelist, pageHeaderSize, u64(1<<40))
		}, "freelist: page"},
		{"freelist page type", func(t *testing.T, fx fixture) {
			fx.patch(t, fx.freelist, 8, []byte{flagLeaf, 0})
		}, "want a freelist page"},
	}
	type run struct {
		syncedFreelist bool
		name           string
		damage         func(t *testing.T, fx fixture)
		want           string
	}
	var all []run
	for _, synced := range []bool{false, true} {
		for _, tc := range cases {
			all = append(all, run{synced, tc.name, tc.damage, tc.want})
		}
	}
	for _, tc := range freelistCases {
		all = append(all, run{true, tc.name, tc.damage, tc.want})
	}
	for _, tc := range all {
		layout := "no freelist/"
		if tc.syncedFreelist {
			layout = "synced freelist/"
		}
		t.Run(layout+tc.name, func(t *testing.T) {
			fx := corruptFixture(t, tc.syncedFreelist)
			if hasFreelist := fx.freelist != pgidNoFreelist; hasFreelist != tc.syncedFreelist || (hasFreelist && fx.freelist < 2) {
				t.Fatalf("fixture's freelist page is %d, want synced %v", fx.freelist, tc.syncedFreelist)
			}
			tc.damage(t, fx)
			s, err := Open(fx.path, Options{Timeout: time.Second})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open accepted a damaged store")
			}
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Open: %v, want a CorruptError", err)
			}
			msg := err.Error()
			for _, w := range []string{tc.want, "flowstated will not start on it", "docs/operations.md", "restore the latest backup", "--take-over"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// TestOpenEmptyFile: bbolt initialises a 0-byte file as a new store; Open
// reports it, and the store gets a new id, which the server compares with the
// one recorded on the bridge.
func TestOpenEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.File().Preflight().Missing {
		t.Errorf("preflight of a new file: %+v, want Missing", s.File().Preflight())
	}
	id := s.Identity().ID()
	if err := s.Identity().MarkManaged("br-int", time.Now()); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Identity().ID() != id || s.File().Preflight().Missing || s.File().Preflight().Empty {
		t.Errorf("reopened store: id %s (was %s), preflight %+v", s.Identity().ID(), id, s.File().Preflight())
	}
	if m, err := s.Identity().Managed("br-int"); err != nil || !m {
		t.Errorf("Managed(br-int) = %v, %v after MarkManaged", m, err)
	}
	_ = s.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.File().Preflight().Empty {
		t.Errorf("preflight of a 0-byte file: %+v, want Empty", s.File().Preflight())
	}
	if s.Identity().ID() == id || len(s.Identity().ID()) != 36 {
		t.Errorf("a 0-byte file kept id %q (was %q)", s.Identity().ID(), id)
	}
	if m, err := s.Identity().Managed("br-int"); err != nil || m {
		t.Errorf("Managed(br-int) = %v, %v on a new store", m, err)
	}
}

// BenchmarkOpen1M: Open of a store of 1M flows, the file and tree checks
// included (the start-up budget is 1 s). Building the store takes a while:
// run with -benchtime=3x.
func BenchmarkOpen1M(b *testing.B) {
	path := filepath.Join(b.TempDir(), "b.db")
	s, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	const n, batch = 1_000_000, 20_000
	for i := 0; i < n; i += batch {
		if err := s.Entries().Put("br-int", "pod", benchEntries(batch, i), nil); err != nil {
			b.Fatal(err)
		}
	}
	_ = s.Close()
	fi, _ := os.Stat(path)
	var checked time.Duration
	for b.Loop() {
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		checked += s.File().CheckDuration()
		_ = s.Close()
	}
	b.ReportMetric(checked.Seconds()/float64(b.N), "s-check/op")
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
}

// TestWalkFault: a page that faults when read (here the file truncated
// under the mapping, as a disk read error would) fails the check with a read
// error naming the fault; it does not crash flowstated.
func TestWalkFault(t *testing.T) {
	fx := corruptFixture(t, false)
	f, err := os.OpenFile(fx.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, int(fx.used), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(data) }()
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	w := &walker{data: data, pageSize: fx.pageSize, hwm: uint64(fx.used) / uint64(fx.pageSize), seen: map[uint64]bool{}}
	err = w.walk(fx.freelist, fx.branch)
	var re *readError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "fault") {
		t.Fatalf("walk of a truncated mapping: %v, want a read error naming the fault", err)
	}
}

// TestOpenKeepsPageSize: a store bbolt created with 4 KiB pages (before
// newPageSize) opens, checks and takes writes with its own page size, and a
// new store gets newPageSize.
func TestOpenKeepsPageSize(t *testing.T) {
	old := filepath.Join(t.TempDir(), "old.db")
	db, err := bolt.Open(old, 0o600, &bolt.Options{PageSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want int
	}{{old, 4096}, {filepath.Join(t.TempDir(), "new.db"), newPageSize}} {
		for range 2 { // created or opened, then reopened with the flows
			s, err := Open(tc.path, Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.db.Info().PageSize; got != tc.want {
				t.Errorf("%s: page size %d, want %d", tc.path, got, tc.want)
			}
			if err := s.Entries().Put("br-int", "pod", benchEntries(3000, 0), nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if s, err := Open(tc.path, Options{Timeout: time.Second}); err != nil {
			t.Fatal(err)
		} else if got := s.File().Preflight().PageSize; got != tc.want {
			t.Errorf("%s: the file check read page size %d, want %d", tc.path, got, tc.want)
		} else {
			_ = s.Close()
		}
	}
}
