package server

import (
	"context"
	"errors"

	"github.com/flowstate-io/flowstate/server/restore"
)

// Daemon is a flowstated running in this process (tests, the demo).
type Daemon struct {
	cancel      context.CancelFunc
	done        chan struct{}
	err         error
	metricsAddr string // set before Start returns
	// mirrors is set before Start returns; only tests read it
	// (export_test.go: Mirrors, which the API does not carry yet).
	mirrors mirrorState
}

// mirrorState is the state of the unmanaged bridges the engine mirrors.
type mirrorState interface {
	Mirrors() []restore.BridgeStatus
}

// MetricsAddr is the bound address of the metrics listener ("" if disabled),
// useful with a MetricsListen of port 0.
func (d *Daemon) MetricsAddr() string { return d.metricsAddr }

// Start runs Run in a goroutine and returns once the API socket serves, or
// with Run's error if it failed to start. cfg.Ready is chained, not replaced.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	ctx, cancel := context.WithCancel(ctx)
	d := &Daemon{cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	cfg.metricsBound = func(addr string) { d.metricsAddr = addr }
	cfg.mirrorsBound = func(m mirrorState) { d.mirrors = m }
	userReady := cfg.Ready
	cfg.Ready = func() {
		if userReady != nil {
			userReady()
		}
		close(ready)
	}
	go func() {
		defer close(d.done)
		d.err = Run(ctx, cfg)
	}()
	select {
	case <-ready:
		return d, nil
	case <-d.done:
		cancel()
		if d.err == nil {
			d.err = errors.New("server: stopped before serving")
		}
		return nil, d.err
	}
}

// Stop stops the daemon gracefully and returns Run's error.
func (d *Daemon) Stop() error {
	d.cancel()
	<-d.done
	return d.err
}
