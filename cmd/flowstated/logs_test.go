package main

import (
	"context"
	"testing"
	"time"
)

func TestBinaryLogsProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--log-format", "json")
	n.start(ctx)
	n.syncPipeline(ctx)
	n.armedWithGuard(ctx)
	t.Logf("START LOG:\n%s", n.logs.String())
	mark := len(n.logs.String())
	n.restartVswitchdPlainly(ctx)
	n.armedWithGuard(ctx)
	time.Sleep(2 * time.Second)
	t.Logf("RESTART LOG:\n%s", n.logs.String()[mark:])
}
