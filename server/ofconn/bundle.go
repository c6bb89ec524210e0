package ofconn

import (
	"bufio"
	"context"
	"fmt"
	"slices"

	"antrea.io/libOpenflow/openflow15"
)

const (
	// bundleFlags go on the OPEN, every ADD, and the COMMIT or DISCARD: OVS discards a bundle whose adds carry
	// other flags than its OPEN, and later adds then silently open a new one.
	bundleFlags = openflow15.BF_ORDERED | openflow15.BF_ATOMIC
	// bundleBatch is about how many bytes of adds are written per hold of the write lock.
	bundleBatch = 128 << 10
	// maxBundle bounds the messages of one bundle so that its xid range cannot wrap.
	maxBundle = 1 << 30
)

// Bundle applies msgs atomically, in order, in one OpenFlow 1.5 bundle (see the package documentation for the
// protocol). It returns nil when OVS committed the bundle, a *BundleError when OVS rejected any message (nothing
// is installed), ErrTooLarge or ErrMalformed when a message cannot be bundled (nothing is sent), and an error
// matching ErrClosed when the connection died. If ctx ends before the commit was sent, the bundle is discarded;
// if it ends after, the error says the outcome is unknown and the caller should dump to find out.
func (c *Conn) Bundle(ctx context.Context, msgs []Message) error {
	for i, m := range msgs {
		if err := m.check(MaxBundledMessage); err != nil {
			return fmt.Errorf("ofconn: bundle message %d: %w", i, err)
		}
	}
	return c.BundleStream(ctx, len(msgs), func(emit func(Message) error) error {
		for _, m := range msgs {
			if err := emit(m); err != nil {
				return err
			}
		}
		return nil
	})
}

// BundleStream is Bundle for n messages made one at a time: produce calls emit once for each, in order, and
// may reuse a message's memory as soon as emit returns, so a bundle of a million flows never sits in memory
// (the replay reads them from the store as the switch takes them). A message that cannot be bundled, an error
// of produce, or a count other than n discards the bundle: nothing is installed. BundleError indexes count
// the messages in emit order.
func (c *Conn) BundleStream(ctx context.Context, n int, produce func(emit func(Message) error) error) error {
	return c.bundleStream(ctx, n, true, produce)
}

// BundleStreamUpTo is BundleStream for at most n messages, when the producer learns how many as it goes (a
// write whose changes go to the switch while the store decides them). Fewer than n is not an error; BundleError
// indexes still count the messages in emit order.
func (c *Conn) BundleStreamUpTo(ctx context.Context, n int, produce func(emit func(Message) error) error) error {
	return c.bundleStream(ctx, n, false, produce)
}

