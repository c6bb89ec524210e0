package ofproxy_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkBarrierRoundTrip measures what the proxy adds to a barrier round
// trip (the controller's wait for "everything before is applied"), against
// vswitchd's own socket in the same run; it reports p50 and p99.
//
//	go test -run '^$' -bench BarrierRoundTrip -benchtime 5000x ./server/ofproxy
func BenchmarkBarrierRoundTrip(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	s := startSandbox(ctx, b)
	if err := s.AddBridge(ctx, "br0"); err != nil {
		b.Fatal(err)
	}
	relay := startProxy(b, s, "br0")
	recording, _ := startRecordingProxy(b, s, "br0")
	for _, target := range []struct{ name, path string }{
		{"direct", s.MgmtPath("br0")},
		{"relay", relay.Addr()},
		{"recording", recording.Addr()},
	} {
		b.Run(target.name, func(b *testing.B) {
			c := dialOF(ctx, b, target.path)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if got := c.untilBarrier(uint32(i + 10)); len(got) != 0 {
					b.Fatalf("unexpected messages before the barrier reply: %x", got)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
