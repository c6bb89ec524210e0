package ofctl

import (
	"bytes"
	"regexp"
	"testing"
)

// enqueueText is FormatFlow's enqueue:P:Q.
var enqueueText = regexp.MustCompile(`enqueue:([A-Z_]+|[0-9]+):([0-9]+)`)

// asOVSPrints rewrites FormatFlow's enqueue:P:Q as ovs-ofctl prints the
// same three actions, set_queue:Q,output:P,pop_queue (a reserved port by
// its name alone): the one place where FormatFlow's text is not
// ovs-ofctl's, because ovs-ofctl's reads back with max_len 0 (queue.go).
func asOVSPrints(s string) string {
	return enqueueText.ReplaceAllStringFunc(s, func(m string) string {
		sm := enqueueText.FindStringSubmatch(m)
		out := sm[1]
		if out[0] >= '0' && out[0] <= '9' {
			out = "output:" + out
		}
		return "set_queue:" + sm[2] + "," + out + ",pop_queue"
	})
}

func TestEnqueue(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"actions=enqueue:1:2", "actions=enqueue:1:2"},
		{"actions=enqueue(LOCAL,0x10)", "actions=enqueue:LOCAL:16"},
		{"actions=enqueue:in_port:4294967295", "actions=enqueue:IN_PORT:4294967295"},
		{"actions=enqueue:3q7", "actions=enqueue:3:7"},
		// Written as ovs-ofctl prints it, the output has max_len 0: not
		// an enqueue, printed as it was written.
		{"actions=set_queue:2,output:1,pop_queue", "actions=set_queue:2,output:1,pop_queue"},
		{"actions=set_queue:2,enqueue:1:3,pop_queue", "actions=set_queue:2,enqueue:1:3,pop_queue"},
	} {
		fm, err := ParseFlow(tc.line)
		if err != nil {
			t.Fatalf("ParseFlow(%q): %v", tc.line, err)
		}
		got, err := FormatFlow(fm)
		if err != nil {
			t.Fatalf("FormatFlow(%q): %v", tc.line, err)
		}
		if got != tc.want {
			t.Errorf("FormatFlow(ParseFlow(%q)) = %q, want %q", tc.line, got, tc.want)
		}
		b1, _ := fm.MarshalBinary()
		again, err := ParseFlow(got)
		if err != nil {
			t.Fatalf("ParseFlow(%q): %v", got, err)
		}
		if b2, _ := again.MarshalBinary(); !bytes.Equal(b1, b2) {
			t.Errorf("%q reads back as other bytes than %q", got, tc.line)
		}
	}
	if got := asOVSPrints("actions=enqueue:LOCAL:16,enqueue:2:1"); got != "actions=set_queue:16,LOCAL,pop_queue,set_queue:1,output:2,pop_queue" {
		t.Errorf("asOVSPrints = %q", got)
	}
}
