package ofctl

import "strings"

// slot is where a match field lives in a match, modelled on OVS's struct
// flow: several field names share one slot (ip_src and arp_spa, tcp_dst and
// icmp_code, ...) and the encoder picks the wire field from eth_type and
// ip_proto, as OVS does.
type slot int

const (
	sConjID slot = iota
	sInPort      // OpenFlow 1.1+ port number, 32 bits
	sDlSrc
	sDlDst
	sDlType
	sVlanTCI
	sNwSrc // IPv4 source or ARP SPA
	sNwDst // IPv4 destination or ARP TPA
	sIPv6Src
	sIPv6Dst
	sIPv6Label
	sNwFrag
	sNwTos // DSCP and ECN bits of the TOS byte
	sNwTTL
	sNwProto // IP protocol or low byte of the ARP opcode
	sTpSrc   // L4 source port or ICMP type
	sTpDst   // L4 destination port or ICMP code
	sTCPFlags
	sArpSha // ARP SHA or ND SLL
	sArpTha // ARP THA or ND TLL
	sNdTarget
	sTunID
	sTunFlags
	sTunSrc
	sTunDst
	sTunIPv6Src
	sTunIPv6Dst
	sTunGbpID
	sTunGbpFlags
	sPktMark
	sCtState
	sCtZone
	sCtMark
	sCtLabel
	sCtNwSrc
	sCtNwDst
	sCtIPv6Src
	sCtIPv6Dst
	sCtNwProto
	sCtTpSrc
	sCtTpDst
	sMetadata
	sPacketType   // OpenFlow 1.5 packet type: namespace and type
	sActsetOutput // OpenFlow 1.1+ port number
	sMplsLabel
	sMplsTC
	sMplsBOS
	sMplsTTL
	sTunErspanIdx
	sTunErspanVer
	sTunErspanDir
	sTunErspanHwid
	sTunGtpuFlags
	sTunGtpuMsgtype
	sNshFlags
	sNshTTL
	sNshMdtype
	sNshNp
	sNshSPI
	sNshSI
	sNshC1              // first of 4 NSH context headers
	sReg0  = sNshC1 + 4 // first of 16 consecutive 32-bit registers
	nSlots = sReg0 + 16 // number of slots
)

// slotWidth is the size in bytes of each slot.
var slotWidth = func() [nSlots]int {
	var w [nSlots]int
	set := func(n int, ss ...slot) {
		for _, s := range ss {
			w[s] = n
		}
	}
	set(1, sNwFrag, sNwTos, sNwTTL, sNwProto, sTunGbpFlags, sCtNwProto, sMplsTC, sMplsBOS, sMplsTTL,
		sTunErspanVer, sTunErspanDir, sTunErspanHwid, sTunGtpuFlags, sTunGtpuMsgtype,
		sNshFlags, sNshTTL, sNshMdtype, sNshNp, sNshSI)
	set(2, sDlType, sVlanTCI, sTpSrc, sTpDst, sTCPFlags, sTunFlags, sTunGbpID, sCtZone, sCtTpSrc, sCtTpDst)
	set(4, sConjID, sInPort, sNwSrc, sNwDst, sIPv6Label, sTunSrc, sTunDst, sPktMark, sCtState, sCtMark, sCtNwSrc, sCtNwDst,
		sPacketType, sActsetOutput, sMplsLabel, sTunErspanIdx, sNshSPI, sNshC1, sNshC1+1, sNshC1+2, sNshC1+3)
	set(6, sDlSrc, sDlDst, sArpSha, sArpTha)
	set(8, sTunID, sMetadata)
	set(16, sIPv6Src, sIPv6Dst, sNdTarget, sTunIPv6Src, sTunIPv6Dst, sCtLabel, sCtIPv6Src, sCtIPv6Dst)
	for i := 0; i < 16; i++ {
		w[sReg0+slot(i)] = 4
	}
	return w
}()

// valKind says how a field's value is written in text.
type valKind int

