package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server"
)

// mountTmpfs mounts a tmpfs of size on a new directory, unmounted in
// cleanup. It needs root; without it the test fails, saying so.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fsfull")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		_ = os.Remove(dir)
		t.Fatalf("this test needs root to mount a tmpfs (a small file system to fill up): mount: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			return
		}
		_ = os.Remove(dir)
	})
	return dir
}

// fill writes a file in dir until its file system is full.
func fill(t *testing.T, dir string) (remove func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return func() { _ = os.Remove(path) }
		}
	}
}

// TestDiskFull: with the store's file system full, a write answers
// RESOURCE_EXHAUSTED naming the disk and the file, nothing of it stays on
// the switch (Diff is empty), and the daemon goes on serving; once there is
// room the same write succeeds.
func TestDiskFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mnt := mountTmpfs(t, "2m")
	e := newEnv(ctx, t, func(c *server.Config) {
		c.DBPath, c.StageAbove, c.MetricsListen = filepath.Join(mnt, "flowstate.db"), 100, "127.0.0.1:0"
	})
	e.Start(ctx)
	e.WaitConverged(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	room := fill(t, mnt)
	var flows []client.Entry
	for i := range 500 {
		flows = append(flows, client.FlowText(fmt.Sprintf("table=5,priority=%d,ip,nw_dst=10.1.%d.%d,actions=drop", 100+i, i/250, i%250)))
	}
	_, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, flows...)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "the disk is full") ||
		!strings.Contains(err.Error(), e.Config.DBPath) || strings.Count(err.Error(), "resource exhausted") != 1 {
		t.Fatalf("put on a full disk: %v, want RESOURCE_EXHAUSTED saying the disk is full, naming %s", err, e.Config.DBPath)
	}
	// The bundle went to the switch before the commit failed: the bridge
	// replays the store, which takes it back.
	poll(ctx, t, "switch back to the store", func() (bool, error) {
		changes, err := e.c.Diff(ctx, "br-int")
		return err == nil && len(changes) == 0 && e.bridgeStatus(ctx, "br-int").Converged, nil
	})
	e.assertExact(ctx, pipeline)
	if es, err := e.c.List(ctx, client.Filter{Module: "pod"}); err != nil || len(es) != 0 {
		t.Fatalf("after the failed write the store holds %d pod entries (%v)", len(es), err)
	}

	// A large streamed write is spooled to disk first (StageAbove, 100
	// here): the spool cannot be written either, and says so.
	_, err = e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, false, flows...)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "the disk is full") || !strings.Contains(err.Error(), "spool") {
		t.Fatalf("staged sync on a full disk: %v, want RESOURCE_EXHAUSTED saying the disk is full for the spool", err)
	}
	e.assertExact(ctx, pipeline)
	e.wantNoDiff(ctx, "after the failed staged sync")

	room()
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, flows...); err != nil || !applied {
		t.Fatalf("put with room again: applied=%v err=%v", applied, err)
	}
	e.wantNoDiff(ctx, "after the put with room")
	res, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, false, flows[:250]...)
	if err != nil || !res.Applied || res.Removed != 250 {
		t.Fatalf("staged sync with room again: %+v, %v", res, err)
	}
	if n := e.metric(ctx, "flowstate_staged_writes_total"); n != 1 {
		t.Fatalf("flowstate_staged_writes_total %d, want 1: the sync with room was not staged", n)
	}
	e.wantNoDiff(ctx, "after the staged sync with room")
}

// TestDiskFullProxy: with the store's file system full, a controller behind
// the OpenFlow proxy maps a Geneve option and installs a flow. A change
// either fails, and then neither the switch nor the store holds it (the
// controller's connection is dropped: the change is not recorded), or it
// still fits in pages the store's file already holds (bbolt reuses freed
// pages without growing the file), and then both do. Never does the switch
// hold what the store lacks: a TLV mapping is stored before it is sent,
// and a flow goes to the switch only with its store transaction. Once
// there is room the changes go through, and a vswitchd restart brings them
// back from the store.
func TestDiskFullProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	mnt := mountTmpfs(t, "2m")
	e, proxy := proxyEnv(ctx, t, func(c *server.Config) { c.DBPath = filepath.Join(mnt, "flowstate.db") })
	e.Start(ctx)
	e.WaitConverged(ctx)
	const mapping, flow = "{class=0xffff,type=0,len=4}->tun_metadata0", "table=0,priority=30,tun_metadata0=0x5,actions=drop"
	onSwitch := func() (tlv []string, flows int) {
		t.Helper()
		got, err := e.sb.DumpFlows(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range got {
			if strings.Contains(l, "tun_metadata0") {
				flows++
			}
		}
		return tlvLines(e.ofctl(ctx, "dump-tlv-map", "br-int")), flows
	}

	outcome := func(err error) string {
		if err != nil {
			return "refused (" + err.Error() + ")"
		}
		return "stored"
	}

	room := fill(t, mnt)
	_, tlvErr := e.sb.Ofctl(ctx, "add-tlv-map", proxy, mapping)
	if tlv, _ := onSwitch(); (tlvErr == nil) != (len(tlv) == 1) {
		t.Fatalf("a TLV mapping through the proxy on a full disk: %s, and the switch maps %q", outcome(tlvErr), tlv)
	}
	_, flowErr := e.sb.Ofctl(ctx, "add-flow", proxy, "table=0,priority=20,ip,actions=drop")
	e.wantNoDiff(ctx, "after the proxied changes on a full disk")
	if es, err := e.c.List(ctx, client.Filter{Module: "tunnel"}); err != nil || (flowErr == nil) != (len(es) == 1) {
		t.Fatalf("a flow through the proxy on a full disk: %s, and the store holds %d entries of the proxied module (%v)", outcome(flowErr), len(es), err)
	}
	t.Logf("on the full disk, the mapping: %s; the flow: %s", outcome(tlvErr), outcome(flowErr))

	room()
	// What the store kept of the mapping: a restart restores exactly that.
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.waitRestored(ctx)
	if tlv, _ := onSwitch(); (tlvErr == nil) != (len(tlv) == 1) {
		t.Fatalf("after a vswitchd restart the switch maps %q, though the mapping was %s on the full disk", tlv, outcome(tlvErr))
	}
	if tlvErr != nil {
		e.ofctl(ctx, "add-tlv-map", proxy, mapping)
	}
	e.ofctl(ctx, "add-flow", proxy, flow)
	if tlv, n := onSwitch(); len(tlv) != 1 || n != 1 {
		t.Fatalf("with room again the switch maps %q and holds %d flows using it, want the mapping and the flow", tlv, n)
	}
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.waitRestored(ctx)
	if tlv, n := onSwitch(); len(tlv) != 1 || n != 1 {
		t.Fatalf("after a vswitchd restart the switch maps %q and holds %d flows using it: the store did not keep them", tlv, n)
	}
}
