package ofproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// Recorder takes a controller's state changes in place of the switch: a
// recording proxy hands it every change and answers the controller from its
// verdict.
type Recorder interface {
	// Apply makes one change of the controller: msgs are OpenFlow 1.5
	// FLOW_MOD, GROUP_MOD, METER_MOD and NXT_TLV_TABLE_MOD messages, with
	// the controller's xids, to be applied in order and all or nothing. It
	// returns nil once the change is durable and on the switch; a
	// *ofconn.BundleError when the switch refused messages of it (Index
	// into msgs), with nothing applied; any other error when the outcome
	// is unknown, and the proxy then drops the controller's connection, so
	// that the controller reconnects and installs everything again.
	Apply(ctx context.Context, msgs []ofconn.Message) error
}

// OpenFlow 1.5 numbers the recording proxy reads.
const (
	of15Version      = openflow15.VERSION
	typeError        = openflow15.Type_Error
	typeFlowMod      = openflow15.Type_FlowMod
	typeGroupMod     = openflow15.Type_GroupMod
	typeMeterMod     = openflow15.Type_MeterMod
	typeBundleCtrl   = openflow15.Type_BundleControl
	typeBundleAdd    = openflow15.Type_BundleAddMessage
	flowModMinLen    = 56 // through an empty OXM match (4 bytes, padded to 8)
	flowSendFlowRem  = 1 << 0
	bundleCtrlLen    = 16
	bundleAddHdrLen  = 16
	errorDataMax     = 0xffff - 16 // an error's header, type, code and experimenter id leave this much
	etBundleFailed   = openflow15.ET_BUNDLE_FAILED
	etBadRequest     = openflow15.ET_BAD_REQUEST
	brcBadLen        = openflow15.BRC_BAD_LEN
	etExperimenter   = 0xffff
	flowModAdd       = 0
	flowModModify    = 1
	flowModModStrict = 2
)

// kind says what the recording proxy does with a controller's message.
type kind int

const (
	passThrough kind = iota // to the switch, unchanged
	state                   // to the Recorder
	bundleCtrl
	bundleAdd
)

// classify tells state from the rest. A flow that expires or reports its
// removal is not desired state (it would be wrong to restore it after a
// restart), so it passes through unrecorded, as does everything that is not
// a flow, group, meter or TLV mapping change.
func classify(m []byte) kind {
	switch m[1] {
	case typeFlowMod:
		if len(m) < flowModMinLen {
			return state // the Recorder's switch refuses it, as vswitchd would
		}
		switch entry.FlowModCommand(m) {
		case flowModAdd, flowModModify, flowModModStrict:
			idle, hard := entry.FlowModTimeouts(m)
			if idle != 0 || hard != 0 || entry.FlowModFlags(m)&flowSendFlowRem != 0 {
				return passThrough
			}
		}
		return state
	case typeGroupMod, typeMeterMod:
		return state
	case typeBundleCtrl:
		return bundleCtrl
	case typeBundleAdd:
		return bundleAdd
	case typeExperimenter:
		if ofconn.IsTLVTableMod(m) {
			return state
		}
	}
	return passThrough
}

// openBundle is a controller's bundle the proxy holds until it commits.
type openBundle struct {
	flags  uint16
	closed bool
	msgs   []ofconn.Message
	adds   [][]byte // the BUNDLE_ADD of each message: vswitchd's errors quote it
}

// recorder is the controller-facing half of a recording session: it owns
// the bundles and the pending changes, and runs on the session's
// controller-to-switch pump, but for the standalone changes its applier
// applies (applier.go).
type recorder struct {
	s       *session
	rec     Recorder
	a       *applier
	bundles map[uint32]*openBundle
	held    int              // bytes of every open bundle's messages
	pending []ofconn.Message // standalone changes not yet handed to the applier
	// pendingBytes are pending's bytes.
	pendingBytes int
	// committed: a bundle of the session committed; told: Installed was
	// called.
	committed, told bool
}

// maxHeld bounds what one connection's open bundles may hold: about five
// times a million-flow pipeline's messages. Past it the bundle is dropped
// with OFPBFC_MSG_TOO_MANY, so a runaway controller costs only itself.
const maxHeld = 1 << 30

// errUnknownOutcome ends a session whose change was neither refused nor
// confirmed: the store failed, or the switch may or may not hold it.
var errUnknownOutcome = errors.New("ofproxy: change not confirmed")

