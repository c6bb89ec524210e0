package write

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofmods"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// recorder records what one controller behind the OpenFlow proxy
// (server/ofproxy) installs, as module's declarations on one bridge. A
// change of the controller (a bundle, or the standalone messages between
// two barriers) is one write request of the bridge's queue: package ofmods
// turns its messages into the module's net change inside the write's store
// transaction, and group commit stores it and sends it to the switch in one
// bundle, as it does a Put. So a controller that deletes everything and
// installs it again sends nothing to the switch when nothing changed, even
// when it installs in several changes (resync.go).
type recorder struct {
	ws             *Writes
	bridge, module string

	// mu serialises the module's changes with the end of its resync.
	mu sync.Mutex
	// resync is the controller's start-over under way, nil if none
	// (resync.go); readyAtEnd: its readiness waits for the end.
	resync     *resync
	readyAtEnd bool
	closed     bool
}

// Recorder is a controller behind the OpenFlow proxy recorded as one
// module: what the proxy calls (ofproxy.Recorder) and what the server tells
// it of the controller's session. An interface, so that the server holds no
// type of this room.
type Recorder interface {
	ofproxy.Recorder
	// Connected: a controller connected through the bridge's proxy.
	Connected()
	// Ready: the controller's first install is complete (the cold-boot
	// gate's readiness).
	Ready() error
	// Close: the proxy stops.
	Close()
}

