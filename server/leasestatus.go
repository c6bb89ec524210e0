package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

// statusLine is the one-line state for systemd's STATUS=.
func (k *keeper) statusLine(wedged string) string {
	if wedged != "" {
		return "wedged: " + wedged
	}
	if g := k.engine.Gate(); !g.Open {
		left := time.Until(g.Deadline).Round(time.Second)
		return fmt.Sprintf("cold-start gate: waiting for %s (readiness timeout in %v)", strings.Join(g.WaitingFor, ", "), left)
	}
	var pending []string
	for _, b := range k.engine.Status() {
		if !b.Converged {
			pending = append(pending, b.Name)
		}
	}
	if len(pending) > 0 {
		return "restoring or waiting for " + strings.Join(pending, ", ")
	}
	return "all bridges converged"
}

// status is the guard's part of Status.
func (k *keeper) status() *flowstatev1.Guard {
	g := &flowstatev1.Guard{Mode: k.cfg.Mode, Running: k.cfg.Mode != GuardOff && k.present.Load(),
		Grace: durationpb.New(k.cfg.Grace), Lease: k.cfg.Lease, Ovsdb: k.ownIdentity()}
	if k.cfg.Mode == GuardOff {
		g.Proven = true
		return g
	}
	p := k.proof.Load()
	g.Proven = p.err == nil
	if p.err != nil {
		g.UnprovenField, g.Reason = p.err.Field, p.err.Msg
	}
	if hb := p.hb; hb.PID != 0 {
		g.Pid, g.GuardGrace, g.GuardOvsdb = int32(hb.PID), durationpb.New(hb.Grace), hb.OVSDB
		g.LastRoundTrip = timestamppb.New(hb.RoundTrip)
	}
	return g
}

// wedgedReason is the engine's last Wedged answer.
func (k *keeper) wedgedReason() string {
	if p := k.wedged.Load(); p != nil {
		return *p
	}
	return ""
}

// healthz serves /healthz: 200 while the engine is responsive, 503 with the
// reason while it is wedged.
func (k *keeper) healthz(w http.ResponseWriter, _ *http.Request) {
	if w2 := k.wedgedReason(); w2 != "" {
		http.Error(w, "wedged: "+w2, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
