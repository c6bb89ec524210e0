package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const module = "github.com/flowstate-io/flowstate/"

func main() {
	from := flag.String("from", "", "regexp of the entry function: the window runs from its first call to the return of -to on that goroutine (required)")
	to := flag.String("to", "", "regexp of the function whose return ends the window (default -from)")
	via := flag.String("via", `^server/restore/write\.`, "regexp of the functions that make a goroutine part of the write")
	leaf := flag.String("leaf", `^(entry|canon|ofctl|api/.*)$`, "regexp of the packages that count as their caller's")
	ctl := flag.String("controller", "", "instead, be a controller on this OpenFlow socket that sends -flow with a barrier once a line arrives on stdin")
	flow := flag.String("flow", "", "the flow the controller sends (ovs-ofctl syntax)")
	flag.Parse()
	if *ctl != "" {
		if err := control(*ctl, *flow, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "follow: controller:", err)
			os.Exit(1)
		}
		return
	}
	if *from == "" {
		fmt.Fprintln(os.Stderr, "follow: -from is required")
		os.Exit(2)
	}
	if *to == "" {
		*to = *from
	}
	c, err := newCounter(*from, *to, *via, *leaf)
	if err == nil {
		err = c.read(os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "follow:", err)
		os.Exit(1)
	}
	c.print(os.Stdout)
}

// event is one line of the trace: a call or a return of fn on goroutine g.
type event struct {
	ret bool
	g   int
	fn  string // without the module's path
}

// A call is "> goroutine(N): NAME(ARGS)", a return ">> goroutine(N): NAME => (...)";
// NAME may hold a receiver, "(*T)".
var line = regexp.MustCompile(`^(>>?) goroutine\((\d+)\): ((?:[\w/.\-\[\],]|\(\*[^()]+\))+)(?:\(| =>)`)

func parse(s string) (event, bool) {
	m := line.FindStringSubmatch(s)
	if m == nil {
		return event{}, false
	}
	g, err := strconv.Atoi(m[2])
	if err != nil {
		return event{}, false
	}
	fn, ok := strings.CutPrefix(m[3], module)
	if !ok {
		return event{}, false
	}
	return event{ret: m[1] == ">>", g: g, fn: fn}, true
}

// pkgOf splits a function's name into its package path and the rest:
// "server/restore/write.(*Writes).Put" is "server/restore/write",
// "(*Writes).Put".
func pkgOf(fn string) (pkg, name string) {
	head := fn
	if i := strings.IndexByte(head, '('); i >= 0 {
		head = head[:i]
	}
	dir := ""
	if i := strings.LastIndexByte(head, '/'); i >= 0 {
		dir, head = head[:i+1], head[i+1:]
	}
	p, _, _ := strings.Cut(head, ".")
	return dir + p, strings.TrimPrefix(fn[len(dir+p):], ".")
}

type frame struct{ pkg, name string }

type stay struct {
	pkg   string
	names []string
}

type counter struct {
	from, to, via, leaf *regexp.Regexp
	entry               int // the entry's goroutine, 0 before its call
	done                bool
	stacks              map[int][]frame
	stays               map[int][]stay
	part                map[int]bool // goroutines that ran a function of via
	order               []int
}

func newCounter(from, to, via, leaf string) (*counter, error) {
	c := &counter{stacks: map[int][]frame{}, stays: map[int][]stay{}, part: map[int]bool{}}
	var err error
	for _, r := range []struct {
		dst **regexp.Regexp
		src string
	}{{&c.from, from}, {&c.to, to}, {&c.via, via}, {&c.leaf, leaf}} {
		if *r.dst, err = regexp.Compile(r.src); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *counter) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() && !c.done {
		if e, ok := parse(sc.Text()); ok {
			c.add(e)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	switch {
	case c.entry == 0:
		return errors.New("the trace holds no call of -from")
	case !c.done:
		return errors.New("the trace ends before -to returned")
	}
	return nil
}

func (c *counter) add(e event) {
	// A deferred call's wrapper runs as its function returns (delve reports
	// that return first): it is part of the function, not a stay after it.
	if strings.Contains(e.fn, ".deferwrap") {
		return
	}
	if c.entry == 0 {
		if e.ret || !c.from.MatchString(e.fn) {
			return
		}
		c.entry = e.g
	}
	pkg, name := pkgOf(e.fn)
	st := c.stacks[e.g]
	if e.ret {
		// Pop to the frame returning; a return whose call came before the
		// window is not on the stack.
		for i := len(st) - 1; i >= 0; i-- {
			if st[i] == (frame{pkg, name}) {
				st = st[:i]
				break
			}
		}
	} else {
		st = append(st, frame{pkg, name})
		if c.via.MatchString(e.fn) && !c.part[e.g] {
			c.part[e.g] = true
			c.order = append(c.order, e.g)
		}
	}
	c.stacks[e.g] = st
	if e.g == c.entry && e.ret && c.to.MatchString(e.fn) {
		c.done = true
	}
	// Where the goroutine is now: its innermost frame not of a leaf package.
	for i := len(st) - 1; i >= 0; i-- {
		if c.leaf.MatchString(st[i].pkg) {
			continue
		}
		ss := c.stays[e.g]
		if n := len(ss); n == 0 || ss[n-1].pkg != st[i].pkg {
			ss = append(ss, stay{pkg: st[i].pkg})
		}
		last := &ss[len(ss)-1]
		if !slices.Contains(last.names, st[i].name) {
			last.names = append(last.names, st[i].name)
		}
		c.stays[e.g] = ss
		break
	}
}

// returns counts the stays of ss in a package left before.
func returns(ss []stay) (n int, back []bool) {
	seen := map[string]bool{}
	back = make([]bool, len(ss))
	for i, s := range ss {
		back[i] = seen[s.pkg]
		if back[i] {
			n++
		}
		seen[s.pkg] = true
	}
	return n, back
}

func (c *counter) print(w io.Writer) {
	var stays, rets int
	for _, g := range c.order {
		ss := c.stays[g]
		n, back := returns(ss)
		fmt.Fprintf(w, "goroutine %d: %d stays, %d returns\n", g, len(ss), n)
		for i, s := range ss {
			mark := "  "
			if back[i] {
				mark = "R "
			}
			fmt.Fprintf(w, "  %2d %s%s: %s\n", i+1, mark, s.pkg, strings.Join(s.names, ", "))
		}
		stays, rets = stays+len(ss), rets+n
	}
	fmt.Fprintf(w, "total: %d goroutines, %d stays, %d returns\n", len(c.order), stays, rets)
}
