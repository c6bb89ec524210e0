package main

import (
	"context"
	"testing"
	"time"
)

// TestDemo runs the demo of the README's first command end to end and checks
// its story: SYNs to the denied address leak through NORMAL during a plain
// restart, none leak with flowstate, and the pipeline came back in one
// bundle.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res, err := run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.SentPlain == 0 || res.LeakedPlain == 0 {
		t.Errorf("without flowstate: %d of %d SYNs leaked, want some", res.LeakedPlain, res.SentPlain)
	}
	if res.SentFlowstate == 0 || res.LeakedFlowstate != 0 {
		t.Errorf("with flowstate: %d of %d SYNs leaked, want none of some", res.LeakedFlowstate, res.SentFlowstate)
	}
	if r := res.Replay; r.FinishedAt.IsZero() || r.Error != "" || r.Entries != len(pipeline) || r.Messages == 0 {
		t.Errorf("replay after the restart: %+v", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the demo took %v; make demo must stay under 30 s", d)
	}
}
