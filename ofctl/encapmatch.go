package ofctl

import (
	"fmt"
	"strconv"
)

// valueAsMask lists the fields whose match OVS 3.1 stores with the value
// as the mask (match_set_tun_erspan_ver_masked and its siblings assign the
// value to the mask): tun_erspan_ver=2 matches 2/2, and a 0 is no match at
// all. vswitchd keeps and dumps that form, so flowstate encodes it too.
var valueAsMask = map[slot]bool{
	sTunErspanVer: true, sTunErspanDir: true, sTunErspanHwid: true, sTunGtpuFlags: true, sTunGtpuMsgtype: true,
}

// truncatedInMatch lists the fields whose match OVS cuts to the field's
// width without a word (match_set_mpls_tc keeps the low 3 bits, ...).
var truncatedInMatch = map[slot]bool{sMplsLabel: true, sMplsTC: true, sMplsBOS: true, sNshSPI: true}

// uncheckedInMatch lists the fields whose match OVS takes at their full
// byte width, whatever the field's nominal width (tun_erspan_ver=17 is
// matched and printed as 17).
var uncheckedInMatch = map[slot]bool{sTunErspanIdx: true, sTunErspanVer: true, sTunErspanDir: true, sTunErspanHwid: true}

// matchField returns the field as a match reads it: the fields of
// uncheckedInMatch at their full byte width.
func matchField(f *field) *field {
	if f.special || !uncheckedInMatch[f.slot] {
		return f
	}
	wide := *f
	wide.bits = 8 * f.bytes
	return &wide
}

// setValueAsMask stores a match on one of the valueAsMask fields as OVS
// does, refusing the forms OVS would silently turn into something else.
func (mt *match) setValueAsMask(f *field, p kv, v, m []byte) error {
	_, _, hasMask := splitMask(p.val)
	switch {
	case hasMask && isZero(m):
		return nil // a zero mask matches anything: no match, as in OVS
	case hasMask:
		return errAt(p.valOff, p.val, "%s cannot be matched with a mask: OVS would use the value as the mask and print the match as %s=%s",
			f.name, f.name, formatMatchValue(f, andBytes(v, m)))
	case isZero(v):
		return errAt(p.keyOff, p.text(), "%s=0 is not supported: OVS uses the value as the mask, so it would leave %s out of the match", f.name, f.name)
	}
	mt.set(f.slot, v, v)
	return nil
}

// formatMatchValue prints a value of the valueAsMask fields as OVS's
// format_flow_tunnel does: the flags and hardware id in hexadecimal.
func formatMatchValue(f *field, v []byte) string {
	if f.kind == kHex {
		return formatHexC(beUint(v))
	}
	return strconv.FormatUint(beUint(v), 10)
}