const (
	kHex        valKind = iota // integer, printed 0x...
	kDec                       // integer, printed in decimal
	kEth                       // Ethernet address
	kIPv4                      // dotted quad
	kIPv6                      // IPv6 address
	kPort                      // OpenFlow port number or name
	kCtState                   // +trk-new flags
	kTCPFlags                  // +syn-ack flags
	kTunFlags                  // +oam flags
	kFrag                      // no, yes, first, later, not_later
	kPacketType                // (namespace,type)
)

// prereq is what the rest of the match must say before a field may appear.
type prereq int

const (
	preNone prereq = iota
	preARP
	preIPv4
	preIPv6
	preIPAny
	preTCP
	preUDP
	preSCTP
	preL4 // tp_src/tp_dst: TCP, UDP or SCTP
	preICMPv4
	preICMPv6
	preICMPAny // icmp_type/icmp_code: ICMP or ICMPv6
	preND
	preNDSolicit
	preNDAdvert
	preVLAN // an 802.1Q header is present
	preMPLS
	preCt     // a valid conntrack entry (ct_state)
	preCtIPv4 // preCt and ip
	preCtIPv6 // preCt and ipv6
	preCtL4   // preCt and ct_nw_proto
	preNSH    // eth_type 0x894f (NSH), or packet_type=(1,0x894f)
	preEther  // an Ethernet packet: packet_type (0,0), the default
)

// oxmHdr is an OXM/NXM header without its length and mask bit. Classes
// above 0xffff stand for experimenter OXMs (class 0xffff on the wire,
// followed by an experimenter id, see experimenterIDs).
type oxmHdr struct {
	class uint32
	field uint8
}

const (
	clsNXM0  = 0x0000
	clsNXM1  = 0x0001
	clsOXM   = 0x8000
	clsPktRg = 0x8001
)

// field is one named field of ovs-ofctl syntax (OVS's struct mf_field).
type field struct {
	name     string   // OVS name, printed by set_field
	aliases  []string // other names accepted in a match or set_field
	nxm      string   // NXM or OXM name printed in sub-field syntax (move, load)
	nxmAlt   []string // other NXM/OXM names accepted in sub-field syntax
	bits     int      // significant bits
	bytes    int      // encoded size
	kind     valKind
	maskable bool
	writable bool // may be the target of set_field, load or move
	pre      prereq
	hdr      oxmHdr // header used in OpenFlow 1.5 actions
	slot     slot   // storage in a match; meaningful only for plain fields
	special  bool   // stored in a match by custom code, not slot
	nxmHdr   oxmHdr // header of the NXM name (learn uses NXM headers)
	variable bool   // a tun_metadata field: as wide as its value
}

// nxmHeaders are the headers of the NXM names; a field whose printed name is
// an OXM name has no older NXM header and uses its OXM one.
var nxmHeaders = map[string]oxmHdr{
	"NXM_OF_IN_PORT": {0, 0}, "NXM_OF_ETH_DST": {0, 1}, "NXM_OF_ETH_SRC": {0, 2}, "NXM_OF_ETH_TYPE": {0, 3},
	"NXM_OF_VLAN_TCI": {0, 4}, "NXM_OF_IP_TOS": {0, 5}, "NXM_OF_IP_PROTO": {0, 6}, "NXM_OF_IP_SRC": {0, 7},
	"NXM_OF_IP_DST": {0, 8}, "NXM_OF_TCP_SRC": {0, 9}, "NXM_OF_TCP_DST": {0, 10}, "NXM_OF_UDP_SRC": {0, 11},
	"NXM_OF_UDP_DST": {0, 12}, "NXM_OF_ICMP_TYPE": {0, 13}, "NXM_OF_ICMP_CODE": {0, 14}, "NXM_OF_ARP_OP": {0, 15},
	"NXM_OF_ARP_SPA": {0, 16}, "NXM_OF_ARP_TPA": {0, 17},
	"NXM_NX_TUN_ID": {1, 16}, "NXM_NX_ARP_SHA": {1, 17}, "NXM_NX_ARP_THA": {1, 18}, "NXM_NX_IPV6_SRC": {1, 19},
	"NXM_NX_IPV6_DST": {1, 20}, "NXM_NX_ICMPV6_TYPE": {1, 21}, "NXM_NX_ICMPV6_CODE": {1, 22}, "NXM_NX_ND_TARGET": {1, 23},
	"NXM_NX_ND_SLL": {1, 24}, "NXM_NX_ND_TLL": {1, 25}, "NXM_NX_IP_FRAG": {1, 26}, "NXM_NX_IPV6_LABEL": {1, 27},
	"NXM_NX_IP_ECN": {1, 28}, "NXM_NX_IP_TTL": {1, 29}, "NXM_NX_TCP_FLAGS": {1, 34},
	"ONFOXM_ET_ACTSET_OUTPUT": {clsExpONF, 43},
}

