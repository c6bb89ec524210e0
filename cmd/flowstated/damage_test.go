package main

import (
	"bytes"
	"context"
	encbinary "encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// boltFile reads the page tree of a bbolt file (format of go.etcd.io/bbolt
// v1.5: page header id u64, flags u16, count u16, overflow u32; leaf
// elements flags, pos, ksize, vsize u32) without bbolt, to find the leaf
// pages a bucket uses.
type boltFile struct {
	b        []byte
	pageSize int
}

func readBoltFile(t *testing.T, path string) boltFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := encbinary.LittleEndian
	return boltFile{b: b, pageSize: int(le.Uint32(b[16+8:]))}
}

// root is the root page of the newer meta page.
func (f boltFile) root() uint64 {
	le := encbinary.LittleEndian
	m0, m1 := f.b[16:], f.b[f.pageSize+16:]
	if le.Uint64(m1[48:]) > le.Uint64(m0[48:]) {
		return le.Uint64(m1[16:])
	}
	return le.Uint64(m0[16:])
}

// usedLeaf is a leaf page and the end of its last value.
type usedLeaf struct {
	page uint64
	end  int
}

// bucket finds the root page of the bucket at path (each name a bucket in
// the one before), 0 if it is inline or missing.
func (f boltFile) bucket(page uint64, path ...string) uint64 {
	if len(path) == 0 {
		return page
	}
	var found uint64
	f.elements(page, func(_ uint64, flags uint32, k, v []byte) {
		if flags&1 != 0 && string(k) == path[0] && len(v) >= 8 {
			found = encbinary.LittleEndian.Uint64(v)
		}
	})
	if found == 0 {
		return 0
	}
	return f.bucket(found, path[1:]...)
}

// elements calls fn for every element of the leaves under page.
func (f boltFile) elements(page uint64, fn func(leaf uint64, flags uint32, k, v []byte)) {
	le := encbinary.LittleEndian
	p := f.b[int(page)*f.pageSize:]
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	for i := range count {
		e := p[16+16*i:]
		if flags == 0x01 { // branch
			f.elements(le.Uint64(e[8:]), fn)
			continue
		}
		pos, ks, vs := int(le.Uint32(e[4:])), int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
		at := 16 + 16*i + pos
		fn(page, le.Uint32(e[0:]), p[at:at+ks], p[at+ks:at+ks+vs])
	}
}

// leaves returns the leaf pages of the tree under page, with their used
// extent.
func (f boltFile) leaves(page uint64) []usedLeaf {
	var out []usedLeaf
	f.elements(page, func(leaf uint64, _ uint32, _, v []byte) {
		end := f.offset(v) - int(leaf)*f.pageSize + len(v)
		if len(out) == 0 || out[len(out)-1].page != leaf {
			out = append(out, usedLeaf{page: leaf})
		}
		out[len(out)-1].end = max(out[len(out)-1].end, end)
	})
	return out
}

// offset is where v, a slice of the file, starts in it.
func (f boltFile) offset(v []byte) int { return cap(f.b) - cap(v) }

