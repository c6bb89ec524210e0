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
// caches of action lists and actions, what a flow whose actions are new
// costs.
func BenchmarkDecodeEntryCNINoCache(b *testing.B) {
	defer func(c flowCaches) { caches = c }(caches)
	caches = flowCaches{}
	benchDecodeEntry(b, encoded(b, cniFlows(5000)))
}

// BenchmarkDecodeEntryCNIParallel: BenchmarkDecodeEntryCNI on every CPU, as
// the server canonicalises.
func BenchmarkDecodeEntryCNIParallel(b *testing.B) {
	benchDecodeEntryParallel(b, encoded(b, cniFlows(5000)))
}

// benchDecodeEntryParallel is benchDecodeEntry on every CPU.
func benchDecodeEntryParallel(b *testing.B, ps [][]byte) {
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

// pipelineFlows returns n distinct flows shaped like the pipeline
// cmd/flowstate-bench generates (groups of 20 flows per pod: classifier,
// spoof guard, services, endpoints, policy rules, conntrack commits,
// routes): no two flows share an action list, but single actions
// (set_field:0x2->reg0, resubmit(,40), a register load in one table)
// recur across pods and tables.
func pipelineFlows(n int) []string {
	const slots = 20
	proto := func(x int) string {
		if x%2 == 0 {
			return "tcp"
		}
		return "udp"
	}
	ip := func(k int) string { return fmt.Sprintf("10.244.%d.%d", (k+2)>>8&0xff, (k+2)&0xff) }
	out := make([]string, 0, n)
	for j := 0; len(out) < n; j++ {
		k, s := j/slots, j%slots
		port, pod := k+3, k+1
		var l string
		switch {
		case s == 0:
			l = fmt.Sprintf("table=0,priority=190,in_port=%d,actions=set_field:0x2->reg0,set_field:0x%x->reg1,goto_table:10", port, pod)
		case s == 1:
			l = fmt.Sprintf("table=10,priority=200,ip,in_port=%d,nw_src=%s,actions=goto_table:20", port, ip(k))
		case s == 2:
			l = fmt.Sprintf("table=70,priority=200,ip,reg0=0x2/0xf,nw_dst=%s,actions=set_field:0x%x->reg1,output:%d", ip(k), pod, port)
		case s == 3:
			l = fmt.Sprintf("table=40,priority=100,ip,reg1=0x%x,actions=drop", pod)
		case s <= 5:
			svc := k*2 + s - 4
			l = fmt.Sprintf("table=30,priority=200,%s,nw_dst=10.96.%d.%d,tp_dst=%d,actions=set_field:0x%x->reg3,goto_table:31",
				proto(svc), svc>>8&0xff, svc&0xff, 80+svc%8*1000+svc>>16, svc+1)
		case s <= 7:
			ep := k*2 + s - 6
			l = fmt.Sprintf("table=31,priority=200,reg3=0x%x/0xfffff,actions=set_field:0x%x->reg2,resubmit(,40)", ep+1, ep+1)
		case s <= 13:
			r := s - 8
			cidr := k*6 + r
			l = fmt.Sprintf("table=40,priority=%d,%s,reg1=0x%x,nw_dst=172.%d.%d.0/24,tp_dst=%d,actions=set_field:0x%x->reg2,goto_table:50",
				1000+r, proto(r), pod, 16+cidr>>8%16, cidr&0xff, 1024+r*11, (k*6+r)+1)
		case s <= 17:
			r := s - 14
			src := fmt.Sprintf("192.%d.0.0/16", 168+(k*4+r)%64)
			if r < 2 {
				l = fmt.Sprintf("table=50,priority=%d,%s,reg1=0x%x/0xffff,nw_src=%s,tp_dst=%d,actions=set_field:0x%x->reg2,goto_table:60",
					2000+r, proto(r), pod, src, 443+r*10, (k*4+r)+1)
			} else {
				l = fmt.Sprintf("table=50,priority=%d,ct_state=+new+trk,%s,reg1=0x%x/0xffff,nw_src=%s,tp_dst=%d,actions=ct(commit,table=60,zone=%d)",
					2000+r, proto(r), pod, src, 8080+r, 1+(k*4+r)%65000)
			}
		default:
			route := k*2 + s - 18
			l = fmt.Sprintf("table=80,priority=200,ip,nw_dst=%d.%d.%d.0/24,actions=set_field:0x%x->reg0,output:%d",
				11+route>>16, route>>8&0xff, route&0xff, route+1, 2)
		}
		out = append(out, l)
	}
	return out
}

// BenchmarkDecodeEntryPipeline: DecodeEntry of 200,000 pipeline-shaped
// flows, whose action lists all differ: what a Go client's bulk declare
// costs per flow.
func BenchmarkDecodeEntryPipeline(b *testing.B) {
	benchDecodeEntry(b, encoded(b, pipelineFlows(200000)))
}

// BenchmarkDecodeEntryPipelineListCache: BenchmarkDecodeEntryPipeline
// with the cache of action lists only, not of single actions.
func BenchmarkDecodeEntryPipelineListCache(b *testing.B) {
	defer func(c flowCaches) { caches = c }(caches)
	caches = flowCaches{lists: newListCache()}
	benchDecodeEntry(b, encoded(b, pipelineFlows(200000)))
}

// BenchmarkDecodeEntryPipelineParallel: BenchmarkDecodeEntryPipeline on
// every CPU, as the server canonicalises a bulk declare.
func BenchmarkDecodeEntryPipelineParallel(b *testing.B) {
	benchDecodeEntryParallel(b, encoded(b, pipelineFlows(200000)))
}

// BenchmarkParsePipeline: Parse of the same flows as text.
func BenchmarkParsePipeline(b *testing.B) {
	benchParse(b, pipelineFlows(200000))
}
