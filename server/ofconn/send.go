package ofconn

import (
	"bufio"
	"context"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// Send sends one message that cannot be bundled (METER_MOD, for example) followed by a barrier, and waits for
// the barrier reply. It returns the switch's rejection as a *OFError, ErrTooLarge or ErrMalformed for a message
// it cannot send, and an error matching ErrClosed when the connection died.
func (c *Conn) Send(ctx context.Context, msg Message) error {
	if err := msg.check(MaxMessage); err != nil {
		return fmt.Errorf("ofconn: send: %w", err)
	}
	xid := c.nextXids(2)
	w := c.register(xid, 2)
	defer c.unregister(w)
	foreign := c.foreign.Load()
	var hdr [headerLen]byte
	barrier := controlMsg(openflow15.Type_BarrierRequest, xid+1, nil)
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		copy(hdr[:4], msg[:4])
		be.PutUint32(hdr[4:], xid)
		if _, err := bw.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := bw.Write(msg[headerLen:]); err != nil {
			return err
		}
		_, err := bw.Write(barrier)
		return err
	}); err != nil {
		return fmt.Errorf("ofconn: send %s: %w", TypeName(msg.Type()), err)
	}
	c.stats.countSent(msg.Type(), len(msg))
	c.stats.countSent(openflow15.Type_BarrierRequest, len(barrier))
	var rejected *OFError
	for {
		f, err := c.recv(ctx, w)
		if err != nil {
			return fmt.Errorf("ofconn: send %s: %w", TypeName(msg.Type()), err)
		}
		switch {
		case f[1] == openflow15.Type_Error && rejected == nil:
			rejected = decodeError(f)
		case f[1] == openflow15.Type_BarrierReply && frameXid(f) == xid+1:
			if rejected != nil {
				return rejected
			}
			if err := c.foreignSince(foreign); err != nil {
				return fmt.Errorf("ofconn: send %s: %w", TypeName(msg.Type()), err)
			}
			return nil
		}
	}
}

// Barrier waits until the switch has processed every message sent before it.
func (c *Conn) Barrier(ctx context.Context) error {
	xid := c.nextXids(1)
	w := c.register(xid, 1)
	defer c.unregister(w)
	msg := controlMsg(openflow15.Type_BarrierRequest, xid, nil)
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(msg)
		return err
	}); err != nil {
		return fmt.Errorf("ofconn: barrier: %w", err)
	}
	c.stats.countSent(openflow15.Type_BarrierRequest, len(msg))
	for {
		f, err := c.recv(ctx, w)
		if err != nil {
			return fmt.Errorf("ofconn: barrier: %w", err)
		}
		switch f[1] {
		case openflow15.Type_BarrierReply:
			return nil
		case openflow15.Type_Error:
			return decodeError(f)
		}
	}
}
