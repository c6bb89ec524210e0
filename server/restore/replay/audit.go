package replay

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Audit is one periodic check of b (AuditInterval) and reports whether a
// replay must follow. It compares the switch with the store without sending
// anything, so a clean audit costs one dump. When they differ (a flow or
// group deleted by hand, another controller's change, an expired flow), the
// bridge stops claiming converged at once, the drift is counted
// (flowstate_drift_found_total), logged and published (drift_found), and the
// replay that follows corrects it (flowstate_drift_corrections_total,
// drift_corrected).
func (rp *Replayer) Audit(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) bool {
	var n [3]int
	err := rp.Diff(ctx, b, conn, func(c plan.Change) error {
		n[c.Op-plan.OpAdd]++
		return nil
	})
	if err != nil {
		// The replay reports what went wrong.
		return ctx.Err() == nil
	}
	if n == [3]int{} {
		return false
	}
	why := fmt.Sprintf("drift: the switch differs from the store (%d missing, %d changed, %d not declared); correcting", n[0], n[1], n[2])
	b.Lock()
	b.DriftFoundLocked(why)
	b.Unlock()
	rp.cfg.Metrics.DriftFound.WithLabelValues(b.Name()).Inc()
	log.Warn("drift found by the audit", "missing", n[0], "changed", n[1], "undeclared", n[2])
	rp.cfg.Publish(events.Event{Type: events.DriftFound, Bridge: b.Name(), Message: why,
		Attrs: map[string]string{"missing": strconv.Itoa(n[0]), "changed": strconv.Itoa(n[1]), "undeclared": strconv.Itoa(n[2])}})
	rp.cfg.afterDriftFound()
	return true
}
