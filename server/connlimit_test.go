package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flowstate-io/flowstate/server"
)

// TestConnsPerUIDCap: past --max-conns-per-uid a peer's new connections are
// refused, counted in flowstate_api_connections_refused_total and logged
// once for the episode however often the client redials; once one of its
// connections closes it is admitted again, and that is logged once too.
func TestConnsPerUIDCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logs := &logBuffer{}
	e := newEnv(ctx, t, func(c *server.Config) {
		c.MaxConnsPerUID = 3
		c.MetricsListen = "127.0.0.1:0"
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	e.Start(ctx)
	e.status(ctx) // the env's own client holds one connection
	check := func(cc *grpc.ClientConn, d time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	var conns []*grpc.ClientConn
	for range 3 {
		cc, err := grpc.NewClient(e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	for i, cc := range conns[:2] {
		if err := check(cc, 10*time.Second); err != nil {
			t.Fatalf("connection %d of 3: %v", i+2, err)
		}
	}
	// The fourth: refused at each of the client's redials for 2 s.
	if err := check(conns[2], 2*time.Second); err == nil {
		t.Fatal("a fourth connection of the uid was admitted")
	}
	body := e.Metrics(ctx)
	if strings.Contains(body, "flowstate_api_connections_refused_total 0\n") || !strings.Contains(body, "flowstate_api_connections_refused_total ") {
		t.Fatalf("no refusal counted:\n%s", grep(body, "refused"))
	}
	if n := strings.Count(logs.String(), "refusing API connections"); n != 1 {
		t.Fatalf("%d refusal lines, want 1:\n%s", n, logs.String())
	}
	// One closes: the fourth gets in.
	_ = conns[0].Close()
	if err := check(conns[2], 20*time.Second); err != nil {
		t.Fatalf("after a connection closed: %v", err)
	}
	if n := strings.Count(logs.String(), "below its API connection cap again"); n != 1 {
		t.Fatalf("%d end-of-episode lines, want 1:\n%s", n, logs.String())
	}
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