// TestBinaryStoreDamage (must-show 7): flowstated's store holds a pipeline,
// the switch holds it too. Ten times, one random byte of the used part of a
// leaf page of br-int's flow bucket is flipped in the stopped store: each
// time flowstated refuses to start (exit 1, naming the damage) and the
// switch keeps exactly what it held. Then, with flowstated running, a
// record's byte is flipped under it and a replay forced: the damaged flow is
// quarantined, named by bucket and key, and nothing of it reaches the switch.
func TestBinaryStoreDamage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "off", "--audit-interval", "0",
		"--rearm-flow-restore-wait=false")
	n.start(ctx)
	const flows = 3000
	es := make([]client.Entry, flows)
	for i := range es {
		es[i] = client.FlowText(fmt.Sprintf("table=1,priority=10,ip,nw_dst=10.1.%d.%d,actions=output:2", i>>8, i&255))
	}
	es = append(es, client.FlowText("table=0,priority=5,actions=resubmit(,1)"))
	if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, es...); err != nil {
		t.Fatal(err)
	}
	n.poll(ctx, "converged", func() bool {
		st, err := n.c.Status(ctx)
		return err == nil && st.Bridges[0].Converged
	})
	want := n.dump(ctx, "br-int")
	if len(want) != flows+1 {
		t.Fatalf("the switch holds %d flows, want %d", len(want), flows+1)
	}
	n.signal(ctx, syscall.SIGTERM)

	db := filepath.Join(n.dir, "state", "fs.db")
	pristine, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	bf := readBoltFile(t, db)
	fb := bf.bucket(bf.root(), "bridges", "br-int", "flow")
	if fb == 0 {
		t.Fatal("br-int's flow bucket not found as a page tree")
	}
	leaves := bf.leaves(fb)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d; %d leaf pages of %d bytes", seed, len(leaves), bf.pageSize)
	for i := range 10 {
		l := leaves[rng.IntN(len(leaves))]
		off := 16 + rng.IntN(l.end-16)
		mask := byte(1 + rng.IntN(255))
		b := slices.Clone(pristine)
		b[int(l.page)*bf.pageSize+off] ^= mask
		if err := os.WriteFile(db, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, binary(t), n.args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("flip %d (page %d byte %d ^%#x): flowstated: %v, want exit 1\n%s", i, l.page, off, mask, err, out)
		}
		msg := strings.TrimSpace(string(out))
		if !strings.Contains(msg, "is corrupt") || !strings.Contains(msg, "flowstated will not start on it") {
			t.Fatalf("flip %d: flowstated said:\n%s", i, msg)
		}
		detail, _, _ := strings.Cut(msg[strings.Index(msg, "is corrupt"):], "; flowstated will not")
		t.Logf("flip %d: page %d byte %d ^%#x: %s", i, l.page, off, mask, detail)
		if got := n.dump(ctx, "br-int"); !slices.Equal(got, want) {
			t.Fatalf("flip %d: the switch changed:\n%s", i, strings.Join(got, "\n"))
		}
	}

	// Damage under a running flowstated.
	if err := os.WriteFile(db, pristine, 0o600); err != nil {
		t.Fatal(err)
	}
	n.start(ctx)
	n.poll(ctx, "converged", func() bool {
		st, err := n.c.Status(ctx)
		return err == nil && st.Bridges[0].Converged
	})
	// A record's payload byte: the record is version | len | module | payload | sum.
	var victim []byte
	var at int
	bf = readBoltFile(t, db)
	bf.elements(bf.bucket(bf.root(), "bridges", "br-int", "flow"), func(leaf uint64, _ uint32, k, v []byte) {
		if victim == nil && bytes.HasPrefix(v, []byte("\x02\x08pipeline")) && k[0] == 1 {
			victim = slices.Clone(k)
			at = bf.offset(v) + 10 + 40 // well inside the FLOW_MOD
		}
	})
	if victim == nil {
		t.Fatal("no record of module pipeline found")
	}
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	if _, err := f.ReadAt(one[:], int64(at)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{one[0] ^ 0x04}, int64(at)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, err := n.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	var st *client.Status
	n.poll(ctx, "the damaged flow quarantined", func() bool {
		st, err = n.c.Status(ctx)
		return err == nil && st.QuarantinedTotal == 1
	})
	q := st.Quarantined[0]
	if !strings.Contains(q.Error, "checksum mismatch") || !strings.Contains(q.Error, fmt.Sprintf("bridges/br-int/flow key %x", victim)) {
		t.Fatalf("quarantined: %+v, want the bucket and key named with a checksum mismatch", q)
	}
	t.Logf("quarantined: %s", q.Error)
	got := n.dump(ctx, "br-int")
	if len(got) != len(want)-1 {
		t.Fatalf("the switch holds %d flows, want %d (all but the damaged one)", len(got), len(want)-1)
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Fatalf("the switch holds a flow that was never declared: %s", g)
		}
	}
}
