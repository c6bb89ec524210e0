package clienttest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsumerModule is a controller author's first step: a fresh module
// outside the repository imports only the client, with no replace but the
// ones pointing at this checkout's nested modules, and `go mod tidy` and
// `go build` succeed. Its module graph holds grpc, protobuf and our API, none
// of the daemon's dependencies (whose vanity paths some proxies do not
// serve: antrea.io/libOpenflow fails with 403 where a dependency's replace
// is ignored). It needs the Go module proxy (GOPROXY) or a module cache that
// holds grpc's graph.
func TestConsumerModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/cni\n\ngo 1.26.0\n\n"
	for _, m := range []string{"api", "client", "entry", "errdefs"} {
		gomod += "replace github.com/flowstate-io/flowstate/" + m + " => " + filepath.Join(root, m) + "\n"
	}
	main := `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

func main() {
	c, err := client.New(client.DefaultTarget)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m := client.Module{Bridge: "br-int", Name: "cni"}
	res, err := c.Sync(ctx, m, true, client.FlowText("table=0,priority=1,actions=drop"))
	fmt.Println(res, err)
}
`
	for name, body := range map[string]string{"go.mod": gomod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		// The environment's GOPROXY and GOMODCACHE, but no workspace and
		// no vendor directory: what a controller's own checkout sees.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", filepath.Join(dir, "cni"), ".")
	graph := run("list", "-m", "all")
	for _, bad := range []string{"go.etcd.io/bbolt", "libovsdb", "libOpenflow", "prometheus", "spf13/cobra", "github.com/flowstate-io/flowstate "} {
		if strings.Contains(graph, bad) {
			t.Errorf("the consumer's module graph holds %s:\n%s", bad, graph)
		}
	}
	for _, want := range []string{"google.golang.org/grpc ", "google.golang.org/protobuf ", "github.com/flowstate-io/flowstate/client "} {
		if !strings.Contains(graph, want) {
			t.Errorf("the consumer's module graph lacks %s:\n%s", want, graph)
		}
	}
	t.Logf("%d modules in the consumer's graph", strings.Count(graph, "\n"))
}
