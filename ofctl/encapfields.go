package ofctl

import (
	"fmt"
)

// The fields of encapsulations and their metadata that OpenFlow 1.5 (or
// an experimenter) defines beyond the basic ones of fields.go: packet type,
// action set output, MPLS, NSH, ERSPAN and GTP-U. Their names, widths and
// headers are OVS's (meta-flow.h).
var encapFields = []*field{
	{name: "packet_type", nxm: "OXM_OF_PACKET_TYPE", bits: 32, bytes: 4, kind: kPacketType, hdr: oxmHdr{clsOXM, 44}, slot: sPacketType},
	{name: "actset_output", nxm: "ONFOXM_ET_ACTSET_OUTPUT", bits: 32, bytes: 4, kind: kPort, hdr: oxmHdr{clsOXM, 43}, slot: sActsetOutput},
	{name: "mpls_label", nxm: "OXM_OF_MPLS_LABEL", bits: 20, bytes: 4, kind: kDec, writable: true, pre: preMPLS, hdr: oxmHdr{clsOXM, 34}, slot: sMplsLabel},
	{name: "mpls_tc", nxm: "OXM_OF_MPLS_TC", bits: 3, bytes: 1, kind: kDec, writable: true, pre: preMPLS, hdr: oxmHdr{clsOXM, 35}, slot: sMplsTC},
	{name: "mpls_bos", nxm: "OXM_OF_MPLS_BOS", bits: 1, bytes: 1, kind: kDec, pre: preMPLS, hdr: oxmHdr{clsOXM, 36}, slot: sMplsBOS},
	{name: "mpls_ttl", nxm: "NXM_NX_MPLS_TTL", bits: 8, bytes: 1, kind: kDec, writable: true, pre: preMPLS, hdr: oxmHdr{clsNXM1, 30}, slot: sMplsTTL},
	{name: "tun_erspan_idx", nxm: "NXOXM_ET_ERSPAN_IDX", bits: 20, bytes: 4, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsExpTun, 11}, slot: sTunErspanIdx},
	{name: "tun_erspan_ver", nxm: "NXOXM_ET_ERSPAN_VER", bits: 4, bytes: 1, kind: kDec, maskable: true, writable: true, hdr: oxmHdr{clsExpTun, 12}, slot: sTunErspanVer},
	{name: "tun_erspan_dir", nxm: "NXOXM_ET_ERSPAN_DIR", bits: 1, bytes: 1, kind: kDec, maskable: true, writable: true, hdr: oxmHdr{clsExpTun, 13}, slot: sTunErspanDir},
	{name: "tun_erspan_hwid", nxm: "NXOXM_ET_ERSPAN_HWID", bits: 6, bytes: 1, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsExpTun, 14}, slot: sTunErspanHwid},
	// OVS prints these two as gtpu_flags and gtpu_msgtype in a match;
	// the aliases let such dumps read back.
	{name: "tun_gtpu_flags", aliases: []string{"gtpu_flags"}, nxm: "NXOXM_ET_GTPU_FLAGS", bits: 8, bytes: 1, kind: kHex, maskable: true, hdr: oxmHdr{clsExpTun, 15}, slot: sTunGtpuFlags},
	{name: "tun_gtpu_msgtype", aliases: []string{"gtpu_msgtype"}, nxm: "NXOXM_ET_GTPU_MSGTYPE", bits: 8, bytes: 1, kind: kDec, maskable: true, hdr: oxmHdr{clsExpTun, 16}, slot: sTunGtpuMsgtype},
	{name: "nsh_flags", nxm: "NXOXM_NSH_FLAGS", bits: 8, bytes: 1, kind: kDec, maskable: true, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 1}, slot: sNshFlags},
	{name: "nsh_ttl", nxm: "NXOXM_NSH_TTL", bits: 8, bytes: 1, kind: kDec, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 10}, slot: sNshTTL},
	{name: "nsh_mdtype", nxm: "NXOXM_NSH_MDTYPE", bits: 8, bytes: 1, kind: kDec, pre: preNSH, hdr: oxmHdr{clsExpNSH, 2}, slot: sNshMdtype},
	{name: "nsh_np", nxm: "NXOXM_NSH_NP", bits: 8, bytes: 1, kind: kDec, pre: preNSH, hdr: oxmHdr{clsExpNSH, 3}, slot: sNshNp},
	{name: "nsh_spi", aliases: []string{"nsp"}, nxm: "NXOXM_NSH_SPI", bits: 24, bytes: 4, kind: kHex, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 4}, slot: sNshSPI},
	{name: "nsh_si", aliases: []string{"nsi"}, nxm: "NXOXM_NSH_SI", bits: 8, bytes: 1, kind: kDec, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 5}, slot: sNshSI},
	{name: "nsh_c1", aliases: []string{"nshc1"}, nxm: "NXOXM_NSH_C1", bits: 32, bytes: 4, kind: kHex, maskable: true, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 6}, slot: sNshC1},
	{name: "nsh_c2", aliases: []string{"nshc2"}, nxm: "NXOXM_NSH_C2", bits: 32, bytes: 4, kind: kHex, maskable: true, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 7}, slot: sNshC1 + 1},
	{name: "nsh_c3", aliases: []string{"nshc3"}, nxm: "NXOXM_NSH_C3", bits: 32, bytes: 4, kind: kHex, maskable: true, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 8}, slot: sNshC1 + 2},
	{name: "nsh_c4", aliases: []string{"nshc4"}, nxm: "NXOXM_NSH_C4", bits: 32, bytes: 4, kind: kHex, maskable: true, writable: true, pre: preNSH, hdr: oxmHdr{clsExpNSH, 9}, slot: sNshC1 + 3},
}

