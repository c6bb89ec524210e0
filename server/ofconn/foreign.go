package ofconn

import (
	"fmt"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Foreign messages: a message framed in another OpenFlow version than the
// connection's 1.5.
//
// OVS answers a multipart request it fails to decode (a flow monitor
// request: OpenFlow 1.5's form is unknown to OVS before 3.0, and one with
// flags it does not take is refused by every version up to at least 3.5)
// with an error built from the wrong offset of the request
// (handle_flow_monitor_request passes the body, not the header, to
// ofconn_send_error): the "request" it answers has version 0, so the error
// goes out framed in OpenFlow 1.0, with an xid read from the request's
// match. It names no request. The header's length field frames a message
// the same way in every version, so the stream stays in step: the reader
// counts such a message and reads on, instead of dropping a connection that
// the redial would only lose again (a reconnect storm). An operation that
// waits for a barrier after its request (Send, MonitorFlows) and sees one
// arrive meanwhile returns a *ForeignError.

// ForeignError says the switch answered a request with a message framed in
// another OpenFlow version (an OpenFlow 1.0 error, from OVS), which names no
// request: the switch did not take the request. It matches
// errdefs.ErrInvalidArgument, as a rejection does; operations wrap it with
// their prefix.
type ForeignError struct {
	// Version and Type are the message's OpenFlow version and type bytes.
	Version, Type uint8
	// Desc describes the message ("OpenFlow 1.0 ERROR NXET_VENDOR, Nicira type 1 code 518").
	Desc string
}

func (e *ForeignError) Error() string {
	return "the switch answered with a message of another OpenFlow version: " + e.Desc
}

// Is makes a foreign answer match errdefs.ErrInvalidArgument.
func (e *ForeignError) Is(target error) bool { return target == errdefs.ErrInvalidArgument }

// errUnanswered: the barrier after a request was answered, the request not.
var errUnanswered error = &kindError{"ofconn: the switch answered the barrier after the request, not the request", errdefs.ErrInvalidArgument}

// Wire values of OpenFlow 1.0 errors from OVS (lib/ofp-errors.c, ofperr_encode_msg__).
const (
	of10TypeError  = 1
	nxetVendor     = 0xb0c2
	nxVendorNicira = 0x00002320
)

// noteForeign counts f, a message of another version, and keeps what it was.
func (c *Conn) noteForeign(f []byte) {
	e := &ForeignError{Version: f[0], Type: f[1], Desc: describeForeign(f)}
	c.lastForeign.Store(e)
	if c.foreign.Add(1) == 1 {
		c.log.Debug("ofconn: the switch sent a message of another OpenFlow version; ignored", "message", e.Desc)
	}
}

// foreignSince returns the last foreign message if any arrived since the
// count was n, else nil.
func (c *Conn) foreignSince(n uint64) error {
	if c.foreign.Load() == n {
		return nil
	}
	if e := c.lastForeign.Load(); e != nil {
		return e
	}
	return nil
}

// describeForeign names a foreign message; an OpenFlow 1.0 error from OVS
// carries a Nicira vendor error (type, code: include/openvswitch/ofp-errors.h).
func describeForeign(f []byte) string {
	v := fmt.Sprintf("OpenFlow version %d", f[0])
	if f[0] >= 1 && f[0] <= 6 {
		v = fmt.Sprintf("OpenFlow 1.%d", f[0]-1)
	}
	if f[0] != 1 || f[1] != of10TypeError || len(f) < headerLen+4 {
		return fmt.Sprintf("%s message of type %d", v, f[1])
	}
	typ, code := be.Uint16(f[8:10]), be.Uint16(f[10:12])
	if typ == nxetVendor && len(f) >= headerLen+12 && be.Uint32(f[12:16]) == nxVendorNicira {
		return fmt.Sprintf("%s ERROR, Nicira type %d code %d", v, be.Uint16(f[16:18]), be.Uint16(f[18:20]))
	}
	return fmt.Sprintf("%s ERROR type %d code %d", v, typ, code)
}
