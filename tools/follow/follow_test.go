package main

import (
	"strings"
	"testing"
)

const m = "github.com/flowstate-io/flowstate/"

// A write on two goroutines, with a background goroutine (9) that runs no
// function of the write path, calls before the window, a leaf package and a
// deferred call's wrapper.
var trace = strings.Join([]string{
	"> goroutine(1): " + m + "server/restore/write.(*Writes).Put(1)", // before the window
	">> goroutine(1): " + m + "server/restore/write.(*Writes).Put => ()",
	"> goroutine(5): " + m + "server.(*service).Put((\"*x\")(0x1))",
	"> goroutine(5): " + m + "entry.FlowCookie([]uint8 len: 8)", // a leaf: still server
	">> goroutine(5): " + m + "entry.FlowCookie => (0)",
	"> goroutine(5): " + m + "server/restore/write.(*Writes).Put(1)",
	"> goroutine(9): " + m + "server/restore/flag.(*Flag).sync(1)",
	"> goroutine(6): " + m + "server/restore/write.(*writeQueue).take(1)",
	"> goroutine(6): " + m + "server/restore/bridge.(*State).Take(1)",
	">> goroutine(6): " + m + "server/restore/bridge.(*State).Take => (1)",
	"> goroutine(6): " + m + "server/restore/bridge.(*State).Take.deferwrap1()", // not a stay
	">> goroutine(6): " + m + "server/restore/bridge.(*State).Take.deferwrap1 => ()",
	"> goroutine(6): " + m + "store.(*Store).Update(1)",
	"> goroutine(6): " + m + "server/restore/write.(*txn).run.func1()", // called back by the store
	">> goroutine(6): " + m + "server/restore/write.(*txn).run.func1 => ()",
	">> goroutine(6): " + m + "store.(*Store).Update => ()",
	">> goroutine(6): " + m + "server/restore/write.(*writeQueue).take => ()",
	">> goroutine(9): " + m + "server/restore/flag.(*Flag).sync => ()",
	">> goroutine(5): " + m + "server/restore/write.(*Writes).Put => (true)",
	">> goroutine(5): " + m + "server.(*service).Put => ()",
	"> goroutine(5): " + m + "server.(*service).Put((\"*x\")(0x1))", // after the window
}, "\n")

func TestCount(t *testing.T) {
	c, err := newCounter(`^server\.\(\*service\)\.Put$`, `^server\.\(\*service\)\.Put$`, `^server/restore/write\.`, `^(entry|canon)$`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.read(strings.NewReader(trace)); err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		5: "server server/restore/write server",
		6: "server/restore/write server/restore/bridge server/restore/write store server/restore/write store server/restore/write",
	}
	if len(c.order) != 2 || c.order[0] != 5 || c.order[1] != 6 {
		t.Fatalf("goroutines of the write %v, want [5 6] (9 runs none of -via)", c.order)
	}
	for g, w := range want {
		var got []string
		for _, s := range c.stays[g] {
			got = append(got, s.pkg)
		}
		if strings.Join(got, " ") != w {
			t.Errorf("goroutine %d: stays %q, want %q", g, strings.Join(got, " "), w)
		}
	}
	if n, _ := returns(c.stays[5]); n != 1 {
		t.Errorf("goroutine 5: %d returns, want 1", n)
	}
	if n, _ := returns(c.stays[6]); n != 4 {
		t.Errorf("goroutine 6: %d returns, want 4", n)
	}
	var out strings.Builder
	c.print(&out)
	if !strings.Contains(out.String(), "total: 2 goroutines, 10 stays, 5 returns") {
		t.Errorf("print:\n%s", out.String())
	}
}

func TestCountIncomplete(t *testing.T) {
	for name, tr := range map[string]string{
		"no call of -from":   "> goroutine(5): " + m + "store.(*Store).Update(1)",
		"no return of -to":   "> goroutine(5): " + m + "server.(*service).Put(1)",
		"not a trace at all": "garbage\n\n",
	} {
		c, err := newCounter(`^server\.\(\*service\)\.Put$`, `^server\.\(\*service\)\.Put$`, `^server/restore/write\.`, `^entry$`)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.read(strings.NewReader(tr)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPkgOf(t *testing.T) {
	for fn, want := range map[string][2]string{
		"server/restore/write.(*Writes).Put":    {"server/restore/write", "(*Writes).Put"},
		"server.(*service).Put":                 {"server", "(*service).Put"},
		"store.Entries.PlanPut.func1":           {"store", "Entries.PlanPut.func1"},
		"server/ofconn.(*Conn).BundleStream-fm": {"server/ofconn", "(*Conn).BundleStream-fm"},
		"api/flowstate/v1.(*Entry).GetKind":     {"api/flowstate/v1", "(*Entry).GetKind"},
	} {
		if p, n := pkgOf(fn); p != want[0] || n != want[1] {
			t.Errorf("pkgOf(%q) = %q, %q; want %q, %q", fn, p, n, want[0], want[1])
		}
	}
}