// standalone applies standalone changes. The switch takes standalone
// messages one by one, so one refused message must not undo the others:
// refused ones get their OFPT_ERROR and the rest is applied again without
// them.
func (r *recorder) standalone(ctx context.Context, msgs []ofconn.Message) error {
	for len(msgs) > 0 {
		be, err := r.apply(ctx, msgs)
		if be == nil {
			return err
		}
		if msgs, err = r.refuse(msgs, be, len(msgs)); err != nil {
			return err
		}
	}
	return nil
}

// apply hands msgs to the Recorder: a nil error, the switch's refusal, or
// errUnknownOutcome.
func (r *recorder) apply(ctx context.Context, msgs []ofconn.Message) (*ofconn.BundleError, error) {
	err := r.rec.Apply(ctx, msgs)
	r.s.p.stats.applied(msgs, err)
	if err == nil {
		return nil, nil
	}
	var be *ofconn.BundleError
	if !errors.As(err, &be) {
		return nil, fmt.Errorf("%w: %w", errUnknownOutcome, err)
	}
	for _, f := range be.Failed {
		if f.Index < 0 || f.Index >= len(msgs) {
			return nil, fmt.Errorf("%w: refusal of no message of the change: %w", errUnknownOutcome, err)
		}
	}
	return be, nil
}

// refuse answers the standalone messages among msgs[:n] that be names
// with their OFPT_ERRORs, and returns msgs without them.
func (r *recorder) refuse(msgs []ofconn.Message, be *ofconn.BundleError, n int) ([]ofconn.Message, error) {
	refused := make(map[int]bool)
	for _, f := range be.Failed {
		if f.Index < n {
			refused[f.Index] = true
			if err := r.s.reply(errorFor(msgs[f.Index], f)); err != nil {
				return nil, err
			}
		}
	}
	rest := msgs[:0:0]
	for i, m := range msgs {
		if !refused[i] {
			rest = append(rest, m)
		}
	}
	return rest, nil
}

// commit applies bundle b, together with the standalone changes that came
// just before its open (see fromController): they go first, one change
// with it. A refused standalone message is answered and dropped, and the
// rest tried again; a refused message of the bundle fails the bundle, and
// the standalone changes are then applied alone.
func (r *recorder) commit(ctx context.Context, m []byte, b *openBundle) error {
	pre := r.pending
	r.pending, r.pendingBytes = nil, 0
	for {
		msgs := append(pre[:len(pre):len(pre)], b.msgs...)
		if len(msgs) == 0 {
			break
		}
		be, err := r.apply(ctx, msgs)
		if err != nil {
			return err
		}
		if be == nil {
			break
		}
		n := len(pre)
		if slices.ContainsFunc(be.Failed, func(f ofconn.AddError) bool { return f.Index < n }) {
			if pre, err = r.refuse(pre, be, n); err != nil {
				return err
			}
			continue
		}
		if err := r.standalone(ctx, pre); err != nil {
			return err
		}
		// As vswitchd: the failing message's error, then the commit's.
		for _, f := range be.Failed {
			if err := r.s.reply(errorFor(b.adds[f.Index-n], f)); err != nil {
				return err
			}
		}
		return r.s.reply(errorMsg(m, etBundleFailed, openflow15.BFC_MSG_FAILED, 0))
	}
	r.committed = true
	return r.s.reply(bundleReply(m, openflow15.OFPBCT_COMMIT_REPLY))
}

// bundleControl answers one BUNDLE_CONTROL as vswitchd would, committing
// through the Recorder.
func (r *recorder) bundleControl(ctx context.Context, m []byte) error {
	if len(m) < bundleCtrlLen {
		return r.s.reply(errorMsg(m, etBadRequest, brcBadLen, 0))
	}
	id, typ, flags := binary.BigEndian.Uint32(m[8:12]), binary.BigEndian.Uint16(m[12:14]), binary.BigEndian.Uint16(m[14:16])
	b := r.bundles[id]
	fail := func(code uint16) error { return r.s.reply(errorMsg(m, etBundleFailed, code, 0)) }
	switch typ {
	case openflow15.OFPBCT_OPEN_REQUEST:
		if b != nil {
			// vswitchd answers BAD_ID and drops the bundle.
			r.drop(id)
			return fail(openflow15.BFC_BAD_ID)
		}
		r.bundles[id] = &openBundle{flags: flags}
	case openflow15.OFPBCT_CLOSE_REQUEST:
		if b == nil {
			return fail(openflow15.BFC_BAD_ID)
		}
		if code := r.misuse(id, b, flags); code != 0 {
			return fail(code)
		}
		b.closed = true
	case openflow15.OFPBCT_COMMIT_REQUEST:
		if b == nil {
			return fail(openflow15.BFC_BAD_ID)
		}
		// A commit ends the bundle whatever its outcome, as in vswitchd.
		r.drop(id)
		if flags != b.flags {
			return fail(openflow15.BFC_BAD_FLAGS)
		}
		return r.commit(ctx, m, b)
	case openflow15.OFPBCT_DISCARD_REQUEST:
		if b == nil {
			return fail(openflow15.BFC_BAD_ID)
		}
		r.drop(id)
	default:
		return fail(openflow15.BFC_BAD_TYPE)
	}
	return r.s.reply(bundleReply(m, typ+1))
}

