package server_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestFailedStartLeavesNoStore: a start that fails after the store was
// opened (here: a listen address it cannot serve) removes the store file
// and the directories it created, and leaves an existing store alone.
func TestFailedStartLeavesNoStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	cfg := e.Config
	newDir := filepath.Join(e.Sandbox.Dir(), "new")
	cfg.DBPath = filepath.Join(newDir, "sub", "fs.db")
	cfg.Listen = "unix://relative/fs.sock"
	cfg.Guard = server.GuardConfig{Mode: server.GuardOff}
	if _, err := server.Start(ctx, cfg); err == nil {
		t.Fatal("started with a relative listen path")
	} else {
		t.Logf("failed start: %v", err)
	}
	if _, err := os.Stat(newDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed start left %s (%v)", newDir, err)
	}

	// An existing store survives a failed start.
	cfg.DBPath = e.Config.DBPath
	ok := cfg
	ok.Listen = e.Config.Listen
	d, err := server.Start(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Start(ctx, cfg); err == nil {
		t.Fatal("started with a relative listen path")
	}
	if _, err := os.Stat(cfg.DBPath); err != nil {
		t.Fatalf("a failed start removed the existing store: %v", err)
	}
}