var fields = []*field{
	{name: "in_port", nxm: "NXM_OF_IN_PORT", bits: 16, bytes: 2, kind: kPort, writable: true, hdr: oxmHdr{clsNXM0, 0}, special: true},
	{name: "in_port_oxm", nxm: "OXM_OF_IN_PORT", bits: 32, bytes: 4, kind: kPort, writable: true, hdr: oxmHdr{clsOXM, 0}, special: true},
	{name: "eth_src", aliases: []string{"dl_src"}, nxm: "NXM_OF_ETH_SRC", nxmAlt: []string{"OXM_OF_ETH_SRC"}, bits: 48, bytes: 6, kind: kEth, maskable: true, writable: true, hdr: oxmHdr{clsOXM, 4}, slot: sDlSrc, pre: preEther},
	{name: "eth_dst", aliases: []string{"dl_dst"}, nxm: "NXM_OF_ETH_DST", nxmAlt: []string{"OXM_OF_ETH_DST"}, bits: 48, bytes: 6, kind: kEth, maskable: true, writable: true, hdr: oxmHdr{clsOXM, 3}, slot: sDlDst, pre: preEther},
	{name: "eth_type", aliases: []string{"dl_type"}, nxm: "NXM_OF_ETH_TYPE", nxmAlt: []string{"OXM_OF_ETH_TYPE"}, bits: 16, bytes: 2, kind: kHex, hdr: oxmHdr{clsOXM, 5}, slot: sDlType, pre: preEther},
	{name: "vlan_tci", nxm: "NXM_OF_VLAN_TCI", bits: 16, bytes: 2, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsNXM0, 4}, slot: sVlanTCI, pre: preEther},
	{name: "dl_vlan", bits: 12, bytes: 2, kind: kDec, writable: true, special: true, pre: preEther},
	{name: "vlan_vid", nxm: "OXM_OF_VLAN_VID", bits: 12, bytes: 2, kind: kDec, maskable: true, writable: true, hdr: oxmHdr{clsOXM, 6}, special: true, pre: preEther},
	{name: "dl_vlan_pcp", bits: 3, bytes: 1, kind: kDec, writable: true, special: true, pre: preEther},
	{name: "vlan_pcp", nxm: "OXM_OF_VLAN_PCP", bits: 3, bytes: 1, kind: kDec, writable: true, hdr: oxmHdr{clsOXM, 7}, special: true, pre: preEther},
	{name: "ip_src", aliases: []string{"nw_src"}, nxm: "NXM_OF_IP_SRC", nxmAlt: []string{"OXM_OF_IPV4_SRC"}, bits: 32, bytes: 4, kind: kIPv4, maskable: true, writable: true, pre: preIPv4, hdr: oxmHdr{clsOXM, 11}, slot: sNwSrc},
	{name: "ip_dst", aliases: []string{"nw_dst"}, nxm: "NXM_OF_IP_DST", nxmAlt: []string{"OXM_OF_IPV4_DST"}, bits: 32, bytes: 4, kind: kIPv4, maskable: true, writable: true, pre: preIPv4, hdr: oxmHdr{clsOXM, 12}, slot: sNwDst},
	{name: "ipv6_src", nxm: "NXM_NX_IPV6_SRC", nxmAlt: []string{"OXM_OF_IPV6_SRC"}, bits: 128, bytes: 16, kind: kIPv6, maskable: true, writable: true, pre: preIPv6, hdr: oxmHdr{clsOXM, 26}, slot: sIPv6Src},
	{name: "ipv6_dst", nxm: "NXM_NX_IPV6_DST", nxmAlt: []string{"OXM_OF_IPV6_DST"}, bits: 128, bytes: 16, kind: kIPv6, maskable: true, writable: true, pre: preIPv6, hdr: oxmHdr{clsOXM, 27}, slot: sIPv6Dst},
	{name: "ipv6_label", nxm: "NXM_NX_IPV6_LABEL", nxmAlt: []string{"OXM_OF_IPV6_FLABEL"}, bits: 20, bytes: 4, kind: kHex, maskable: true, writable: true, pre: preIPv6, hdr: oxmHdr{clsOXM, 28}, slot: sIPv6Label},
	{name: "nw_proto", aliases: []string{"ip_proto"}, nxm: "NXM_OF_IP_PROTO", nxmAlt: []string{"OXM_OF_IP_PROTO"}, bits: 8, bytes: 1, kind: kDec, pre: preIPAny, hdr: oxmHdr{clsOXM, 10}, special: true},
	{name: "nw_ttl", nxm: "NXM_NX_IP_TTL", bits: 8, bytes: 1, kind: kDec, writable: true, pre: preIPAny, hdr: oxmHdr{clsNXM1, 29}, slot: sNwTTL},
	{name: "ip_frag", aliases: []string{"nw_frag"}, nxm: "NXM_NX_IP_FRAG", bits: 2, bytes: 1, kind: kFrag, maskable: true, pre: preIPAny, hdr: oxmHdr{clsNXM1, 26}, special: true},
	{name: "nw_tos", nxm: "NXM_OF_IP_TOS", bits: 8, bytes: 1, kind: kDec, writable: true, pre: preIPAny, hdr: oxmHdr{clsNXM0, 5}, special: true},
	{name: "ip_dscp", nxm: "OXM_OF_IP_DSCP", bits: 6, bytes: 1, kind: kDec, writable: true, pre: preIPAny, hdr: oxmHdr{clsOXM, 8}, special: true},
	{name: "nw_ecn", aliases: []string{"ip_ecn"}, nxm: "NXM_NX_IP_ECN", nxmAlt: []string{"OXM_OF_IP_ECN"}, bits: 2, bytes: 1, kind: kDec, writable: true, pre: preIPAny, hdr: oxmHdr{clsOXM, 9}, special: true},
	{name: "arp_op", nxm: "NXM_OF_ARP_OP", nxmAlt: []string{"OXM_OF_ARP_OP"}, bits: 16, bytes: 2, kind: kDec, writable: true, pre: preARP, hdr: oxmHdr{clsOXM, 21}, special: true},
	{name: "arp_spa", nxm: "NXM_OF_ARP_SPA", nxmAlt: []string{"OXM_OF_ARP_SPA"}, bits: 32, bytes: 4, kind: kIPv4, maskable: true, writable: true, pre: preARP, hdr: oxmHdr{clsOXM, 22}, slot: sNwSrc},
	{name: "arp_tpa", nxm: "NXM_OF_ARP_TPA", nxmAlt: []string{"OXM_OF_ARP_TPA"}, bits: 32, bytes: 4, kind: kIPv4, maskable: true, writable: true, pre: preARP, hdr: oxmHdr{clsOXM, 23}, slot: sNwDst},
	{name: "arp_sha", nxm: "NXM_NX_ARP_SHA", nxmAlt: []string{"OXM_OF_ARP_SHA"}, bits: 48, bytes: 6, kind: kEth, maskable: true, writable: true, pre: preARP, hdr: oxmHdr{clsOXM, 24}, slot: sArpSha},
	{name: "arp_tha", nxm: "NXM_NX_ARP_THA", nxmAlt: []string{"OXM_OF_ARP_THA"}, bits: 48, bytes: 6, kind: kEth, maskable: true, writable: true, pre: preARP, hdr: oxmHdr{clsOXM, 25}, slot: sArpTha},
	{name: "tcp_src", nxm: "NXM_OF_TCP_SRC", nxmAlt: []string{"OXM_OF_TCP_SRC"}, bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, pre: preTCP, hdr: oxmHdr{clsOXM, 13}, slot: sTpSrc},
	{name: "tcp_dst", nxm: "NXM_OF_TCP_DST", nxmAlt: []string{"OXM_OF_TCP_DST"}, bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, pre: preTCP, hdr: oxmHdr{clsOXM, 14}, slot: sTpDst},
	{name: "tp_src", bits: 16, bytes: 2, kind: kDec, maskable: true, pre: preL4, slot: sTpSrc},
	{name: "tp_dst", bits: 16, bytes: 2, kind: kDec, maskable: true, pre: preL4, slot: sTpDst},
	{name: "tcp_flags", nxm: "NXM_NX_TCP_FLAGS", nxmAlt: []string{"OXM_OF_TCP_FLAGS"}, bits: 12, bytes: 2, kind: kTCPFlags, maskable: true, pre: preTCP, hdr: oxmHdr{clsOXM, 42}, slot: sTCPFlags},
	{name: "udp_src", nxm: "NXM_OF_UDP_SRC", nxmAlt: []string{"OXM_OF_UDP_SRC"}, bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, pre: preUDP, hdr: oxmHdr{clsOXM, 15}, slot: sTpSrc},
	{name: "udp_dst", nxm: "NXM_OF_UDP_DST", nxmAlt: []string{"OXM_OF_UDP_DST"}, bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, pre: preUDP, hdr: oxmHdr{clsOXM, 16}, slot: sTpDst},
	{name: "sctp_src", nxm: "OXM_OF_SCTP_SRC", bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, pre: preSCTP, hdr: oxmHdr{clsOXM, 17}, slot: sTpSrc},
	{name: "sctp_dst", nxm: "OXM_OF_SCTP_DST", bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, pre: preSCTP, hdr: oxmHdr{clsOXM, 18}, slot: sTpDst},
	{name: "icmp_type", aliases: []string{"icmpv4_type"}, nxm: "NXM_OF_ICMP_TYPE", nxmAlt: []string{"OXM_OF_ICMPV4_TYPE"}, bits: 8, bytes: 1, kind: kDec, writable: true, pre: preICMPv4, hdr: oxmHdr{clsOXM, 19}, special: true},
	{name: "icmp_code", aliases: []string{"icmpv4_code"}, nxm: "NXM_OF_ICMP_CODE", nxmAlt: []string{"OXM_OF_ICMPV4_CODE"}, bits: 8, bytes: 1, kind: kDec, writable: true, pre: preICMPv4, hdr: oxmHdr{clsOXM, 20}, special: true},
	{name: "icmpv6_type", nxm: "NXM_NX_ICMPV6_TYPE", nxmAlt: []string{"OXM_OF_ICMPV6_TYPE"}, bits: 8, bytes: 1, kind: kDec, writable: true, pre: preICMPv6, hdr: oxmHdr{clsOXM, 29}, special: true},
	{name: "icmpv6_code", nxm: "NXM_NX_ICMPV6_CODE", nxmAlt: []string{"OXM_OF_ICMPV6_CODE"}, bits: 8, bytes: 1, kind: kDec, writable: true, pre: preICMPv6, hdr: oxmHdr{clsOXM, 30}, special: true},
	{name: "nd_target", nxm: "NXM_NX_ND_TARGET", nxmAlt: []string{"OXM_OF_IPV6_ND_TARGET"}, bits: 128, bytes: 16, kind: kIPv6, maskable: true, writable: true, pre: preND, hdr: oxmHdr{clsOXM, 31}, slot: sNdTarget},
	{name: "nd_sll", nxm: "NXM_NX_ND_SLL", nxmAlt: []string{"OXM_OF_IPV6_ND_SLL"}, bits: 48, bytes: 6, kind: kEth, maskable: true, writable: true, pre: preNDSolicit, hdr: oxmHdr{clsOXM, 32}, slot: sArpSha},
	{name: "nd_tll", nxm: "NXM_NX_ND_TLL", nxmAlt: []string{"OXM_OF_IPV6_ND_TLL"}, bits: 48, bytes: 6, kind: kEth, maskable: true, writable: true, pre: preNDAdvert, hdr: oxmHdr{clsOXM, 33}, slot: sArpTha},
	{name: "tun_id", aliases: []string{"tunnel_id"}, nxm: "NXM_NX_TUN_ID", nxmAlt: []string{"OXM_OF_TUNNEL_ID"}, bits: 64, bytes: 8, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsOXM, 38}, slot: sTunID},
	{name: "tun_flags", nxm: "NXM_NX_TUN_FLAGS", bits: 1, bytes: 2, kind: kTunFlags, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 104}, slot: sTunFlags},
	{name: "tun_src", nxm: "NXM_NX_TUN_IPV4_SRC", bits: 32, bytes: 4, kind: kIPv4, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 31}, slot: sTunSrc},
	{name: "tun_dst", nxm: "NXM_NX_TUN_IPV4_DST", bits: 32, bytes: 4, kind: kIPv4, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 32}, slot: sTunDst},
	{name: "tun_ipv6_src", nxm: "NXM_NX_TUN_IPV6_SRC", bits: 128, bytes: 16, kind: kIPv6, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 109}, slot: sTunIPv6Src},
	{name: "tun_ipv6_dst", nxm: "NXM_NX_TUN_IPV6_DST", bits: 128, bytes: 16, kind: kIPv6, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 110}, slot: sTunIPv6Dst},
	{name: "tun_gbp_id", nxm: "NXM_NX_TUN_GBP_ID", bits: 16, bytes: 2, kind: kDec, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 38}, slot: sTunGbpID},
	{name: "tun_gbp_flags", nxm: "NXM_NX_TUN_GBP_FLAGS", bits: 8, bytes: 1, kind: kHex, writable: true, hdr: oxmHdr{clsNXM1, 39}, slot: sTunGbpFlags},
	{name: "metadata", nxm: "OXM_OF_METADATA", bits: 64, bytes: 8, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsOXM, 2}, slot: sMetadata},
	{name: "pkt_mark", nxm: "NXM_NX_PKT_MARK", bits: 32, bytes: 4, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 33}, slot: sPktMark},
	{name: "conj_id", nxm: "NXM_NX_CONJ_ID", bits: 32, bytes: 4, kind: kDec, hdr: oxmHdr{clsNXM1, 37}, slot: sConjID},
	{name: "ct_state", nxm: "NXM_NX_CT_STATE", bits: 32, bytes: 4, kind: kCtState, maskable: true, hdr: oxmHdr{clsNXM1, 105}, slot: sCtState},
	{name: "ct_zone", nxm: "NXM_NX_CT_ZONE", bits: 16, bytes: 2, kind: kDec, hdr: oxmHdr{clsNXM1, 106}, slot: sCtZone},
	{name: "ct_mark", nxm: "NXM_NX_CT_MARK", bits: 32, bytes: 4, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 107}, slot: sCtMark},
	{name: "ct_label", nxm: "NXM_NX_CT_LABEL", bits: 128, bytes: 16, kind: kHex, maskable: true, writable: true, hdr: oxmHdr{clsNXM1, 108}, slot: sCtLabel},
	{name: "ct_nw_proto", nxm: "NXM_NX_CT_NW_PROTO", bits: 8, bytes: 1, kind: kDec, pre: preCt, hdr: oxmHdr{clsNXM1, 119}, slot: sCtNwProto},
	{name: "ct_nw_src", nxm: "NXM_NX_CT_NW_SRC", bits: 32, bytes: 4, kind: kIPv4, maskable: true, pre: preCtIPv4, hdr: oxmHdr{clsNXM1, 120}, slot: sCtNwSrc},
	{name: "ct_nw_dst", nxm: "NXM_NX_CT_NW_DST", bits: 32, bytes: 4, kind: kIPv4, maskable: true, pre: preCtIPv4, hdr: oxmHdr{clsNXM1, 121}, slot: sCtNwDst},
	{name: "ct_ipv6_src", nxm: "NXM_NX_CT_IPV6_SRC", bits: 128, bytes: 16, kind: kIPv6, maskable: true, pre: preCtIPv6, hdr: oxmHdr{clsNXM1, 122}, slot: sCtIPv6Src},
	{name: "ct_ipv6_dst", nxm: "NXM_NX_CT_IPV6_DST", bits: 128, bytes: 16, kind: kIPv6, maskable: true, pre: preCtIPv6, hdr: oxmHdr{clsNXM1, 123}, slot: sCtIPv6Dst},
	{name: "ct_tp_src", nxm: "NXM_NX_CT_TP_SRC", bits: 16, bytes: 2, kind: kDec, maskable: true, pre: preCtL4, hdr: oxmHdr{clsNXM1, 124}, slot: sCtTpSrc},
	{name: "ct_tp_dst", nxm: "NXM_NX_CT_TP_DST", bits: 16, bytes: 2, kind: kDec, maskable: true, pre: preCtL4, hdr: oxmHdr{clsNXM1, 125}, slot: sCtTpDst},
}

