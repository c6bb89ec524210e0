package main

import "testing"

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		line string
		want event
		ok   bool
	}{
		{`> goroutine(55): github.com/flowstate-io/flowstate/server.(*service).Put(("*x")(0x1), 1)`, event{g: 55, fn: "server.(*service).Put"}, true},
		{`>> goroutine(66): github.com/flowstate-io/flowstate/server/restore/write.(*writeQueue).take => ([]*x len: 1)`, event{ret: true, g: 66, fn: "server/restore/write.(*writeQueue).take"}, true},
		{`> goroutine(76): github.com/flowstate-io/flowstate/server/restore/write.startStream.func2()`, event{g: 76, fn: "server/restore/write.startStream.func2"}, true},
		{`> goroutine(9): fmt.Sprintf("x")`, event{}, false},
		{`garbage`, event{}, false},
	} {
		got, ok := parse(tt.line)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}
