package server

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPeerGroups: supplementary groups come from the Groups: line of the
// peer's status; a peer that is gone, or invisible (pid 0), has none known.
func TestPeerGroups(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	status := "Name:\tx\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nGroups:\t4242 100 \nNSpid:\t42\n"
	if err := os.WriteFile(filepath.Join(proc, "42", "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	if gs, err := peerGroups(proc, 42); err != nil || !slices.Equal(gs, []uint32{4242, 100}) {
		t.Fatalf("pid 42: %v, %v", gs, err)
	}
	for _, pid := range []int32{0, 43} {
		if gs, err := peerGroups(proc, pid); err == nil || gs != nil {
			t.Fatalf("pid %d: %v, %v; want an error", pid, gs, err)
		}
	}
	c := peerCred{uid: 65534, gid: 65534, groups: []uint32{4242}}
	if !c.is(Principal{Group: true, ID: 4242}) || !c.is(Principal{Group: true, ID: 65534}) || c.is(Principal{ID: 4242}) {
		t.Fatalf("%v: principal checks wrong", c)
	}
	// The live process: its own groups, as the kernel lists them.
	gs, err := peerGroups("/proc", int32(os.Getpid()))
	want, _ := os.Getgroups()
	if err != nil || len(gs) != len(want) {
		t.Fatalf("own groups %v, %v; want %v", gs, err, want)
	}
}