// Ethernet type of NSH and the packet types of ovs-ofctl's names.
const (
	ethNSH = 0x894f

	ptEth     = 0x00000000 // (0,0): Ethernet, the default
	ptNSH     = 0x0001894f
	ptMPLS    = 0x00018847
	ptMPLSMC  = 0x00018848
	ptUnknown = 0xffffffff
	ptNextHdr = 0x0000fffe // decap's "use the next protocol"
	ptNsEther = 1          // namespace whose types are Ethernet types
)

// parsePacketType parses "(NS,TYPE)" as OVS's mf_from_packet_type_string.
func parsePacketType(s string) ([]byte, error) {
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return nil, fmt.Errorf("packet_type must be (NAMESPACE,TYPE), e.g. (1,0x800)")
	}
	nsText, typText, ok := cutComma(s[1 : len(s)-1])
	if !ok {
		return nil, fmt.Errorf("packet_type must be (NAMESPACE,TYPE), e.g. (1,0x800)")
	}
	ns, err := parseUint(nsText, 16)
	if err != nil {
		return nil, fmt.Errorf("bad packet_type namespace %q (want 0 to 65535)", nsText)
	}
	typ, err := parseUint(typText, 16)
	if err != nil {
		return nil, fmt.Errorf("bad packet_type type %q (want 0 to 65535)", typText)
	}
	return putBE(ns<<16|typ, 4), nil
}

func cutComma(s string) (a, b string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// formatPacketType prints a packet type as OVS's put_u16_masked does:
// "(NS,TYPE)", numbers above 9 in hexadecimal.
func formatPacketType(pt uint32) string {
	u := func(v uint32) string {
		if v > 9 {
			return fmt.Sprintf("0x%x", v)
		}
		return fmt.Sprintf("%d", v)
	}
	return "(" + u(pt>>16) + "," + u(pt&0xffff) + ")"
}

// fieldBySlot finds the field of a slot that only one field uses (those
// of this file), for the encoder: an array, as encoding a match reads it
// for each of these slots.
var fieldBySlot = func() (by [nSlots]*field) {
	for _, f := range encapFields {
		by[f.slot] = f
	}
	return by
}()