// misuse is the error code of a message that is wrong about open bundle b
// (closed already, other flags), 0 when it is right. As vswitchd, such a
// mistake about the bundle itself drops it.
func (r *recorder) misuse(id uint32, b *openBundle, flags uint16) uint16 {
	if !b.closed && flags == b.flags {
		return 0
	}
	r.drop(id)
	if b.closed {
		return openflow15.BFC_BUNDLE_CLOSED
	}
	return openflow15.BFC_BAD_FLAGS
}

// bundleAdd holds one BUNDLE_ADD_MESSAGE's message until the commit. As
// in vswitchd, an add to an unknown bundle opens it.
func (r *recorder) bundleAdd(m []byte) error {
	if len(m) < bundleAddHdrLen+8 {
		return r.s.reply(errorMsg(m, etBadRequest, brcBadLen, 0))
	}
	id, flags := binary.BigEndian.Uint32(m[8:12]), binary.BigEndian.Uint16(m[14:16])
	inner := m[bundleAddHdrLen:]
	n := int(binary.BigEndian.Uint16(inner[2:4]))
	fail := func(code uint16) error { return r.s.reply(errorMsg(m, etBundleFailed, code, 0)) }
	switch {
	case n < 8 || n > len(inner):
		return fail(openflow15.BFC_MSG_BAD_LEN)
	case binary.BigEndian.Uint32(inner[4:8]) != binary.BigEndian.Uint32(m[4:8]):
		return fail(openflow15.BFC_MSG_BAD_XID)
	case inner[0] != of15Version || classify(inner[:n]) != state:
		// Packet-outs, port mods and expiring flows in a bundle would
		// need the switch's own bundle; refuse rather than apply them
		// outside its atomicity.
		return fail(openflow15.BFC_MSG_UNSUP)
	}
	b := r.bundles[id]
	if b == nil {
		b = &openBundle{flags: flags}
		r.bundles[id] = b
	} else if code := r.misuse(id, b, flags); code != 0 {
		return fail(code)
	}
	if r.held+len(m) > maxHeld {
		r.drop(id)
		return fail(openflow15.BFC_MSG_TOO_MANY)
	}
	r.held += len(m)
	b.msgs = append(b.msgs, ofconn.Message(inner[:n:n]))
	b.adds = append(b.adds, m)
	return nil
}

// drop forgets bundle id and what it held.
func (r *recorder) drop(id uint32) {
	if b := r.bundles[id]; b != nil {
		for _, m := range b.adds {
			r.held -= len(m)
		}
		delete(r.bundles, id)
	}
}

// bundleReply answers a BUNDLE_CONTROL request as vswitchd does: the reply
// type typ, the request's xid and bundle id, no flags and no properties.
func bundleReply(req []byte, typ uint16) []byte {
	b := make([]byte, bundleCtrlLen)
	copy(b, req[:12])
	binary.BigEndian.PutUint16(b[2:4], bundleCtrlLen)
	binary.BigEndian.PutUint16(b[12:14], typ)
	return b
}

// errorFor is the OFPT_ERROR vswitchd sent for a message, re-addressed to
// req, the controller's message (or its BUNDLE_ADD) that carried it.
func errorFor(req []byte, f ofconn.AddError) []byte {
	return errorMsg(req, f.Type, f.Code, f.Experimenter)
}

// errorMsg builds an OpenFlow 1.5 OFPT_ERROR answering req. Like vswitchd
// it quotes the whole request, as far as a message's 16-bit length allows.
func errorMsg(req []byte, typ, code uint16, experimenter uint32) []byte {
	data := req[:min(len(req), errorDataMax)]
	var body []byte
	if typ == etExperimenter {
		body = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, typ), code)
		body = binary.BigEndian.AppendUint32(body, experimenter)
	} else {
		body = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, typ), code)
	}
	b := make([]byte, 8, 8+len(body)+len(data))
	b[0], b[1] = of15Version, typeError
	copy(b[4:8], req[4:8])
	b = append(append(b, body...), data...)
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	return b
}
