package server

import (
	"context"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// BenchmarkGRPCRoundTrip: a unary call over a unix socket, client and server
// in this process, under gRPC's transport options one at a time, the
// variants' calls alternated so that a loaded machine slows them alike
// (issue 35: the gRPC part of a small Put). Shared write buffers are not
// among them: gRPC shares them by default (grpc.SharedWriteBuffer is
// deprecated for that).
//
//	go test -run '^$' -bench GRPCRoundTrip -benchtime 20000x ./server/
func BenchmarkGRPCRoundTrip(b *testing.B) {
	variants := []struct {
		name string
		srv  []grpc.ServerOption
		cli  []grpc.DialOption
	}{
		{"default", nil, nil},
		{"stream-workers", []grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}, nil},
		{"4k-buffers", []grpc.ServerOption{grpc.ReadBufferSize(4096), grpc.WriteBufferSize(4096)}, []grpc.DialOption{grpc.WithReadBufferSize(4096), grpc.WithWriteBufferSize(4096)}},
	}
	calls := make([]func() error, len(variants))
	for i, v := range variants {
		sock := filepath.Join(b.TempDir(), "s")
		l, err := net.Listen("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		gs := grpc.NewServer(v.srv...)
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go func() { _ = gs.Serve(l) }()
		defer gs.Stop()
		conn, err := grpc.NewClient("unix://"+sock, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, v.cli...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		hc := healthpb.NewHealthClient(conn)
		calls[i] = func() error { _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); return err }
		if err := calls[i](); err != nil { // connected before timing
			b.Fatal(err)
		}
	}
	lat := make([][]time.Duration, len(variants))
	n := 0
	for b.Loop() {
		for k := range variants {
			k = (k + n) % len(variants)
			t0 := time.Now()
			if err := calls[k](); err != nil {
				b.Fatal(err)
			}
			lat[k] = append(lat[k], time.Since(t0))
		}
		n++
	}
	for k, v := range variants {
		slices.Sort(lat[k])
		var sum time.Duration
		for _, d := range lat[k] {
			sum += d
		}
		b.ReportMetric(float64(lat[k][len(lat[k])/2].Nanoseconds())/1e3, v.name+"-p50-µs")
		b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat[k]))/1e3, v.name+"-mean-µs")
	}
}
