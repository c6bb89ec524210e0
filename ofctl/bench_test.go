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
