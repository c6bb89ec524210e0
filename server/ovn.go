package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/server/unixctl"
)

// ovnController is what status shows of the node's ovn-controller, which
// writes no version into OVSDB: its answer to `version` on its control
// socket in Config.OVNRunDir. It is asked only when status is, at most
// every ovnAskEvery, or at once when the rundir holds another pidfile or
// socket (ovn-controller stopped or restarted, maybe as a new version);
// never on a write path.
type ovnController struct {
	rundir string
	log    *slog.Logger

	mu   sync.Mutex // held across an ask: concurrent status calls share it
	last *flowstatev1.OvnController
	// seen is what the rundir held at the last ask (found).
	seen string
}

const (
	ovnAskEvery   = 5 * time.Second
	ovnAskTimeout = 2 * time.Second
	ovnTarget     = "ovn-controller"
)

func newOVNController(rundir string, log *slog.Logger) *ovnController {
	return &ovnController{rundir: rundir, log: log}
}

// status returns the last answer, asking again when it is stale. ctx's
// end does not cut an ask short: its answer is kept for the next callers.
func (o *ovnController) status(ctx context.Context) *flowstatev1.OvnController {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.found()
	if o.last != nil && seen == o.seen && (o.rundir == "" || time.Since(o.last.GetAskedAt().AsTime()) < ovnAskEvery) {
		return o.last
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ovnAskTimeout)
	defer cancel()
	st := o.ask(ctx)
	if v := st.GetVersion(); v != "" && v != o.last.GetVersion() {
		o.log.Info("ovn-controller version", "version", v, "socket", st.GetSocket())
	}
	o.last, o.seen = st, seen
	return st
}

// found says what the rundir holds of ovn-controller, its pid and whether
// its socket is there: a pidfile read and a stat, no round trip.
func (o *ovnController) found() string {
	if o.rundir == "" {
		return ""
	}
	_, pid, err := unixctl.Socket(o.rundir, ovnTarget)
	return fmt.Sprintf("%d %t", pid, err == nil)
}

// ask asks ovn-controller for its version, or says why it was not asked
// or did not answer.
func (o *ovnController) ask(ctx context.Context) *flowstatev1.OvnController {
	st := &flowstatev1.OvnController{Rundir: o.rundir}
	if o.rundir == "" {
		st.Reason = `not asked (--ovn-rundir "")`
		return st
	}
	st.AskedAt = timestamppb.Now()
	if fi, err := os.Stat(o.rundir); err != nil || !fi.IsDir() {
		st.Reason = fmt.Sprintf("not asked: --ovn-rundir %s is not a directory (no OVN on this node?)", o.rundir)
		return st
	}
	sock, pid, err := unixctl.Socket(o.rundir, ovnTarget)
	st.Socket = sock
	if err != nil {
		st.Reason = fmt.Sprintf("not found in %s: %v", o.rundir, err)
		return st
	}
	reply, err := unixctl.Call(ctx, sock, "version")
	if err != nil {
		st.Reason = fmt.Sprintf("no answer from pid %d: %v", pid, err)
		return st
	}
	st.Reply = strings.TrimSpace(reply)
	first, _, _ := strings.Cut(st.Reply, "\n")
	v, ok := strings.CutPrefix(first, ovnTarget+" ")
	if v = strings.TrimSpace(v); !ok || v == "" {
		st.Reason = fmt.Sprintf("pid %d answered version with %q, not %q", pid, first, ovnTarget+" VERSION")
		return st
	}
	st.Version = v
	return st
}
