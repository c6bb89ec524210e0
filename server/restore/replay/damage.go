package replay

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// noteDamageLocked brings b's quarantine in line with the entries the store
// found damaged (store.File.Damaged: a stored value whose checksum does not
// match). The store leaves them out of every read, so no replay, write or
// diff sends them; here they are reported as quarantined (status, metric,
// an event and an error log naming bucket and key), and taken off once a
// write of the same identity has replaced them. It returns the keys of the
// damaged entries.
func (rp *Replayer) noteDamageLocked(b *bridge.State, log *slog.Logger) []string {
	damaged := rp.cfg.Store.File().Damaged(b.Name())
	now := make(map[string]bool, len(damaged))
	var fresh []bridge.Quarantined
	for _, d := range damaged {
		k := plan.Key(d.Kind, d.Key)
		now[k] = true
		if b.Quarantine().Damaged(k) {
			continue
		}
		fresh = append(fresh, bridge.Quarantined{Bridge: b.Name(), Entry: entry.Entry{Kind: d.Kind, Module: d.Module, ID: d.Key},
			Reason: d.String(), Since: d.Since})
	}
	var gone []string
	b.Quarantine().Each(func(k string, _ bool) bool {
		if b.Quarantine().Damaged(k) && !now[k] {
			gone = append(gone, k)
		}
		return true
	})
	b.LiftQuarantineLocked(gone)
	lifted := len(gone)
	if lifted > 0 {
		log.Info("quarantine lifted: a write replaced the damaged entries", "entries", lifted)
	}
	if len(fresh) > 0 {
		b.QuarantineDamagedLocked(fresh)
		for _, q := range fresh {
			log.Error("stored entry damaged: its checksum does not match; it is left out, never sent, until its module declares it again",
				"kind", q.Entry.Kind, "module", q.Entry.Module, "reason", q.Reason)
		}
		rp.cfg.Metrics.Quarantined.WithLabelValues(b.Name()).Add(float64(len(fresh)))
		rp.cfg.Publish(events.Event{Type: events.EntryQuarantined, Bridge: b.Name(), Module: fresh[0].Entry.Module,
			Message: strconv.Itoa(len(fresh)) + " stored entries damaged (checksum mismatch), left out: " + fresh[0].Reason,
			Attrs:   map[string]string{"reason": "store checksum mismatch", "entries": strconv.Itoa(len(fresh)), "since": fresh[0].Since.Format(time.RFC3339)}})
	}
	if lifted > 0 || len(fresh) > 0 {
		b.PublishLocked()
	}
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	return keys
}
