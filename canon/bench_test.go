package canon

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// antreaFlows returns the flows of the production Antrea pipeline that
// parse, as text.
func antreaFlows(tb testing.TB) []string {
	var out []string
	for _, l := range corpusLines(&testing.T{}, filepath.Join("..", "server", "testdata", "antrea-v1.15", "flows.txt")) {
		if _, _, err := Parse(entry.KindFlow, l); err == nil {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		tb.Fatal("no Antrea flow parsed")
	}
	return out
}

// cniFlows returns n distinct flows shaped like a CNI pipeline's: a few
// match shapes with per-pod values, actions that mostly repeat across flows
// (goto_table, register marks, ct) and some that carry per-pod values
// (MAC rewrites, conjunction ids).
func cniFlows(n int) []string {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		a, b := i/250%250+1, i%250+1
		ip := fmt.Sprintf("10.%d.%d.%d", i/62500%250, a, b)
		mac := fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", i>>24&0xff, i>>16&0xff, i>>8&0xff, i&0xff)
		port := 10 + i%60000
		var l string
		switch i % 10 {
		case 0:
			l = fmt.Sprintf("table=4,priority=200,ip,in_port=%d,dl_src=%s,nw_src=%s,actions=goto_table:5", port, mac, ip)
		case 1:
			l = fmt.Sprintf("table=1,priority=200,arp,in_port=%d,arp_spa=%s,arp_sha=%s,actions=goto_table:2", port, ip, mac)
		case 2:
			l = fmt.Sprintf("table=17,priority=200,ip,reg0=0x200/0x200,nw_dst=%s,actions=set_field:ba:5e:d1:55:aa:c0->eth_src,set_field:%s->eth_dst,goto_table:19", ip, mac)
		case 3:
			l = fmt.Sprintf("table=22,priority=200,dl_dst=%s,actions=set_field:%#x->reg1,set_field:0x200000/0x600000->reg0,goto_table:23", mac, port)
		case 4:
			l = fmt.Sprintf("table=11,priority=200,tcp,reg4=0x10000/0x70000,nw_dst=%s,tp_dst=80,actions=set_field:0x200/0x200->reg0,set_field:0x20000/0x70000->reg4,set_field:0x9->reg7,group:9", ip)
		case 5:
			l = fmt.Sprintf("table=25,priority=14500,ip,nw_src=%s,actions=conjunction(%d,1/3)", ip, i%50+1)
		case 6:
			l = fmt.Sprintf("table=20,priority=190,ct_state=+new+trk,ip,nw_src=%s,nw_dst=%s,actions=ct(commit,table=21,zone=65520,exec(set_field:0x20/0x20->ct_mark,set_field:0x40/0x40->ct_mark,move:NXM_NX_REG0[0..3]->NXM_NX_CT_MARK[0..3]))", ip, ip)
		case 7:
			l = fmt.Sprintf("table=23,priority=200,reg1=%#x,actions=set_field:0x22->reg9,set_field:0x800000/0xc00000->reg4,goto_table:24", port)
		case 8:
			l = fmt.Sprintf("table=25,priority=14600,tcp,nw_src=%s,tp_dst=%d,actions=conjunction(6,3/3)", ip, 1+i%1000)
		case 9:
			l = fmt.Sprintf("table=5,priority=200,ip,nw_dst=%s,actions=ct(table=6,zone=65521,nat)", ip)
		}
		out = append(out, l)
	}
	return out
}

// encoded returns the canonical payloads of flows.
func encoded(tb testing.TB, flows []string) [][]byte {
	ps := make([][]byte, 0, len(flows))
	for _, l := range flows {
		p, _, err := Parse(entry.KindFlow, l)
		if err != nil {
			tb.Fatalf("%s: %v", l, err)
		}
		ps = append(ps, p)
	}
	return ps
}

// BenchmarkDecodeAntrea: Decode (the same work as Opaque) of each flow of
// the production Antrea pipeline, per flow.
func BenchmarkDecodeAntrea(b *testing.B) {
	ps := encoded(b, antreaFlows(b))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := Decode(entry.KindFlow, ps[i%len(ps)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEntryAntrea: DecodeEntry, as the server calls it for a
// flow a Go client sends, of each flow of the Antrea pipeline.
func BenchmarkDecodeEntryAntrea(b *testing.B) {
	benchDecodeEntry(b, encoded(b, antreaFlows(b)))
}

// BenchmarkDecodeEntryCNI: DecodeEntry of 5000 distinct CNI-shaped flows.
func BenchmarkDecodeEntryCNI(b *testing.B) {
	benchDecodeEntry(b, encoded(b, cniFlows(5000)))
}

// BenchmarkDecodeEntryCNINoCache: BenchmarkDecodeEntryCNI without the
// cache of action lists, what a flow whose actions are new costs.
func BenchmarkDecodeEntryCNINoCache(b *testing.B) {
	defer func(c *listCache) { actionLists = c }(actionLists)
	actionLists = nil
	benchDecodeEntry(b, encoded(b, cniFlows(5000)))
}

// BenchmarkDecodeEntryCNIParallel: BenchmarkDecodeEntryCNI on every CPU, as
// the server canonicalises.
func BenchmarkDecodeEntryCNIParallel(b *testing.B) {
	ps := encoded(b, cniFlows(5000))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := DecodeEntry(entry.KindFlow, ps[i%len(ps)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchDecodeEntry(b *testing.B, ps [][]byte) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := DecodeEntry(entry.KindFlow, ps[i%len(ps)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseAntrea: Parse of each flow of the Antrea pipeline.
func BenchmarkParseAntrea(b *testing.B) {
	benchParse(b, antreaFlows(b))
}

// BenchmarkParseCNI: Parse of 5000 distinct CNI-shaped flows.
func BenchmarkParseCNI(b *testing.B) {
	benchParse(b, cniFlows(5000))
}

func benchParse(b *testing.B, flows []string) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := Parse(entry.KindFlow, flows[i%len(flows)]); err != nil {
			b.Fatal(err)
		}
	}
}