// regField, xregField and xxregField describe the register families, which
// are generated rather than listed.
func init() {
	for i := 0; i < 16; i++ {
		fields = append(fields, &field{
			name: "reg" + itoa(i), nxm: "NXM_NX_REG" + itoa(i), bits: 32, bytes: 4, kind: kHex,
			maskable: true, writable: true, hdr: oxmHdr{clsNXM1, uint8(i)}, slot: sReg0 + slot(i),
		})
	}
	for i := 0; i < 8; i++ {
		fields = append(fields, &field{
			name: "xreg" + itoa(i), nxm: "OXM_OF_PKT_REG" + itoa(i), bits: 64, bytes: 8, kind: kHex,
			maskable: true, writable: true, hdr: oxmHdr{clsPktRg, uint8(i)}, special: true,
		})
	}
	for i := 0; i < 4; i++ {
		fields = append(fields, &field{
			name: "xxreg" + itoa(i), nxm: "NXM_NX_XXREG" + itoa(i), bits: 128, bytes: 16, kind: kHex,
			maskable: true, writable: true, hdr: oxmHdr{clsNXM1, uint8(111 + i)}, special: true,
		})
	}
	for i := 0; i < tunMDFields; i++ {
		fields = append(fields, &field{
			name: "tun_metadata" + itoa(i), nxm: "NXM_NX_TUN_METADATA" + itoa(i), bits: 8 * tunMDBytes, bytes: tunMDBytes, kind: kHex,
			maskable: true, writable: true, hdr: oxmHdr{clsNXM1, uint8(tunMDFirstNX + i)}, special: true, variable: true,
		})
	}
	fields = append(fields, encapFields...)
	for _, f := range fields {
		f.nxmHdr = f.hdr
		if h, ok := nxmHeaders[f.nxm]; ok {
			f.nxmHdr = h
		}
		for _, n := range append([]string{f.name}, f.aliases...) {
			fieldByName[n] = f
		}
		if f.nxm != "" {
			fieldByNXM[f.nxm] = f
		}
		for _, n := range f.nxmAlt {
			fieldByNXM[n] = f
		}
		if f.hdr != (oxmHdr{}) || f.name == "in_port" {
			if _, dup := fieldByHdr[f.hdr]; !dup {
				fieldByHdr[f.hdr] = f
			}
		}
		if f.nxm != "" {
			if _, dup := fieldByNXMHdr[f.nxmHdr]; !dup {
				fieldByNXMHdr[f.nxmHdr] = f
			}
		}
	}
	// Both names of a port number field accept the same text.
	fieldByNXM["OXM_OF_IN_PORT"] = fieldByName["in_port_oxm"]
	delete(fieldByName, "in_port_oxm")
}

var (
	fieldByName = map[string]*field{}
	fieldByNXM  = map[string]*field{}
	fieldByHdr  = map[oxmHdr]*field{}
	// fieldByNXMHdr finds fields by the headers learn uses.
	fieldByNXMHdr = map[oxmHdr]*field{}
)

// lookupField finds a field by its ovs-ofctl name or by an NXM/OXM name.
func lookupField(name string) *field {
	if f, ok := fieldByName[name]; ok {
		return f
	}
	if f, ok := fieldByNXM[strings.ToUpper(name)]; ok {
		return f
	}
	return nil
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return string(rune('0'+i/10)) + string(rune('0'+i%10))
}
