package ofmods

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkApplyGroupAdd: Apply of one GROUP_MOD ADD of a select group of
// 64 buckets, as a controller sends a Service's group: the check as
// vswitchd's, then the canonical form.
func BenchmarkApplyGroupAdd(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("add-group group_id=900,type=select")
	for i := range 64 {
		fmt.Fprintf(&sb, ",bucket=bucket_id:%d,weight:100,watch_port:%d,actions=set_field:%#x->reg3,resubmit(,42)", i, i+1, 0x0a000000+i)
	}
	msgs := [][]byte{encode(b, sb.String())}
	st := newStore(b, initial)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Apply(mod, st, msgs); err != nil {
			b.Fatal(err)
		}
	}
}
