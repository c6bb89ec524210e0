package ofctl

import "testing"

const benchLine = "table=11,priority=200,tcp,reg4=0x10000/0x70000,nw_dst=10.101.255.29,tp_dst=80,actions=set_field:0x200/0x200->reg0,set_field:0x20000/0x70000->reg4,set_field:0x9->reg7,ct(commit,table=13,zone=65520,nat(dst=10.10.0.24:80),exec(set_field:0x10/0x10->ct_mark)),goto_table:12"

func BenchmarkParseFlow(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ParseFlow(benchLine); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFormatFlow(b *testing.B) {
	fm, err := ParseFlow(benchLine)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := FormatFlow(fm); err != nil {
			b.Fatal(err)
		}
	}
}

// Lines OVS's limits refuse (docs/benchmarks.md, "Refusals"): a megabyte of
// nested clones, the 2,000-spec learn, and the costliest line still parsed
// to the end: a megabyte of outputs inside the deepest nesting OVS allows.
var refusedLines = []struct{ name, line string }{
	{"DeepClone1MiB", "actions=" + nestClones((1<<20-20)/7, "output:1")},
	{"Learn2000Specs", "actions=learn(table=1," + repeatList("NXM_OF_VLAN_TCI[0..11]", 2000) + ")"},
	{"Depth99Outputs1MiB", "actions=" + nestClones(MaxActionDepth-1, repeatList("output:1", (1<<20-800)/9))},
}

func BenchmarkRefuse(b *testing.B) {
	for _, rl := range refusedLines {
		b.Run(rl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rl.line)))
			for b.Loop() {
				if _, err := ParseFlowBinary(rl.line); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// BenchmarkCheckInstructions is what the limits add to every encoded flow
// canon takes (twice: as sent and canonical); text flows pay about the same
// in checkNesting and checkLimits.
func BenchmarkCheckInstructions(b *testing.B) {
	fm, err := ParseFlowBinary(benchLine)
	if err != nil {
		b.Fatal(err)
	}
	mlen := int(fm[50])<<8 | int(fm[51])
	in := fm[48+(mlen+7)&^7:]
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckInstructions(in); err != nil {
			b.Fatal(err)
		}
	}
}
