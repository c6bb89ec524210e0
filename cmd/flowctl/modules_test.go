package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestReadyUnknownModule: ready of a name flowstated does not know (a typo)
// is refused with the closest known name and leaves no record; a module that
// declares nothing any more is removed by forget-module, which refuses a
// required module and one that declares entries.
func TestReadyUnknownModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) { c.RequiredModules = []string{"policy"} }))
	e.Start(ctx)
	srv := e.Config.Listen
	fc := func(want int, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, code := flowctl(ctx, "", append([]string{"--server", srv}, args...)...)
		if code != want {
			t.Fatalf("flowctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, stdout, stderr)
		}
		return stdout, stderr
	}
	modules := func() string {
		t.Helper()
		st, err := e.Client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range st.Modules {
			names = append(names, m.Name)
		}
		return strings.Join(names, " ")
	}
	fc(0, "add-flow", "--module", "pipeline", "table=0,priority=100,ip,actions=drop")
	fc(0, "add-flow", "--module", "pipeline", "table=0,priority=90,arp,actions=normal")

	for typo, want := range map[string]string{"pipline": `did you mean "pipeline"?`, "polcy": `did you mean "policy"?`} {
		_, stderr := fc(1, "ready", "--module", typo)
		if !strings.Contains(stderr, want) || !strings.Contains(stderr, "unknown") {
			t.Errorf("ready --module %s: %s", typo, stderr)
		}
	}
	if _, stderr := fc(1, "ready", "--module", "zzz"); strings.Contains(stderr, "did you mean") {
		t.Errorf("ready of a name close to nothing suggests one: %s", stderr)
	}
	if got := modules(); got != "pipeline policy" {
		t.Fatalf("modules after refused readies: %q, want pipeline policy", got)
	}
	fc(0, "ready", "--module", "policy") // required, declares nothing: fine
	fc(0, "ready", "--module", "pipeline")

	// A module that declared entries, was ready, then deleted them all.
	fc(0, "add-flow", "--module", "old", "table=0,priority=80,ip,actions=drop")
	fc(0, "ready", "--module", "old")
	fc(0, "del-flows", "--module", "old")
	if got := modules(); got != "pipeline old policy" {
		t.Fatalf("modules: %q", got)
	}
	if _, stderr := fc(1, "forget-module", "--module", "pipeline"); !strings.Contains(stderr, "declares 2 entries (on br-int): delete them first") {
		t.Errorf("forget-module of a declaring module: %s", stderr)
	}
	if _, stderr := fc(1, "forget-module", "--module", "policy"); !strings.Contains(stderr, "required") {
		t.Errorf("forget-module of a required module: %s", stderr)
	}
	if stdout, _ := fc(0, "forget-module", "--module", "old"); !strings.Contains(stdout, "module old forgotten") {
		t.Errorf("forget-module: %s", stdout)
	}
	if got := modules(); got != "pipeline policy" {
		t.Fatalf("modules after forget-module old: %q", got)
	}
	if _, stderr := fc(1, "forget-module", "--module", "pipelin"); !strings.Contains(stderr, `did you mean "pipeline"?`) {
		t.Errorf("forget-module of an unknown module: %s", stderr)
	}
}
