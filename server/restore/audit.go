package restore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// audit is one periodic check of b (AuditInterval) and reports whether a
// replay must follow. It compares the switch with the store without sending
// anything, so a clean audit costs one dump. When they differ (a flow or
// group deleted by hand, another controller's change, an expired flow), the
// bridge stops claiming converged at once, the drift is counted
// (flowstate_drift_found_total), logged and published (drift_found), and the
// replay that follows corrects it (flowstate_drift_corrections_total,
// drift_corrected).
func (e *Engine) audit(ctx context.Context, b *managed, conn *ofconn.Conn, log *slog.Logger) bool {
	var n [3]int
	err := e.diffNow(ctx, b, conn, func(c plan.Change) error {
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
	e.cfg.Metrics.driftFound.WithLabelValues(b.Name()).Inc()
	log.Warn("drift found by the audit", "missing", n[0], "changed", n[1], "undeclared", n[2])
	e.publish(events.Event{Type: events.DriftFound, Bridge: b.Name(), Message: why,
		Attrs: map[string]string{"missing": strconv.Itoa(n[0]), "changed": strconv.Itoa(n[1]), "undeclared": strconv.Itoa(n[2])}})
	e.cfg.Faults.afterDriftFound()
	return true
}

// driftState counts the drift the audits of a bridge found; guarded by
// bridge.mu.
type driftState struct {
	found int
	last  time.Time
}
