package ofconn

import (
	"bytes"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

// outputGroup is a select group of n buckets that output to port 1, each
// bucket padded with a note so that a group of 2,000 passes 64 KiB, in its
// canonical payload (entry.Group.Encode: ADD plus INSERT_BUCKETs).
func outputGroup(t testing.TB, id uint32, n int) []byte {
	t.Helper()
	g := &entry.Group{Type: 1, ID: id}
	for i := range n {
		b := []byte{0, 0, 0, 32, 0, 0, 0, 0, // len, actions len, bucket id
			0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, // output:1
			0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20, 0, 8, 'n', 'o', 't', 'e', 0, 0, // note
			0, 0, 0, 8, 0, 1, 0, 0} // weight 1
		b[1] = byte(len(b))
		be.PutUint32(b[4:], uint32(i))
		g.Buckets = append(g.Buckets, b)
	}
	p, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDumpLargeGroups: a group of 2,000 buckets installed as ADD plus
// INSERT_BUCKET messages in one bundle, between small groups, is dumped
// whole and equal to what was sent, and vswitchd survives the dump (OVS 3.1
// aborts when a description over 64 KiB is followed by another in one
// reply, so DumpGroups asks for each group alone).
func TestDumpLargeGroups(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	want := map[uint32][]byte{}
	var msgs []Message
	for id := uint32(1); id <= 5; id++ {
		n := 2
		if id == 3 {
			n = 2000
		}
		want[id] = outputGroup(t, id, n)
		for _, m := range entry.GroupMessages(want[id]) {
			msgs = append(msgs, m)
		}
	}
	if n := len(entry.GroupMessages(want[3])); n < 2 {
		t.Fatalf("the large group is %d message: the test proves nothing", n)
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		start := time.Now()
		groups, err := c.DumpGroups(ctx)
		if err != nil {
			t.Fatalf("dump %d: %v", round, err)
		}
		t.Logf("dump %d: %d groups in %v", round, len(groups), time.Since(start))
		if len(groups) != len(want) {
			t.Fatalf("dump %d: %d groups, want %d", round, len(groups), len(want))
		}
		for _, g := range groups {
			got, err := g.GroupMod()
			if err != nil || !bytes.Equal(got, want[g.ID()]) {
				t.Fatalf("group %d: %d bytes (%v), want %d", g.ID(), len(got), err, len(want[g.ID()]))
			}
		}
	}
}

// BenchmarkDumpGroups1k: DumpGroups of 1,000 groups of 4 buckets, one
// GROUP_DESC request each.
func BenchmarkDumpGroups1k(b *testing.B) {
	ctx, s := startOVS(b)
	c := dial(ctx, b, s, Options{Logger: discardLogger()})
	var msgs []Message
	for id := uint32(1); id <= 1000; id++ {
		msgs = append(msgs, outputGroup(b, id, 4))
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if gs, err := c.DumpGroups(ctx); err != nil || len(gs) != 1000 {
			b.Fatalf("%d groups, %v", len(gs), err)
		}
	}
}
