package vswitchd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
)

// Hooks are what KeepConnected does for one kind of bridge.
type Hooks struct {
	// Set records the connection, or its loss (nil, with why).
	Set func(conn *ofconn.Conn, why string)
	// Serve uses the connection until it dies or ctx ends.
	Serve func(conn *ofconn.Conn)
	// Unreachable, when set, learns each new dial error.
	Unreachable func(err string)
}

// KeepConnected owns the OpenFlow connection of one bridge, managed or
// mirrored: dial, record it, serve it until it dies, record the loss, repeat
// until ctx ends. A connection that ends because ctx did is not recorded as
// lost: Run reads the last state to decide whether the node is still held.
//
// A connection lost within shortLived of being made, twice or more in a row,
// is a switch that takes the connection and then drops it (or that
// flowstated drops: a message it cannot read): redialing at once would make
// a reconnect storm. The next dial then waits, doubling from 20 ms up to
// RetryInterval, and the losses are logged once per run of them.
func (d *Daemon) KeepConnected(ctx context.Context, name string, log *slog.Logger, h Hooks) {
	const shortLived = time.Second
	path := d.MgmtPath(name)
	lost := time.Now()
	short := 0 // connections in a row lost within shortLived
	for {
		if short >= 2 {
			if !sleepCtx(ctx, min(20*time.Millisecond<<min(short-2, 10), d.cfg.RetryInterval)) {
				return
			}
		}
		conn, err := d.redial(ctx, path, lost, log, h.Unreachable)
		if err != nil {
			return
		}
		up := time.Now()
		d.noteSwitch(ctx, conn, log)
		if of := ofconn.VersionNames(conn.PeerVersions()); short < 2 {
			log.Info("bridge connected", "openflow", of)
		} else {
			log.Debug("bridge connected", "openflow", of)
		}
		d.cfg.Publish(events.Event{Type: events.BridgeConnected, Bridge: name, Message: "OpenFlow connection up"})
		d.cfg.Connected.WithLabelValues(name).Set(1)
		h.Set(conn, "")
		h.Serve(conn)
		if ctx.Err() != nil {
			_ = conn.Close()
			return
		}
		h.Set(nil, "OpenFlow connection lost: "+errString(conn.Err()))
		_ = conn.Close()
		lost = time.Now()
		if lost.Sub(up) < shortLived {
			short++
		} else {
			short = 0
		}
		d.cfg.Connected.WithLabelValues(name).Set(0)
		if ctx.Err() == nil {
			switch {
			case short == 2:
				log.Warn("bridge disconnected again right after connecting: redialing with backoff", "err", conn.Err())
			case short > 2:
				log.Debug("bridge disconnected", "err", conn.Err())
			default:
				log.Warn("bridge disconnected", "err", conn.Err())
			}
			d.cfg.Publish(events.Event{Type: events.BridgeDisconnected, Bridge: name, Message: "OpenFlow connection lost",
				Attrs: errAttrs(conn.Err())})
		}
	}
}

// redial dials the management socket at path until it answers or ctx ends.
// A restarting vswitchd is back within a fraction of a second and every
// millisecond of it is a gated switch: it redials every 20 ms for the first
// seconds after lost, then backs off to RetryInterval. Within those first
// seconds a failure is a restart in progress (debug: the loss was logged);
// past them it is logged once, with its duration, not at every retry.
func (d *Daemon) redial(ctx context.Context, path string, lost time.Time, log *slog.Logger, unreachable func(string)) (*ofconn.Conn, error) {
	const firstRetry, fastFor = 20 * time.Millisecond, 3 * time.Second
	delay := firstRetry
	var lastErr string
	warned := false
	for {
		conn, err := ofconn.Dial(ctx, path, ofconn.Options{
			EchoInterval: d.cfg.EchoInterval, EchoTimeout: d.cfg.EchoTimeout, Logger: log,
		})
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if down := time.Since(lost); !warned && down > fastFor {
			log.Warn("bridge unreachable, retrying", "path", path, "for", down.Round(time.Second), "err", err)
			warned = true
		}
		if msg := err.Error(); msg != lastErr {
			log.Debug("bridge unreachable, retrying", "path", path, "err", err)
			lastErr = msg
			if unreachable != nil {
				unreachable("OpenFlow connection: " + msg)
			}
		}
		if !sleepCtx(ctx, delay) {
			return nil, ctx.Err()
		}
		if time.Since(lost) > fastFor {
			delay = min(delay*2, d.cfg.RetryInterval)
		}
	}
}

// Connected returns b's connection or, while there is none, an ErrUnavailable
// that says why (vswitchd down, or the last dial error) and what to do.
func (d *Daemon) Connected(b *bridge.State) (*ofconn.Conn, error) {
	conn, err := b.Connected()
	if err == nil {
		return conn, nil
	}
	pidfile := filepath.Join(d.cfg.RunDir, "ovs-vswitchd.pid")
	if !ovsconfig.PidfileLocked(pidfile) {
		why := "no pidfile " + pidfile + " held by a live process"
		if _, serr := os.Stat(d.MgmtPath(b.Name())); serr != nil {
			why += ", no socket " + d.MgmtPath(b.Name())
		}
		return nil, fmt.Errorf("restore: bridge %s is not connected: ovs-vswitchd is not running (%s): start ovs-vswitchd; flowstated restores the bridge when it comes back: %w",
			b.Name(), why, errdefs.ErrUnavailable)
	}
	return nil, fmt.Errorf("restore: bridge %s is not connected (%s): check that ovs-vswitchd serves %s; flowstated reconnects on its own: %w",
		b.Name(), b.Snapshot().Reason, d.MgmtPath(b.Name()), errdefs.ErrUnavailable)
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

func errAttrs(err error) map[string]string {
	if err == nil {
		return nil
	}
	return map[string]string{"error": err.Error()}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
