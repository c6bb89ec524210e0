package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// encodeRecordV1 is a record as schemas 1 and 2 wrote it (no checksum).
func encodeRecordV1(module string, payload []byte) []byte {
	b := append([]byte{recordVersionV1, byte(len(module))}, module...)
	return append(b, payload...)
}

// leafElement is a key/value of a leaf page as the file holds it.
type leafElement struct {
	page       uint64
	key, value int // offsets in the page
	ksize      int
	vsize      int
}

// leaves returns the leaf pages of the tree rooted at page id of the file at
// path, and their elements.
func leaves(t *testing.T, f *os.File, pageSize int, id uint64) (pages []uint64, els []leafElement) {
	t.Helper()
	b := make([]byte, pageSize)
	if _, err := f.ReadAt(b, int64(id)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	flags, count := le.Uint16(b[8:10]), int(le.Uint16(b[10:12]))
	if flags == flagBranch {
		for i := range count {
			child := le.Uint64(b[pageHeaderSize+i*elementSize+8:])
			p, e := leaves(t, f, pageSize, child)
			pages, els = append(pages, p...), append(els, e...)
		}
		return pages, els
	}
	if flags != flagLeaf {
		t.Fatalf("page %d: type %#x", id, flags)
	}
	for i := range count {
		at := pageHeaderSize + i*elementSize
		pos, ks, vs := int(le.Uint32(b[at+4:])), int(le.Uint32(b[at+8:])), int(le.Uint32(b[at+12:]))
		els = append(els, leafElement{page: id, key: at + pos, value: at + pos + ks, ksize: ks, vsize: vs})
	}
	return []uint64{id}, els
}

// flowLeaves returns the leaf elements of bridge br-int's flow bucket of the
// closed or open store at path.
func flowLeaves(t *testing.T, s *Store) []leafElement {
	t.Helper()
	var root uint64
	if err := s.db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket(bucketBridges).Bucket([]byte("br-int")).Bucket(kindBuckets[entry.KindFlow]).RootPage())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if root == 0 {
		t.Fatal("flow bucket is inline")
	}
	f, err := os.Open(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, els := leaves(t, f, s.db.Info().PageSize, root)
	return els
}

func flipAt(t *testing.T, path string, off int64, mask byte) (old byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[0] ^ mask}, off); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// TestOpenRefusesFlippedBytes: ten random single-byte flips in the used part
// of the flow bucket's leaf pages (element headers, keys, records), each on
// the intact store: Open refuses every one with a CorruptError; a flip in a
// key or value names the bucket and key.
func TestOpenRefusesFlippedBytes(t *testing.T) {
	fx := corruptFixture(t, false)
	s, err := Open(fx.path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	els := flowLeaves(t, s)
	_ = s.Close()
	// The used bytes of each page: from the header's end to the end of its
	// last value.
	end := map[uint64]int{}
	var pages []uint64
	for _, e := range els {
		if _, ok := end[e.page]; !ok {
			pages = append(pages, e.page)
		}
		end[e.page] = max(end[e.page], e.value+e.vsize)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d leaf pages", seed, len(pages))
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range 10 {
		pg := pages[rng.IntN(len(pages))]
		off := pageHeaderSize + rng.IntN(end[pg]-pageHeaderSize)
		mask := byte(1 + rng.IntN(255))
		at := int64(pg)*int64(fx.pageSize) + int64(off)
		old := flipAt(t, fx.path, at, mask)
		s, err := Open(fx.path, Options{Timeout: time.Second})
		if err == nil {
			_ = s.Close()
			t.Fatalf("flip %d (page %d byte %d ^%#x): Open accepted the store", i, pg, off, mask)
		}
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("flip %d: %v, want a CorruptError", i, err)
		}
		inData := off >= pageHeaderSize+elementSize*countOf(els, pg)
		if inData && !strings.Contains(err.Error(), "bucket bridges/br-int/flow key ") && !strings.Contains(err.Error(), "consistency check") {
			t.Errorf("flip %d in a key or value: %v, want the bucket and key named", i, err)
		}
		t.Logf("flip %d: page %d byte %d ^%#x: %s", i, pg, off, mask, ce.Detail)
		if got := flipAt(t, fx.path, at, mask); got != old^mask { // x ^ mask ^ mask: restored
			t.Fatalf("flip %d: read back %#x, want %#x", i, got, old^mask)
		}
	}
	// The store is whole again.
	s, err = Open(fx.path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("the restored store: %v", err)
	}
	_ = s.Close()
}

func countOf(els []leafElement, page uint64) int {
	n := 0
	for _, e := range els {
		if e.page == page {
			n++
		}
	}
	return n
}

// TestDamageWhileRunning: a record damaged under a running store (the file
// written behind bbolt's back) is left out of every read (ScanFlows, List,
// Entries, Get, Counts), reported by Damaged with its bucket and key, and
// taken off when a write replaces it.
func TestDamageWhileRunning(t *testing.T) {
	s := openTest(t)
	es := benchEntries(2000, 0)
	if err := s.Entries().Put("br-int", "pod", es, nil); err != nil {
		t.Fatal(err)
	}
	els := flowLeaves(t, s)
	victim := els[len(els)/2]
	ps := int64(s.db.Info().PageSize)
	// A byte of the payload, inside the record: version, module length,
	// "pod", then the payload.
	flipAt(t, s.Path(), int64(victim.page)*ps+int64(victim.value+2+3+10), 0x01)
	f, _ := os.Open(s.Path())
	key := make([]byte, victim.ksize)
	if _, err := f.ReadAt(key, int64(victim.page)*ps+int64(victim.key)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	n := 0
	if err := s.Entries().ScanFlows("br-int", nil, func(r Record) error {
		if bytes.Equal(r.ID, key) {
			t.Errorf("ScanFlows handed out the damaged flow %x", key)
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(es)-1 {
		t.Errorf("ScanFlows read %d flows, want %d", n, len(es)-1)
	}
	all, err := s.Entries().All("br-int")
	if err != nil || len(all) != len(es)-1 {
		t.Errorf("Entries: %d, %v; want %d", len(all), err, len(es)-1)
	}
	if _, ok, err := s.Entries().Get("br-int", entry.KindFlow, key); ok || err != nil {
		t.Errorf("Get of the damaged flow: found %v, %v", ok, err)
	}
	if cs, err := s.Entries().Counts(); err != nil || cs[0].Flows != len(es)-1 {
		t.Errorf("Counts: %+v, %v", cs, err)
	}
	d := s.File().Damaged("br-int")
	if len(d) != 1 || !bytes.Equal(d[0].Key, key) || d[0].Bucket != "bridges/br-int/flow" || d[0].Kind != entry.KindFlow ||
		!strings.Contains(d[0].String(), "checksum mismatch") {
		t.Fatalf("Damaged: %+v", d)
	}
	// The module declares it again: the write replaces it.
	var again []entry.Entry
	for _, e := range es {
		if bytes.Equal(e.ID, key) {
			again = append(again, e)
		}
	}
	if err := s.Entries().Put("br-int", "pod", again, nil); err != nil {
		t.Fatal(err)
	}
	if d := s.File().Damaged("br-int"); len(d) != 0 {
		t.Errorf("Damaged after the write: %+v", d)
	}
	if _, ok, err := s.Entries().Get("br-int", entry.KindFlow, key); !ok || err != nil {
		t.Errorf("Get after the write: found %v, %v", ok, err)
	}
}

// TestMigrateSums: a schema-2 store (records without checksums, a mirror of
// bare payloads) gets a checksum on every record and mirrored payload at
// Open (the records in transactions of sealChunk, sealInChunks), and reads
// back the same, also when an earlier Open sealed only some of them; a store stamped schema 2 whose records
// already carry checksums is checked, not resealed over damage.
func TestMigrateSums(t *testing.T) {
	write := func(t *testing.T, path string, rec func(k []byte) []byte) {
		t.Helper()
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			meta, _ := tx.CreateBucket(bucketMeta)
			if err := meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, 2)); err != nil {
				return err
			}
			root, _ := tx.CreateBucket(bucketBridges)
			br, _ := root.CreateBucket([]byte("br0"))
			kb, _ := br.CreateBucket(kindBuckets[entry.KindFlow])
			for _, e := range benchEntries(100, 0) {
				if err := kb.Put(e.ID, rec(e.ID)); err != nil {
					return err
				}
			}
			mr, _ := tx.CreateBucket(bucketMirror)
			mb, _ := mr.CreateBucket([]byte("br-ex"))
			mf, _ := mb.CreateBucket(kindBuckets[entry.KindFlow])
			return mf.Put([]byte{0, 0, 0}, []byte("mirrored"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("records and mirrors sealed", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "flowstate.db")
		write(t, path, func([]byte) []byte { return encodeRecordV1("pod", make([]byte, 120)) })
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.Entries().All("br0")
		if err != nil || len(es) != 100 || es[0].Module != "pod" || len(es[0].Payload) != 120 {
			t.Fatalf("entries after migration: %d, %v", len(es), err)
		}
		m, ok, err := s.Mirrors().Get("br-ex")
		if err != nil || !ok || len(m) != 1 || string(m[0].Payload) != "mirrored" {
			t.Fatalf("mirror after migration: %+v, %v, %v", m, ok, err)
		}
		if d := s.File().Damaged(""); len(d) != 0 {
			t.Fatalf("damage after migration: %+v", d)
		}
		_ = s.Close()
		// Reopened: the open-time check verifies every checksum.
		s, err = Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
	})
	t.Run("half sealed, as after a crash during the sealing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "flowstate.db")
		write(t, path, func(k []byte) []byte {
			if k[len(k)-1]%2 == 0 {
				return encodeRecord(k, "pod", make([]byte, 120))
			}
			return encodeRecordV1("pod", make([]byte, 120))
		})
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if es, err := s.Entries().All("br0"); err != nil || len(es) != 100 {
			t.Fatalf("entries after migration: %d, %v", len(es), err)
		}
		if d := s.File().Damaged(""); len(d) != 0 {
			t.Fatalf("damage after migration: %+v", d)
		}
	})
	t.Run("sealed records checked", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "flowstate.db")
		write(t, path, func(k []byte) []byte {
			r := encodeRecord(k, "pod", make([]byte, 120))
			if k[len(k)-1] == 7 {
				r[10] ^= 0x40
			}
			return r
		})
		s, err := Open(path, Options{})
		if err == nil {
			_ = s.Close()
			t.Fatal("a damaged record was resealed")
		}
		if !strings.Contains(err.Error(), "checksum mismatch") {
			t.Errorf("open: %v, want a checksum mismatch", err)
		}
	})
}

// BenchmarkMigrateSums200k: the first Open of a schema-2 store of 200,000
// flows, which rewrites every record with its checksum (the start after an
// upgrade), the checks included.
func BenchmarkMigrateSums200k(b *testing.B) {
	const n = 200_000
	es := benchEntries(n, 0)
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "v2.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: newPageSize})
		if err != nil {
			b.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			meta, _ := tx.CreateBucket(bucketMeta)
			if err := meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, 2)); err != nil {
				return err
			}
			root, _ := tx.CreateBucket(bucketBridges)
			br, _ := root.CreateBucket([]byte("br-int"))
			kb, _ := br.CreateBucket(kindBuckets[entry.KindFlow])
			for _, at := range newKeyOrder(es).idx {
				if err := kb.Put(es[at].ID, encodeRecordV1("pod", es[at].Payload)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		_ = db.Close()
		b.StartTimer()
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = s.Close()
		b.StartTimer()
	}
}
