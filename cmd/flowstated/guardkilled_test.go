package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGuardKilledDisarmsBeforeSpawn: the guard an earlier flowstated
// spawned (adopted) is killed. flowstated disarms the flag before it spawns
// the next guard, not after: the fork and exec of the new guard take their
// time on a loaded node, and a flowstated killed meanwhile left the flag
// armed with no guard, so the next vswitchd start stayed dark until
// flowstated came back (found by the chaos harness with the relay on,
// adopted-guard-killed-first, [hold]: the exit noticed, then nothing).
func TestGuardKilledDisarmsBeforeSpawn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "spawn", "--guard-grace", proofGrace.String())
	n.start(ctx)
	n.syncPipeline(ctx)
	first := n.provenAndArmed(ctx)
	n.killAtEnd(first)
	n.signal(ctx, syscall.SIGKILL)
	n.start(ctx)
	if pid := n.provenAndArmed(ctx); pid != first {
		t.Fatalf("the restarted flowstated trusts guard %d, want the adopted %d", pid, first)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var logs string
	n.poll(ctx, "a new guard spawned", func() bool {
		logs = n.logs.String()
		return strings.Contains(logs, "guard spawned")
	})
	exited := strings.Index(logs, "the guard an earlier flowstated spawned exited")
	unproven := strings.Index(logs, "guard not proven")
	spawned := strings.Index(logs, "guard spawned")
	if exited < 0 || unproven < exited || spawned < unproven {
		t.Fatalf("after the adopted guard died, want its exit noticed, the guard unproven (the flag disarmed), then a guard spawned; log:\n%s", logs)
	}
	st := n.provenAndArmed(ctx)
	n.killAtEnd(st)
	n.forwardsAfterPlainRestart(ctx)
}
