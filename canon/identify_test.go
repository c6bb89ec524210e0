package canon

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// sameIdentify fails unless entry.IdentifyOwned and entry.CheckFlow agree
// with entry.Identify on b: same payload, identity and error.
func sameIdentify(t *testing.T, what string, b []byte) {
	t.Helper()
	wp, wid, werr := entry.Identify(entry.KindFlow, b)
	if cerr := entry.CheckFlow(b); fmt.Sprint(cerr) != fmt.Sprint(werr) {
		t.Errorf("%s: CheckFlow says %v, Identify %v", what, cerr, werr)
	}
	gp, gid, gerr := entry.IdentifyOwned(entry.KindFlow, bytes.Clone(b))
	if fmt.Sprint(gerr) != fmt.Sprint(werr) || !bytes.Equal(gp, wp) || !bytes.Equal(gid, wid) || (gp == nil) != (wp == nil) {
		t.Errorf("%s: IdentifyOwned gives\n%x %x %v\nIdentify\n%x %x %v", what, gp, gid, gerr, wp, wid, werr)
	}
	if gerr == nil && cap(gp) != len(gp) {
		t.Errorf("%s: payload has room to append into", what)
	}
}

// TestIdentifyOwnFlow: entry.IdentifyOwned, which Parse and Decode use
// instead of entry.Identify for the flows they build, and entry.CheckFlow,
// with which Decode spares a copy of what it is sent, give Identify's payload,
// identity and errors for every corpus flow, and for each with its header,
// command or match length changed, its xid set or its bytes cut short.
func TestIdentifyOwnFlow(t *testing.T) {
	var flows []string
	for _, f := range []string{filepath.Join("..", "ofctl", "testdata", "flows.txt"), filepath.Join("..", "ofctl", "testdata", "classes.txt"),
		filepath.Join("..", "server", "testdata", "antrea-v1.15", "flows.txt")} {
		flows = append(flows, corpusLines(t, f)...)
	}
	flows = append(flows, pipelineFlows(200)...)
	flows = append(flows, cniFlows(200)...)
	n := 0
	for _, l := range flows {
		b, err := ofctl.ParseFlowBinary(l)
		if err != nil {
			continue
		}
		n++
		if cap(b) != len(b) {
			t.Errorf("%s: ParseFlowBinary allocated %d bytes for %d", l, cap(b), len(b))
		}
		sameIdentify(t, l, b)
		for _, at := range []int{0, 1, 2, 3, 4, 7, 25, flowModFixed + 2, flowModFixed + 3} {
			for _, v := range []byte{0, 1, 6, 14, 0xff} {
				c := bytes.Clone(b)
				c[at] = v
				sameIdentify(t, fmt.Sprintf("%s with byte %d = %d", l, at, v), c)
			}
		}
		for _, cut := range []int{0, 7, 8, flowModFixed, flowModFixed + 3, flowModFixed + 4, len(b) - 8, len(b) - 1} {
			if cut >= 0 && cut < len(b) {
				c := bytes.Clone(b[:cut])
				if len(c) >= 4 {
					be.PutUint16(c[2:], uint16(len(c)))
				}
				sameIdentify(t, fmt.Sprintf("%s cut to %d bytes", l, cut), c)
			}
		}
		big := append(bytes.Clone(b), make([]byte, MaxMessage)...)
		be.PutUint16(big[2:], uint16(len(big)))
		sameIdentify(t, l+" made too long", big)
	}
	if n < 100 {
		t.Fatalf("only %d flows parsed", n)
	}
}
