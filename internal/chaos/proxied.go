package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// Proxied is the module a controller behind flowstated's OpenFlow proxy
// writes as: an unmodified controller's view, FLOW_MODs in bundles, each
// acknowledged by its commit and the barrier after it.
const Proxied = "proxied"

// The proxied controller's operations.
const (
	OpProxyPut    OpKind = "proxy-put"
	OpProxyDelete OpKind = "proxy-delete"
)

// proxyStep runs one random operation of the proxied controller: a bundle
// of adds, or of strict deletes, of flows in its table, then a barrier.
// Its connection is dialled again after any error: the proxy closes it
// when vswitchd or flowstated goes, or when a change's outcome is unknown.
func (w *writer) proxyStep(ctx context.Context, counts *counter) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	set := map[string]string{}
	op := OpProxyPut
	if w.r.Float64() < 0.3 {
		op = OpProxyDelete
		w.mu.Lock()
		for _, ip := range sortedKeys(w.model) {
			if st := w.model[ip]; st.present && !st.unknown && w.r.IntN(3) == 0 {
				set[ip] = ""
			}
		}
		w.mu.Unlock()
		if len(set) == 0 {
			return
		}
	} else {
		for range 1 + w.r.IntN(4) {
			set[w.ip(w.r.IntN(40))] = w.actions()
		}
	}
	err := w.proxyBundle(ctx, set)
	w.record(set, false, err)
	w.count(counts, op, err)
}

// proxyBundle sends set as one bundle and a barrier: nil once both are
// answered (the change is durable and on the switch, or held and to be
// replayed), the switch's refusal (nothing applied), or another error
// (outcome unknown).
func (w *writer) proxyBundle(ctx context.Context, set map[string]string) error {
	if w.conn == nil {
		c, err := ofconn.Dial(ctx, w.proxy, ofconn.Options{})
		if err != nil {
			return fmt.Errorf("chaos: dial the proxy: %w", err)
		}
		w.conn = c
	}
	msgs := make([]ofconn.Message, 0, len(set))
	for _, ip := range sortedKeys(set) {
		var (
			p   []byte
			err error
		)
		if a := set[ip]; a == "" {
			p, _, err = canon.ParseDelete(entry.KindFlow, fmt.Sprintf("table=%d,priority=10,tcp,nw_dst=%s", w.table, ip))
			if err == nil {
				p[25] = 4 // DELETE_STRICT
			}
		} else {
			p, _, err = canon.Parse(entry.KindFlow, w.flow(ip, a))
		}
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		msgs = append(msgs, p)
	}
	err := w.conn.Bundle(ctx, msgs)
	if err == nil {
		err = w.conn.Barrier(ctx)
	}
	var be *ofconn.BundleError
	if err != nil && !errors.As(err, &be) {
		_ = w.conn.Close()
		w.conn = nil
	}
	return err
}

// closeProxy closes the proxied controller's connection.
func (w *writer) closeProxy() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// refusedByProxy reports a refusal through the proxy: the switch's
// OFPT_ERROR for the bundle, after which nothing of it was applied.
func refusedByProxy(err error) bool {
	var be *ofconn.BundleError
	return errors.As(err, &be) && !be.Committed
}
