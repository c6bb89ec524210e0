package ofctl

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestParseFlowBinaryPooled: ParseFlowBinary reuses pooled scratch across
// flows: on several goroutines at once, each in its own order (a flow
// after any other, refused ones included), every seed gives the bytes and
// error it gives alone, and the result is allocated at its exact size.
func TestParseFlowBinaryPooled(t *testing.T) {
	seeds := binarySeeds(t)
	type result struct {
		b   []byte
		err string
	}
	want := make([]result, len(seeds))
	for i, l := range seeds {
		b, err := ParseFlowBinary(l)
		want[i] = result{bytes.Clone(b), fmt.Sprint(err)}
		if err == nil && len(b) <= 0xffff && cap(b) != len(b) {
			t.Errorf("%.200s: %d bytes allocated for %d", l, cap(b), len(b))
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range seeds {
				i := (k*(2*g+1) + g) % len(seeds)
				b, err := ParseFlowBinary(seeds[i])
				if !bytes.Equal(b, want[i].b) || fmt.Sprint(err) != want[i].err {
					t.Errorf("%.200s: on goroutine %d: %x %v, alone %x %s", seeds[i], g, b, err, want[i].b, want[i].err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
