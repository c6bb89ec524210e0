package server_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

// ovnStatus polls status until its ovn_controller satisfies ok.
func (e *env) ovnStatus(ctx context.Context, what string, ok func(*flowstatev1.OvnController) bool) *flowstatev1.OvnController {
	e.t.Helper()
	var o *flowstatev1.OvnController
	poll(ctx, e.t, what, func() (bool, error) {
		st, err := flowstatev1.NewFlowStateServiceClient(e.c.Conn()).Status(ctx, &flowstatev1.StatusRequest{})
		if err != nil {
			return false, err
		}
		o = st.GetOvnController()
		return ok(o), nil
	})
	return o
}

// TestStatusNamesOVNController (issue 33): with --ovn-rundir at OVN's
// rundir, status names the running ovn-controller's version as
// `ovn-controller --version` prints it, asked over its control socket
// (whose answer is the first lines of --version's: the version and the
// Open vSwitch library);
// one stopped is said to be gone, and one started again is seen at once
// (its pidfile names another pid).
func TestStatusNamesOVNController(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	// ovn-controller programs br-int itself: flowstated manages br-ref.
	e := newEnvOf(ctx, t, []string{"br-ref"}, func(c *server.Config) { c.Bridges = []string{"br-ref"} })
	e.Config.OVNRunDir = e.sb.Dir() // the sandbox's OVN_RUNDIR
	e.Start(ctx)
	out, err := exec.CommandContext(ctx, "ovn-controller", "--version").Output()
	if err != nil {
		t.Fatalf("ovn-controller --version: %v (%s)", err, sandbox.OVNInstallHint)
	}
	printed := strings.TrimSpace(string(out))
	first, _, _ := strings.Cut(printed, "\n")
	version := strings.TrimPrefix(first, "ovn-controller ")

	o, err := e.sb.StartOVN(ctx)
	if err != nil {
		t.Fatalf("start OVN: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("close OVN: %v", err)
		}
	})
	got := e.ovnStatus(ctx, "ovn-controller not running yet", func(o *flowstatev1.OvnController) bool {
		return o.GetReason() != ""
	})
	if !strings.HasPrefix(got.GetReason(), "not found in "+e.sb.Dir()+": ") || got.GetVersion() != "" {
		t.Fatalf("before ovn-controller started: %v", got)
	}

	if err := o.StartController(ctx, ""); err != nil {
		t.Fatal(err)
	}
	got = e.ovnStatus(ctx, "ovn-controller's version in status", func(o *flowstatev1.OvnController) bool {
		return o.GetVersion() != ""
	})
	if got.GetVersion() != version || !strings.HasPrefix(printed+"\n", got.GetReply()+"\n") || got.GetReason() != "" {
		t.Fatalf("status says %v; want version %q, a reply that begins what --version prints:\n%s", got, version, printed)
	}
	if !strings.HasSuffix(got.GetSocket(), ".ctl") || got.GetRundir() != e.sb.Dir() || got.GetAskedAt() == nil {
		t.Fatalf("status names socket %q in %q, asked at %v", got.GetSocket(), got.GetRundir(), got.GetAskedAt())
	}
	t.Logf("status: ovn-controller %s (%s)", got.GetVersion(), got.GetSocket())

	// Gone and back: each is seen well within the few seconds answers
	// are kept, since the pidfile names another process (or none).
	old := got.GetSocket()
	if err := o.StopController(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got = e.ovnStatus(ctx, "stopped ovn-controller in status", func(o *flowstatev1.OvnController) bool {
		return o.GetVersion() == ""
	})
	if !strings.HasPrefix(got.GetReason(), "not found in ") {
		t.Fatalf("stopped ovn-controller: %v", got)
	}
	if err := o.StartController(ctx, ""); err != nil {
		t.Fatal(err)
	}
	got = e.ovnStatus(ctx, "restarted ovn-controller in status", func(o *flowstatev1.OvnController) bool {
		return o.GetVersion() != ""
	})
	if got.GetSocket() == old || got.GetVersion() != version {
		t.Fatalf("restarted ovn-controller: %v (before: %s)", got, old)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the stop and restart of ovn-controller took %v to show in status", d)
	}
}

// TestStatusNoOVNController: without ovn-controller, status says why it
// has no version: not asked (no --ovn-rundir), or not found in the rundir,
// naming the pidfile looked for.
func TestStatusNoOVNController(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	e := newEnvOf(ctx, t, []string{"br-ref"}, func(c *server.Config) { c.Bridges = []string{"br-ref"} })
	e.Config.OVNRunDir = e.sb.Dir()
	e.Start(ctx)
	got := e.ovnStatus(ctx, "ovn-controller in status", func(o *flowstatev1.OvnController) bool {
		return o.GetReason() != ""
	})
	pidfile := e.sb.Dir() + "/ovn-controller.pid"
	if got.GetVersion() != "" || !strings.HasPrefix(got.GetReason(), "not found in "+e.sb.Dir()+": ") ||
		!strings.Contains(got.GetReason(), "no pidfile "+pidfile) {
		t.Fatalf("status without ovn-controller: %v", got)
	}
	e.Stop()

	e.Config.OVNRunDir = ""
	e.Start(ctx)
	got = e.ovnStatus(ctx, "ovn-controller in status", func(o *flowstatev1.OvnController) bool {
		return o.GetReason() != ""
	})
	if got.GetReason() != `not asked (--ovn-rundir "")` || got.GetAskedAt() != nil {
		t.Fatalf("status with no --ovn-rundir: %v", got)
	}
}
