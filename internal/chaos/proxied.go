package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofmods"
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
	OpProxyResync OpKind = "proxy-resync" // a clear, then a changed reinstall
)

// proxyStep runs one random operation of the proxied controller: a bundle
// of adds, or of strict deletes, of flows in its table, then a barrier; or,
// rarely, a resync (proxyResync).
// Its connection is dialled again after any error: the proxy closes it
// when vswitchd or flowstated goes, or when a change's outcome is unknown.
func (w *writer) proxyStep(ctx context.Context, counts *counter) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if w.conn == nil {
		if err := w.dialProxy(ctx); err != nil {
			w.count(counts, "proxy-dial", err)
			return
		}
	}
	if w.relayDebt && !w.connRelayed {
		// Back on flowstated after writes over the guard's relay: the
		// controller reinstalls, as one that reconnects does.
		w.proxyResync(ctx, counts)
		return
	}
	set := map[string]string{}
	op := OpProxyPut
	switch p := w.r.Float64(); {
	case p < resyncShare:
		w.proxyResync(ctx, counts)
		return
	case p < 0.3:
		op = OpProxyDelete
		w.mu.Lock()
		for _, ip := range sortedKeys(w.model) {
			odds := 3
			if w.policyFlow(ip) {
				odds = 30
			}
			if st := w.model[ip]; st.present && !st.unknown && w.r.IntN(odds) == 0 {
				set[ip] = ""
			}
		}
		w.mu.Unlock()
		if len(set) == 0 {
			return
		}
	default:
		for range 1 + w.r.IntN(4) {
			i := proxyPolicy + w.r.IntN(40-proxyPolicy)
			if w.r.IntN(8) == 0 {
				i = w.r.IntN(proxyPolicy)
			}
			set[w.ip(i)] = w.actions()
		}
	}
	sent := time.Now()
	err := w.proxyBundles(ctx, [][]ofconn.Message{nil}, set)
	w.record(set, false, err)
	w.noteAcks(set, false, sent, err)
	w.count(counts, op, err)
}

// resyncShare is the share of the proxied controller's operations that are
// a resync: about one every few seconds, as busy as the @resync triggers
// need.
const resyncShare = 0.1

// proxyPolicy is how many of the proxied controller's 40 identities are its
// policy: flows its resyncs change and its other operations rarely touch.
// The rest its puts and deletes churn: a busy controller whose policy
// changes only when it reconnects, so a policy change stays as it was
// acknowledged long enough for barrier-delay to see whether it reached
// the switch.
const proxyPolicy = 20

func (w *writer) policyFlow(ip string) bool {
	for i := range proxyPolicy {
		if w.ip(i) == ip {
			return true
		}
	}
	return false
}

// proxyResync is the proxied controller reconnecting with a changed
// policy, as ovn-controller does: a clear (a FLOW_MOD delete of every
// flow, which starts flowstated's resync), then its current model again
// in two bundles with some policy flows changed (tightened to drop,
// loosened, left out, added), then a barrier. Busy as it is (it writes
// again within 300 ms), its changes must still reach the switch within
// the resync's bound (barrier-delay).
func (w *writer) proxyResync(ctx context.Context, counts *counter) {
	set := map[string]string{}
	w.mu.Lock()
	for i := range 40 {
		ip := w.ip(i)
		st := w.model[ip]
		if st.unknown {
			continue
		}
		if !st.present {
			if i < proxyPolicy && w.r.IntN(4) == 0 {
				set[ip] = w.actions()
			}
			continue
		}
		set[ip] = st.actions
		if i >= proxyPolicy {
			continue
		}
		switch w.r.IntN(12) {
		case 0, 1, 2:
			set[ip] = "drop" // tightened
		case 3:
			set[ip] = "output:2"
		case 4:
			delete(set, ip) // no longer wanted
		}
	}
	w.mu.Unlock()
	// A clear over the guard's relay deletes every flow of br-int, the
	// gRPC modules' too, as with plain Open vSwitch: a controller that
	// shares its bridge with other writers never sends one there.
	if w.conn == nil {
		if err := w.dialProxy(ctx); err != nil {
			w.count(counts, OpProxyResync, err)
			return
		}
	}
	if w.connRelayed || (w.mayRelay != nil && w.mayRelay()) {
		return
	}
	clear, err := clearFlows()
	if err != nil {
		w.count(counts, OpProxyResync, err)
		return
	}
	if w.onResync != nil {
		w.onResync()
	}
	sent := time.Now()
	debt := w.relayDebt
	err = w.proxyBundles(ctx, [][]ofconn.Message{{clear}, nil}, set)
	if err == nil && debt && !w.connRelayed {
		w.relayDebt = false
	}
	w.record(set, true, err)
	w.noteAcks(set, true, sent, err)

	w.count(counts, OpProxyResync, err)
}

// clearFlows is a controller's "delete every flow" (ofmods.Clears).
func clearFlows() (ofconn.Message, error) {
	fm := openflow15.NewFlowMod()
	fm.Command = openflow15.FC_DELETE
	fm.TableId = openflow15.OFPTT_ALL
	fm.OutPort = openflow15.P_ANY
	fm.OutGroup = openflow15.OFPG_ANY
	b, err := fm.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("chaos: encode a clear: %w", err)
	}
	if _, ok := ofmods.Clears(b); !ok {
		return nil, errors.New("chaos: the encoded clear is not one flowstated recognises")
	}
	return b, nil
}

// proxyBundles sends bundles, each starting with its head messages, set's
// changes spread over them in key order (adds, or strict deletes for ""),
// then a barrier: nil once all are answered (the change is durable and on
// the switch, or held and to be replayed), the switch's refusal of the
// first bundle (nothing applied), or another error (outcome unknown: also
// a refusal after an earlier bundle committed).
func (w *writer) proxyBundles(ctx context.Context, heads [][]ofconn.Message, set map[string]string) error {
	if w.conn == nil {
		if err := w.dialProxy(ctx); err != nil {
			return err
		}
	}
	if w.connRelayed {
		w.relayDebt = true
	}
	bundles := make([][]ofconn.Message, len(heads))
	for i, h := range heads {
		bundles[i] = append([]ofconn.Message(nil), h...)
	}
	for i, ip := range sortedKeys(set) {
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
		b := i * len(bundles) / len(set)
		bundles[b] = append(bundles[b], p)
	}
	var err error
	for i, msgs := range bundles {
		if len(msgs) == 0 {
			continue
		}
		if err = w.conn.Bundle(ctx, msgs); err != nil {
			if i > 0 {
				// Not wrapped: a refusal once an earlier bundle
				// committed is an unknown outcome, not a refusal.
				err = fmt.Errorf("chaos: bundle %d of %d failed after the first committed: %v", i+1, len(bundles), err) //nolint:errorlint // see above
			}
			break
		}
	}
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

// dialProxy connects to the proxy socket and notes whether the connection
// may be the guard's relay (asked before and after: the guard accepts what
// waited in the socket's backlog once it relays).
func (w *writer) dialProxy(ctx context.Context) error {
	before := w.mayRelay != nil && w.mayRelay()
	c, err := ofconn.Dial(ctx, w.proxy, ofconn.Options{})
	if err != nil {
		return fmt.Errorf("chaos: dial the proxy: %w", err)
	}
	w.conn = c
	w.connRelayed = before || (w.mayRelay != nil && w.mayRelay())
	return nil
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