func (c *Conn) bundleStream(ctx context.Context, n int, exact bool, produce func(emit func(Message) error) error) error {
	if n == 0 {
		return nil
	}
	if n > maxBundle {
		return fmt.Errorf("%w: %d messages in one bundle, the limit is %d", ErrTooLarge, n, maxBundle)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ofconn: bundle: %w", err)
	}

	// xids: OPEN, one per add, BARRIER, then COMMIT or DISCARD.
	count := uint32(n)
	base := c.nextXids(count + 3)
	openXid, barrierXid, endXid := base, base+count+1, base+count+2
	id := c.bundleID.Add(1)
	w := c.register(base, count+3)
	defer c.unregister(w)

	open, err := bundleCtrlMsg(openXid, id, openflow15.BCT_OPEN_REQUEST, bundleFlags)
	if err != nil {
		return fmt.Errorf("ofconn: encode bundle open: %w", err)
	}
	var byType [256]uint64
	bytes := len(open)
	// Adds are framed into buf and written a batch at a time, one hold of the write lock each, so echo
	// traffic and other callers get a turn during a large bundle.
	buf := append(make([]byte, 0, bundleBatch+MaxMessage), open...)
	written, sent := false, 0
	flush := func() error {
		err := c.write(ctx, false, func(bw *bufio.Writer) error {
			_, err := bw.Write(buf)
			return err
		})
		written, buf = true, buf[:0]
		return err
	}
	emit := func(m Message) error {
		if sent == n {
			return fmt.Errorf("ofconn: bundle: more messages than the %d announced", n)
		}
		if err := m.check(MaxBundledMessage); err != nil {
			return fmt.Errorf("ofconn: bundle message %d: %w", sent, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		xid := base + 1 + uint32(sent)
		at := len(buf)
		buf = append(buf, make([]byte, bundleAddHeaderLen+headerLen)...)
		putBundleAddHeader(buf[at:at+bundleAddHeaderLen], len(m), xid, id, bundleFlags)
		// The inner message's header with its xid replaced; the caller's slice stays untouched.
		copy(buf[at+bundleAddHeaderLen:], m[:4])
		be.PutUint32(buf[at+bundleAddHeaderLen+4:], xid)
		buf = append(buf, m[headerLen:]...)
		byType[m[1]]++
		bytes += bundleAddHeaderLen + len(m)
		sent++
		if len(buf) >= bundleBatch {
			return flush()
		}
		return nil
	}
	err = produce(emit)
	if err == nil && exact && sent != n {
		err = fmt.Errorf("ofconn: bundle: %d messages made, %d announced", sent, n)
	}
	if err != nil {
		if written {
			c.abandonBundle(id)
		}
		return fmt.Errorf("ofconn: bundle: %w", err)
	}
	// One message: the COMMIT follows the ADD in the same write, instead of a barrier and a second round trip.
	// A refused ADD leaves the bundle empty, so the COMMIT installs nothing (package documentation, step 4).
	one := sent == 1
	tail := controlMsg(openflow15.Type_BarrierRequest, barrierXid, nil)
	if one {
		if tail, err = bundleCtrlMsg(endXid, id, openflow15.BCT_COMMIT_REQUEST, bundleFlags); err != nil {
			return fmt.Errorf("ofconn: encode bundle commit: %w", err)
		}
	}
	buf = append(buf, tail...)
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(buf)
		return err
	}); err != nil {
		// The connection is dead (write failed or had died before); with one message the COMMIT may have
		// gone out, and like every error matching ErrClosed this one leaves the outcome to a dump.
		return fmt.Errorf("ofconn: bundle: %w", err)
	}
	bytes += len(tail)
	for t, k := range byType {
		if k > 0 {
			c.stats.sent[t].Add(k)
		}
	}
	c.stats.sent[openflow15.Type_BundleAddMessage].Add(uint64(sent))
	c.stats.sent[openflow15.Type_BundleControl].Add(1)
	c.stats.bytesSent.Add(uint64(bytes))
	if one {
		c.stats.sent[openflow15.Type_BundleControl].Add(1)
		return c.verdict(ctx, w, endXid, addIndex(base, n), true)
	}
	c.stats.countSent(openflow15.Type_BarrierRequest, 0)

	// Collect the verdict on every add: OVS answers each message in order, so errors of adds precede the
	// barrier reply.
	var failed []AddError
	indexOf := addIndex(base, n)
	for done := false; !done; {
		f, err := c.recv(ctx, w)
		if err != nil {
			c.abandonBundle(id)
			return fmt.Errorf("ofconn: bundle: %w", err)
		}
		switch xid := frameXid(f); {
		case f[1] == openflow15.Type_Error:
			failed = append(failed, decodeError(f).addError(indexOf(xid)))
		case f[1] == openflow15.Type_BarrierReply && xid == barrierXid:
			done = true
		}
	}

	if len(failed) > 0 {
		c.stats.bundlesBad.Add(1)
		c.discard(ctx, w, id, endXid)
		return &BundleError{Failed: failed}
	}
	return c.commit(ctx, w, id, endXid, indexOf)
}

// commit sends the COMMIT and waits for its verdict. A commit that fails (e.g. OFPFMFC_TABLE_FULL) arrives as
// the failing add's error followed by OFPBFC_MSG_FAILED on the commit's xid; OVS has then rolled back.
func (c *Conn) commit(ctx context.Context, w *waiter, id, xid uint32, indexOf func(uint32) int) error {
	msg, err := bundleCtrlMsg(xid, id, openflow15.BCT_COMMIT_REQUEST, bundleFlags)
	if err != nil {
		return fmt.Errorf("ofconn: encode bundle commit: %w", err)
	}
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(msg)
		return err
	}); err != nil {
		return fmt.Errorf("ofconn: bundle commit, outcome unknown: %w", err)
	}
	c.stats.countSent(openflow15.Type_BundleControl, len(msg))
	return c.verdict(ctx, w, xid, indexOf, false)
}

