package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"

	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// OpenFlow 1.5's version and the message types the controller uses.
const (
	of15         = 6
	typeHello    = 0
	typeError    = 1
	typeEcho     = 2
	typeEchoRepl = 3
	typeBarrier  = 20
	typeBarRepl  = 21
)

// control is a controller that is already past its HELLO when the FLOW_MOD
// is traced: it connects to socket, exchanges HELLOs, writes "ready" to
// out, and once a line arrives on in sends flow with a barrier and waits
// for the barrier's reply. The trace then holds the FLOW_MOD alone, not the
// session's start, which a traced proxy takes longer over than vswitchd
// waits for a HELLO.
func control(socket, flow string, in io.Reader, out io.Writer) error {
	fm, err := ofctl.ParseFlowBinary(flow)
	if err != nil {
		return fmt.Errorf("the flow: %w", err)
	}
	c, err := net.Dial("unix", socket)
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := c.Write(header(typeHello, 8, 1)); err != nil {
		return err
	}
	if err := await(c, r, typeHello, 0); err != nil {
		return fmt.Errorf("the switch's HELLO: %w", err)
	}
	fmt.Fprintln(out, "ready")
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the go: %w", err)
	}
	binary.BigEndian.PutUint32(fm[4:8], 2)
	if _, err := c.Write(append(fm, header(typeBarrier, 8, 3)...)); err != nil {
		return err
	}
	if err := await(c, r, typeBarRepl, 3); err != nil {
		return fmt.Errorf("the barrier's reply: %w", err)
	}
	fmt.Fprintln(out, "done")
	return nil
}

func header(typ uint8, length uint16, xid uint32) []byte {
	b := []byte{of15, typ, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], length)
	binary.BigEndian.PutUint32(b[4:], xid)
	return b
}

// await reads messages until one of type typ (of xid, unless 0), answering
// echoes; an OpenFlow error fails it.
func await(w io.Writer, r *bufio.Reader, typ uint8, xid uint32) error {
	for {
		m, err := ofconn.ReadMessage(r)
		if err != nil {
			return err
		}
		switch got := binary.BigEndian.Uint32(m[4:8]); {
		case m[1] == typeError:
			return fmt.Errorf("the switch answered xid %d with an error: % x", got, m)
		case m[1] == typeEcho:
			reply := append(header(typeEchoRepl, uint16(len(m)), got), m[8:]...)
			if _, err := w.Write(reply); err != nil {
				return err
			}
		case m[1] == typ && (xid == 0 || got == xid):
			return nil
		}
	}
}
