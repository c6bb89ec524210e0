package main

import (
	"context"
	"testing"
	"time"
)

// TestDemo runs the demo of the README's first command end to end.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}