// Recorder returns the Recorder of module on bridge; bridge must be one
// the engine restores.
func (ws *Writes) Recorder(bridge, module string) (Recorder, error) {
	if _, err := ws.bridge(bridge); err != nil {
		return nil, err
	}
	if err := entry.ValidateName("module", module); err != nil {
		return nil, fmt.Errorf("restore: proxy: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return &recorder{ws: ws, bridge: bridge, module: module}, nil
}

// Apply makes one change of the controller (see ofproxy.Recorder): nil
// once it is stored and, when the bridge is live, on the switch (a bridge
// that is not live, held or disconnected, gets it from its replay before it
// forwards, as every write); a
// *ofconn.BundleError naming the message vswitchd refused, or that would
// break another module's ownership, with nothing stored or applied; any
// other error when the outcome is unknown.
func (r *recorder) Apply(ctx context.Context, msgs []ofconn.Message) error {
	raw := make([][]byte, len(msgs))
	for i, m := range msgs {
		raw[i] = m
	}
	// A TLV table mod is no entry (tlv.go): the change goes in runs, in
	// order, as the switch takes standalone messages.
	for start := 0; start < len(raw); {
		if ofconn.IsTLVTableMod(raw[start]) {
			if err := r.applyTLV(ctx, raw, start); err != nil {
				return err
			}
			start++
			continue
		}
		end := start + 1
		for end < len(raw) && !ofconn.IsTLVTableMod(raw[end]) {
			end++
		}
		if err := r.applyEntries(ctx, raw[start:end]); err != nil {
			var be *ofconn.BundleError
			if errors.As(err, &be) {
				for k := range be.Failed {
					be.Failed[k].Index += start
				}
			}
			return err
		}
		start = end
	}
	return nil
}

// applyEntries is one write of the bridge's queue for raw, the flow, group
// and meter messages of a change (see Apply). A clear among them starts or
// restarts the module's resync instead of deleting now (resync.go).
func (r *recorder) applyEntries(ctx context.Context, raw [][]byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs, from, cleared := r.clears(raw)
	if len(msgs) == 0 && !cleared {
		return nil
	}
	// During a resync every change, a clear alone too, first deletes from
	// the store the flows the clear removed (sweepLocked), and after its
	// own change the groups and meters no stored flow uses any more
	// (sweepUnusedLocked): the barrier reply after it must not leave them
	// stored.
	var (
		ch *ofmods.Change
		sw *sweep
		rs = r.resync
	)
	req := &writeReq{module: r.module}
	req.op = func(w *store.Writer) (store.Result, error) {
		var err error
		if sw, err = r.sweepLocked(w, rs); err != nil {
			return store.Result{}, err
		}
		ch = &ofmods.Change{}
		if len(msgs) == 0 {
			return store.Result{}, r.sweepUnusedLocked(w, sw, nil)
		}
		st := writerEntries{w, r.bridge, r.module}
		in, err := r.readdsLocked(st, msgs)
		if err != nil {
			return store.Result{}, err
		}
		ch, err = ofmods.Apply(r.module, st, in)
		if err != nil {
			return store.Result{}, err
		}
		deferred, err := r.holdLocked(w, st, ch, sw)
		if err != nil {
			return store.Result{}, err
		}
		// The owner reads declared after the op (quarantine): the op
		// runs on the owner's goroutine. A held change keeps its
		// quarantine until it goes to the switch.
		req.declared = ch.Put
		if len(deferred) > 0 {
			req.declared = slices.DeleteFunc(slices.Clone(ch.Put), func(e entry.Entry) bool { return deferred[plan.Key(e.Kind, e.ID)] })
		}
		res, err := storeChange(w, r.bridge, r.module, ch)
		if err == nil {
			err = r.sweepUnusedLocked(w, sw, ch)
		}
		return withoutDeferred(res, deferred), err
	}
	res, err := r.ws.submit(ctx, r.bridge, req)
	if err == nil {
		sw.commit() // stored: its sweep is the resync's
	}
	if err == nil && res.unknown != nil {
		// Stored, but the switch may not hold it: the controller must not
		// get a reply that says it does. Its connection is dropped, and it
		// installs again once the replay settled the bridge. Its change
		// is stored: the resync counts it, and its timer runs.
		r.declaredLocked(ch)
		return fmt.Errorf("restore: proxy %s/%s: %w: %w", r.bridge, r.module, ErrOutcomeUnknown, res.unknown)
	}
	if err == nil {
		r.declaredLocked(ch)
		return nil
	}
	if cleared {
		// The clear stands: the resync began with it, whatever became of
		// the rest.
		r.declaredLocked(nil)
	}
	if be := r.refusal(err, ch, msgs); be != nil {
		for k := range be.Failed {
			be.Failed[k].Index = from[be.Failed[k].Index]
		}
		return be
	}
	return fmt.Errorf("restore: proxy %s/%s: %w", r.bridge, r.module, err)
}

// Ready marks the module ready for the cold-boot gate: its controller's
// first install is complete. During a resync the install goes on in more
// changes: readiness waits for its end. A module ready for this boot
// already is left as it is (a controller reconnects after every vswitchd
// restart).
func (r *recorder) Ready() error {
	r.mu.Lock()
	if r.resync != nil {
		r.readyAtEnd = true
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	return r.markReady()
}

func (r *recorder) markReady() error {
	if ready, err := r.ws.cfg.Rooms.Ready(r.module); err == nil && ready {
		return nil
	}
	return r.ws.cfg.Gate.MarkReady(r.module)
}

// writerEntries is ofmods' view of the store inside a write transaction.
type writerEntries struct {
	w              *store.Writer
	bridge, module string
}

func (s writerEntries) Get(kind entry.Kind, id []byte) (entry.Entry, bool, error) {
	return s.w.Get(s.bridge, kind, id)
}

func (s writerEntries) Each(kind entry.Kind, fn func(entry.Entry) error) error {
	return s.w.Each(s.bridge, s.module, kind, fn)
}

// storeChange writes a controller's net change: its puts, then its
// deletes (a group that flows stop using in the same change goes after
// them).
func storeChange(w *store.Writer, bridge, module string, ch *ofmods.Change) (store.Result, error) {
	var res store.Result
	if len(ch.Put) > 0 {
		var err error
		if res, err = w.Put(bridge, module, ch.Put); err != nil {
			return res, &changeError{from: ch.PutFrom, err: err}
		}
	}
	if len(ch.Delete) > 0 {
		del, err := w.Delete(bridge, module, ch.Delete)
		if err != nil {
			return res, &changeError{from: ch.DeleteFrom, err: err}
		}
		res.Removed = append(res.Removed, del.Removed...)
	}
	return res, nil
}

// changeError is the store's refusal of part of a controller's change;
// from maps the entry the error names to the message that decided it.
type changeError struct {
	from []int
	err  error
}

func (e *changeError) Error() string { return e.err.Error() }
func (e *changeError) Unwrap() error { return e.err }

// refusal turns the refusal of a controller's change into the
// *ofconn.BundleError the proxy answers it with (the failing message's
// index into msgs), or nil when err is no refusal: the switch refused an
// entry (its error as the switch sent it), ofmods refused a message as
// vswitchd would, or the store refused an entry another module owns or
// uses.
func (r *recorder) refusal(err error, ch *ofmods.Change, msgs [][]byte) *ofconn.BundleError {
	var (
		mr *ofmods.Refusal
		ce *changeError
		ee *errdefs.EntryError
		be *ofconn.BundleError
		oe *ofconn.OFError
	)
	one := func(i int, typ, code uint16, exp uint32, name string) *ofconn.BundleError {
		if i < 0 || i >= len(msgs) {
			return nil
		}
		return &ofconn.BundleError{Failed: []ofconn.AddError{{Index: i, Type: typ, Code: code, Experimenter: exp, Name: name}}}
	}
	switch {
	case errors.As(err, &mr):
		typ, code := mr.Type, mr.Code
		if typ == 0 {
			// Not decodable here: vswitchd's own checks would have
			// named the fault; the controller gets a permission error
			// and the log the reason.
			typ, code = openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM
		}
		r.ws.log.Warn("proxy: a controller's message refused", "bridge", r.bridge, "module", r.module, "message", mr.Index, "err", mr.Err)
		return one(mr.Index, typ, code, 0, "")
	case errors.As(err, &ce) && errors.As(err, &ee):
		if ee.Index < 0 || ee.Index >= len(ce.from) {
			return nil
		}
		i := ce.from[ee.Index]
		r.ws.log.Warn("proxy: a controller's change refused by the store", "bridge", r.bridge, "module", r.module, "message", i, "err", err)
		typ, code := permissionError(msgs[i])
		var ur *store.UndeclaredRefError
		if errors.As(err, &ur) {
			// What vswitchd answers for a flow that uses a group or a
			// meter it does not have.
			typ, code = openflow15.ET_BAD_ACTION, openflow15.BAC_BAD_OUT_GROUP
			if ur.Ref.Kind == entry.KindMeter {
				typ, code = openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER
			}
		}
		return one(i, typ, code, 0, "")
	case ch != nil && errors.As(err, &ee) && ee.Index >= 0 && ee.Index < len(ch.PutFrom):
		i := ch.PutFrom[ee.Index]
		switch {
		case errors.As(err, &be):
			for _, f := range be.Failed {
				if f.Index >= 0 {
					return one(i, f.Type, f.Code, f.Experimenter, f.Name)
				}
			}
		case errors.As(err, &oe):
			return one(i, oe.Type, oe.Code, oe.Experimenter, oe.Name)
		}
	}
	return nil
}

// permissionError is the OFPT_ERROR type and code vswitchd sends for a
// change it does not permit, by the message's type.
func permissionError(m []byte) (typ, code uint16) {
	switch m[1] {
	case openflow15.Type_FlowMod:
		return openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM
	case openflow15.Type_GroupMod:
		return openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_EPERM
	}
	return openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM
}

// Connected tells that the controller connected through flowstated's proxy:
// a learning of the bridge not yet started is moot (its writes go to the
// store, and its reinstall reconciles).
func (r *recorder) Connected() { r.ws.cfg.Rooms.ControllerConnected(r.bridge, r.module) }
