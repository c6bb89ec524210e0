package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// readBundle returns the files of a support bundle by their name under its
// top directory.
func readBundle(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	top := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		dir, name, _ := strings.Cut(h.Name, "/")
		if top == "" {
			top = dir
		}
		if dir != top || !strings.HasPrefix(dir, "flowstate-support-") || h.Mode != 0o600 {
			t.Errorf("archive member %s (mode %o): want flowstate-support-*/NAME, mode 600, one top directory", h.Name, h.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
}

// TestSupportBundle runs support-bundle against a running flowstated on a
// private OVS, then against none: the archive holds each part, and says
// which could not be collected.
func TestSupportBundle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" }))
	e.Start(ctx)
	srv := e.Config.Listen
	if out, err := run(ctx, t, srv, "table=0,priority=10,ip,actions=drop\n", "add-flows", "--module", "secretive-module", "-"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := run(ctx, t, srv, "", "wait"); err != nil {
		t.Fatal(err, out)
	}
	// Something only the environment holds: no part may carry it.
	t.Setenv("FLOWSTATE_TEST_SECRET", "hunter2-not-in-any-bundle")

	dir := t.TempDir()
	path := filepath.Join(dir, "b.tar.gz")
	out, err := run(ctx, t, srv, "", "support-bundle", "--metrics-url", "http://"+e.Daemon.MetricsAddr()+"/metrics",
		"--db", e.Config.DBPath, "--unit", "flowstated", "--events-wait", "5s", path)
	if err != nil {
		t.Fatalf("support-bundle: %v\n%s", err, out)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("%s.tmp left behind", path)
	}
	files := readBundle(t, path)
	var st struct {
		Bridges []struct{ Name string }
		Modules []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(files["status.json"]), &st); err != nil || len(st.Bridges) != 1 || st.Bridges[0].Name != "br-int" {
		t.Errorf("status.json: %v %+v\n%s", err, st, files["status.json"])
	}
	for name, want := range map[string]string{
		"status.txt":  "br-int",
		"metrics.txt": "flowstate_build_info",
		"store.txt":   e.Config.DBPath + ": ",
		"version.txt": "flowctl",
		"README.txt":  "status.json (",
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("%s lacks %q:\n%s", name, want, files[name])
		}
	}
	// The events of this run: the replay of the declared flow at least,
	// in revision order.
	var last uint64
	types := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(files["events.jsonl"]), "\n") {
		var ev struct {
			Revision string
			Type     string
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events.jsonl line %q: %v", line, err)
		}
		var rev uint64
		if n, err := fmt.Sscan(ev.Revision, &rev); n != 1 || err != nil || rev <= last {
			t.Errorf("events.jsonl: revision %q after %d", ev.Revision, last)
		}
		last = rev
		types[ev.Type] = true
	}
	if !types["replay_finished"] || types["heartbeat"] {
		t.Errorf("events.jsonl holds types %v, want replay_finished and no heartbeat:\n%s", types, files["events.jsonl"])
	}
	for name, content := range files {
		if strings.Contains(content, "hunter2-not-in-any-bundle") {
			t.Errorf("%s carries the environment", name)
		}
		if strings.Contains(content, "table=0,priority=10,ip") || strings.Contains(content, "priority=10,ip actions=drop") {
			t.Errorf("%s carries a declared flow", name)
		}
	}
	t.Logf("bundle of %d files: %v", len(files), strings.Fields(files["README.txt"]))

	// flowstated gone: the bundle is still written, saying what is missing.
	e.Stop()
	path2 := filepath.Join(dir, "down.tar.gz")
	out, err = run(ctx, t, srv, "", "support-bundle", "--metrics-url", "http://127.0.0.1:1/metrics", "--db", e.Config.DBPath, "--unit", "flowstated", path2)
	if err != nil {
		t.Fatalf("support-bundle with flowstated down: %v\n%s", err, out)
	}
	files = readBundle(t, path2)
	if _, ok := files["status.json"]; ok {
		t.Error("status.json with flowstated down")
	}
	for _, want := range []string{"not collected:", "status: ", "events: ", "metrics: "} {
		if !strings.Contains(files["README.txt"], want) {
			t.Errorf("README.txt with flowstated down lacks %q:\n%s", want, files["README.txt"])
		}
	}
	if !strings.Contains(files["store.txt"], e.Config.DBPath) {
		t.Errorf("store.txt with flowstated down:\n%s", files["store.txt"])
	}
}
