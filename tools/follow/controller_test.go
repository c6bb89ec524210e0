package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestController: the controller is past its HELLO before it is told to go,
// then its flow is on the switch when it says done; a flow vswitchd refuses
// is its error.
func TestController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	defer s.Close()
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	goR, goW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- control(s.MgmtPath("br0"), "table=3,priority=7,ip,nw_dst=10.9.0.1,actions=drop", goR, outW)
		outW.Close()
	}()
	buf := make([]byte, 64)
	n, err := outR.Read(buf)
	if err != nil || string(buf[:n]) != "ready\n" {
		t.Fatalf("the controller said %q, %v; want ready", buf[:n], err)
	}
	if out, _ := s.Ofctl(ctx, "dump-flows", "br0", "table=3"); strings.Contains(out, "10.9.0.1") {
		t.Fatalf("the flow is on the switch before the go:\n%s", out)
	}
	go func() { _, _ = io.WriteString(goW, "go\n") }()
	rest, _ := io.ReadAll(outR)
	if err := <-done; err != nil || string(rest) != "done\n" {
		t.Fatalf("the controller: %v, said %q", err, rest)
	}
	if out, err := s.Ofctl(ctx, "dump-flows", "br0", "table=3"); err != nil || !strings.Contains(out, "nw_dst=10.9.0.1") {
		t.Fatalf("the flow is not on the switch after done (%v):\n%s", err, out)
	}

	// A group that does not exist: vswitchd refuses the FLOW_MOD.
	err = control(s.MgmtPath("br0"), "table=3,priority=8,ip,actions=group:77", strings.NewReader("go\n"), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "error") {
		t.Fatalf("a refused flow: %v, want the switch's error", err)
	}
}
