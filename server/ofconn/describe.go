package ofconn

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// SwitchDesc is the switch's OFPMP_DESC reply. OVS sets Software to its
// version ("2.15.0"): the version of the vswitchd that runs, whatever the
// package database or OVSDB's ovs_version says.
type SwitchDesc struct {
	Manufacturer, Hardware, Software, Serial, Datapath string
}

// Lengths of the fields of ofp_desc (OpenFlow 1.5, 7.3.5.1).
const (
	descStrLen   = 256
	serialNumLen = 32
	descLen      = 4*descStrLen + serialNumLen
)

// Describe asks the switch for its description (OFPMP_DESC).
func (c *Conn) Describe(ctx context.Context) (SwitchDesc, error) {
	xid := c.nextXids(1)
	w := c.register(xid, 1)
	defer c.unregister(w)
	// ofp_multipart_request: type DESC, no flags, no body.
	req := controlMsg(openflow15.Type_MultiPartRequest, xid, make([]byte, 8))
	be.PutUint16(req[headerLen:], openflow15.MultipartType_Desc)
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(req)
		return err
	}); err != nil {
		return SwitchDesc{}, fmt.Errorf("ofconn: describe: %w", err)
	}
	c.stats.countSent(openflow15.Type_MultiPartRequest, len(req))
	for {
		f, err := c.recv(ctx, w)
		if err != nil {
			return SwitchDesc{}, fmt.Errorf("ofconn: describe: %w", err)
		}
		switch f[1] {
		case openflow15.Type_Error:
			return SwitchDesc{}, fmt.Errorf("ofconn: describe: %w", decodeError(f))
		case openflow15.Type_MultiPartReply:
			body := f[headerLen+8:]
			if len(body) < descLen {
				return SwitchDesc{}, fmt.Errorf("ofconn: describe: reply of %d bytes, want %d", len(body), descLen)
			}
			field := func(at, n int) string {
				b := body[at : at+n]
				if i := bytes.IndexByte(b, 0); i >= 0 {
					b = b[:i]
				}
				return strings.TrimSpace(string(b))
			}
			return SwitchDesc{
				Manufacturer: field(0, descStrLen),
				Hardware:     field(descStrLen, descStrLen),
				Software:     field(2*descStrLen, descStrLen),
				Serial:       field(3*descStrLen, serialNumLen),
				Datapath:     field(3*descStrLen+serialNumLen, descStrLen),
			}, nil
		}
	}
}

// PeerVersions returns the OpenFlow versions the switch's HELLO offered, as
// a bitmap of wire versions (bit 6: OpenFlow 1.5). The connection speaks
// 1.5 alone; the others tell what the switch's controllers may use.
func (c *Conn) PeerVersions() uint32 { return c.peerVersions }

// VersionNames names the OpenFlow versions of a HELLO bitmap ("1.0", ...),
// oldest first.
func VersionNames(bitmap uint32) []string {
	var out []string
	for v := 1; v <= 6; v++ {
		if bitmap&(1<<v) != 0 {
			out = append(out, fmt.Sprintf("1.%d", v-1))
		}
	}
	return out
}

// OVSVersion parses Software as an Open vSwitch version ("2.15.0",
// "3.5.1-1ubuntu1"): its major and minor numbers; ok is false for a switch
// that is not one.
func (d SwitchDesc) OVSVersion() (major, minor int, ok bool) {
	return ParseOVSVersion(d.Software)
}

// ParseOVSVersion parses the major and minor numbers of an Open vSwitch
// version string, as OFPMP_DESC and OVSDB's ovs_version give it.
func ParseOVSVersion(s string) (major, minor int, ok bool) {
	maj, rest, found := strings.Cut(strings.TrimSpace(s), ".")
	if !found {
		return 0, 0, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil || end == 0 {
		return 0, 0, false
	}
	return a, b, true
}

// HasFlowMonitor reports whether an Open vSwitch of this version takes
// MonitorFlows' OpenFlow 1.5 flow monitor (3.0 and later); unknown: true,
// and MonitorFlows' refusal tells.
func (d SwitchDesc) HasFlowMonitor() bool {
	major, _, ok := d.OVSVersion()
	return !ok || major >= 3
}