// checkPrintable refuses matches that OVS accepts but prints in a way that
// reads back as a different flow, so that what flowstate stores always
// prints and parses back to the same bytes.
// enc is mt encoded (encodeTo), computed once by the caller (it is most of a parse).
func (mt *match) checkPrintable(set []setting, enc []oxm) error {
	if err := mt.checkImpliedEthernet(set, enc); err != nil {
		return err
	}
	for _, st := range set {
		s, name := st.f.slot, st.f.name
		if st.f.special || !mt.has(s) {
			continue
		}
		ver := mt.u(sTunErspanVer)
		switch {
		case s == sTunErspanIdx && !isOnes(mt.mask(s)):
			return errAt(st.p.keyOff, st.p.text(), "%s cannot be matched with a mask: OVS would match it masked but print it without the mask, which reads back as an exact match", name)
		case s == sTunErspanIdx && ver != 1:
			return errAt(st.p.keyOff, st.p.text(), "%s needs tun_erspan_ver=1: OVS would match it but leave it out of the flow it prints", name)
		case (s == sTunErspanDir || s == sTunErspanHwid) && ver != 2:
			return errAt(st.p.keyOff, st.p.text(), "%s needs tun_erspan_ver=2: OVS would match it but leave it out of the flow it prints", name)
		case s >= sNshC1 && s < sNshC1+4 && !(isOnes(mt.mask(sNshMdtype)) && mt.u(sNshMdtype) == 1):
			return errAt(st.p.keyOff, st.p.text(), "%s needs nsh_mdtype=1: OVS would match it but leave it out of the flow it prints", name)
		case s == sPacketType:
			if err := mt.checkPacketType(st.p, enc); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPacketType refuses packet types OVS would encode in a way its own
// printout does not reproduce.
func (mt *match) checkPacketType(p kv, enc []oxm) error {
	pt := uint32(mt.u(sPacketType))
	if _, ok := mt.dlTypeField(); ok && pt>>16 == ptNsEther {
		return errAt(p.keyOff, p.text(), "packet_type=(1,TYPE) already gives the Ethernet type: leave out dl_type and shorthands such as ip (OVS would send both, which vswitchd refuses as a bad prerequisite)")
	}
	if pt != ptEth {
		return nil // Ethernet fields are refused by their prerequisite
	}
	for _, o := range enc {
		if impliesEthernet(o.hdr) {
			return nil // OVS leaves (0,0) out, as flowstate does
		}
	}
	return errAt(p.keyOff, p.text(), "packet_type=(0,0) without an Ethernet or higher-layer field is not supported: OVS would match it but print the flow without it, which reads back as a flow that matches every packet type")
}

// checkImpliedEthernet refuses a match whose Ethernet-layer fields all
// have zero masks: OVS's parser still makes the flow match only Ethernet
// packets (match_add_ethernet_prereq), sends packet_type=(0,0) for it, and
// prints the flow without it.
func (mt *match) checkImpliedEthernet(set []setting, enc []oxm) error {
	if mt.has(sPacketType) {
		return nil // an explicit packet_type stands (checkPacketType)
	}
	for _, st := range set {
		f := st.f
		if !impliesEthernet(f.hdr) && f.name != "dl_vlan" && f.name != "dl_vlan_pcp" {
			continue
		}
		for _, o := range enc {
			if impliesEthernet(o.hdr) {
				return nil
			}
		}
		return errAt(st.p.keyOff, st.p.text(), "%s with a zero mask matches any value: OVS would leave it out but still match only Ethernet packets (packet_type=(0,0)), and print the flow without that, which reads back as a flow for every packet type; leave %s out", f.name, f.name)
	}
	return nil
}

// impliesEthernet reports whether a match field implies an Ethernet packet
// (OVS: a field with prerequisites), so that packet_type=(0,0) goes
// without saying.
func impliesEthernet(h oxmHdr) bool {
	switch h {
	case oxmHdr{clsOXM, 3}, oxmHdr{clsOXM, 4}, oxmHdr{clsOXM, 5}, oxmHdr{clsOXM, 6}, oxmHdr{clsOXM, 7},
		oxmHdr{clsOXM, 8}, oxmHdr{clsOXM, 9}: // Ethernet, VLAN, DSCP and ECN
		return true
	}
	f, ok := fieldByHdr[h]
	return ok && f.pre != preNone
}

// formatErspanGtpu prints the ERSPAN and GTP-U matches as OVS's
// format_flow_tunnel does: values only, the ERSPAN index only with version
// 1, direction and hardware id only with version 2, and the GTP-U fields
// under the names gtpu_flags and gtpu_msgtype.
func (mt *match) formatErspanGtpu(w *matchWriter) {
	ver := mt.u(sTunErspanVer)
	if mt.has(sTunErspanVer) {
		w.add("tun_erspan_ver", strconv.FormatUint(ver, 10))
	}
	if mt.has(sTunErspanIdx) && ver == 1 {
		w.add("tun_erspan_idx", formatHexC(mt.u(sTunErspanIdx)))
	}
	if mt.has(sTunErspanDir) && ver == 2 {
		w.add("tun_erspan_dir", strconv.FormatUint(mt.u(sTunErspanDir), 10))
	}
	if mt.has(sTunErspanHwid) && ver == 2 {
		w.add("tun_erspan_hwid", formatHexC(mt.u(sTunErspanHwid)))
	}
	if mt.has(sTunGtpuFlags) {
		w.add("gtpu_flags", formatHexC(mt.u(sTunGtpuFlags)))
	}
	if mt.has(sTunGtpuMsgtype) {
		w.add("gtpu_msgtype", strconv.FormatUint(mt.u(sTunGtpuMsgtype), 10))
	}
}

// formatNSH prints the NSH fields as OVS's format_nsh_masked does; the
// context headers only for MD type 1.
func (mt *match) formatNSH(w *matchWriter) {
	u8 := func(name string, s slot) {
		if v, m := mt.u(s), mt.um(s); m == 0xff {
			w.add(name, strconv.FormatUint(v, 10))
		} else if m != 0 {
			w.add(name, fmt.Sprintf("0x%02x/0x%02x", v, m))
		}
	}
	hex32 := func(name string, s slot) {
		if v, m := mt.u(s), mt.um(s); m == 0xffffffff {
			w.add(name, fmt.Sprintf("0x%x", v))
		} else if m != 0 {
			w.add(name, fmt.Sprintf("0x%x/0x%x", v, m))
		}
	}
	u8("nsh_flags", sNshFlags)
	u8("nsh_ttl", sNshTTL)
	u8("nsh_mdtype", sNshMdtype)
	u8("nsh_np", sNshNp)
	hex32("nsh_spi", sNshSPI)
	u8("nsh_si", sNshSI)
	if mt.um(sNshMdtype) == 0xff && mt.u(sNshMdtype) == 1 {
		for i := 0; i < 4; i++ {
			hex32("nsh_c"+itoa(i+1), sNshC1+slot(i))
		}
	}
}