// addIndex maps the xid of an add of the bundle whose OPEN has xid base, of at most n messages, to the add's
// index; -1 for any other xid (the OPEN's, the COMMIT's).
func addIndex(base uint32, n int) func(uint32) int {
	return func(xid uint32) int {
		if i := int(xid - base - 1); xid != base && i < n {
			return i
		}
		return -1
	}
}

// verdict waits for the answer to the COMMIT with xid, collecting the errors of adds that come before it. one
// says the COMMIT went in the same write as the bundle's one ADD: an error of that add followed by a successful
// COMMIT is then a refusal at add time, and the commit was of an empty bundle.
func (c *Conn) verdict(ctx context.Context, w *waiter, xid uint32, indexOf func(uint32) int, one bool) error {
	var addErrs []AddError
	for {
		f, err := c.recv(ctx, w)
		if err != nil {
			return fmt.Errorf("ofconn: bundle commit sent, outcome unknown: %w", err)
		}
		switch {
		case f[1] == openflow15.Type_Error && frameXid(f) == xid:
			c.stats.bundlesBad.Add(1)
			failed := addErrs
			if len(failed) == 0 {
				failed = []AddError{decodeError(f).addError(-1)}
			}
			return &BundleError{Failed: failed, AtCommit: true}
		case f[1] == openflow15.Type_Error:
			addErrs = append(addErrs, decodeError(f).addError(indexOf(frameXid(f))))
		case f[1] == openflow15.Type_BundleControl && frameXid(f) == xid:
			if len(addErrs) > 0 && one && !slices.ContainsFunc(addErrs, func(e AddError) bool { return e.Index < 0 }) {
				c.stats.bundlesBad.Add(1)
				return &BundleError{Failed: addErrs}
			}
			if len(addErrs) > 0 {
				// Not seen from OVS: errors of adds with a successful commit. Say so rather than hide it.
				c.stats.bundlesBad.Add(1)
				return &BundleError{Failed: addErrs, AtCommit: true, Committed: true}
			}
			c.stats.bundlesOK.Add(1)
			return nil
		}
	}
}

// discard sends a DISCARD for a bundle that will not be committed and waits for OVS to drop it, so that the
// switch is back to its previous state when Bundle returns. Errors are logged only: OVS also drops open bundles
// when idle and when the connection closes.
func (c *Conn) discard(ctx context.Context, w *waiter, id, xid uint32) {
	msg, err := bundleCtrlMsg(xid, id, openflow15.BCT_DISCARD_REQUEST, bundleFlags)
	if err != nil {
		c.log.Warn("ofconn: encode bundle discard", "err", err)
		return
	}
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(msg)
		return err
	}); err != nil {
		return
	}
	c.stats.countSent(openflow15.Type_BundleControl, len(msg))
	for {
		f, err := c.recv(ctx, w)
		if err != nil {
			c.log.Debug("ofconn: bundle discard not confirmed", "bundle", id, "err", err)
			return
		}
		if frameXid(f) != xid {
			continue
		}
		if f[1] == openflow15.Type_Error {
			// An OPEN that failed leaves nothing to discard (OFPBFC_BAD_ID).
			c.log.Debug("ofconn: bundle discard refused", "bundle", id, "error", decodeError(f).Name)
		}
		return
	}
}

// abandonBundle discards a bundle whose caller is gone, without waiting: through auxLoop, so that it queues
// behind whatever part of the bundle was written.
func (c *Conn) abandonBundle(id uint32) {
	msg, err := bundleCtrlMsg(c.nextXids(1), id, openflow15.BCT_DISCARD_REQUEST, bundleFlags)
	if err == nil && !c.queueAux(msg) {
		c.log.Warn("ofconn: bundle discard dropped, writer busy; OVS drops the bundle when idle", "bundle", id)
	}
}
