package ofconn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flowstate-io/flowstate/errdefs"
)

var (
	// ErrVersion says the bridge does not allow OpenFlow 1.5 on its management socket. It matches
	// errdefs.ErrFailedPrecondition.
	ErrVersion error = &kindError{"ofconn: bridge does not speak OpenFlow 1.5 (check the bridge's protocols column)", errdefs.ErrFailedPrecondition}
	// ErrClosed says the connection died or was closed. Errors of operations on a dead connection match it and
	// errdefs.ErrUnavailable, and wrap the cause.
	ErrClosed = errors.New("ofconn: connection closed")
	// ErrTooLarge says a message does not fit in a (bundled) OpenFlow message; nothing was sent. It matches
	// errdefs.ErrInvalidArgument.
	ErrTooLarge error = &kindError{"ofconn: message too large", errdefs.ErrInvalidArgument}
	// ErrMalformed says a message is not one well-formed OpenFlow 1.5 message; nothing was sent. It matches
	// errdefs.ErrInvalidArgument.
	ErrMalformed error = &kindError{"ofconn: malformed message", errdefs.ErrInvalidArgument}
)

// kindError is a sentinel with its own text that also matches one of the errdefs kinds.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

// errEchoTimeout is the cause of a connection declared dead by the keepalive.
var errEchoTimeout = errors.New("ofconn: switch did not answer echo request")

// errClosedByUser is the cause recorded by Close; Err reports nil for it.
var errClosedByUser = errors.New("ofconn: closed")

// closedError is what operations on a dead connection return.
type closedError struct{ cause error }

// Error leaves out the package prefix: operations wrap it with theirs ("ofconn: bundle: connection closed: ...").
func (e *closedError) Error() string {
	if e.cause == nil || errors.Is(e.cause, errClosedByUser) {
		return "connection to the switch closed"
	}
	return "connection to the switch closed: " + strings.TrimPrefix(e.cause.Error(), "ofconn: ")
}

func (e *closedError) Unwrap() error { return e.cause }

func (e *closedError) Is(target error) bool {
	return target == ErrClosed || target == errdefs.ErrUnavailable
}

// OFError is an OFPT_ERROR the switch sent in answer to one message.
type OFError struct {
	Type, Code uint16
	// Experimenter is the experimenter id when Type is OFPET_EXPERIMENTER (0xffff), else 0.
	Experimenter uint32
	// Name is the symbolic name, e.g. "OFPBAC_BAD_OUT_PORT", or a numeric description when unknown.
	Name string
	// Data is the error's data: usually the start of the offending message.
	Data []byte
}

func (e *OFError) Error() string {
	return fmt.Sprintf("ofconn: switch rejected message: %s (type %d, code %d)", e.Name, e.Type, e.Code)
}

// Is makes a switch rejection match errdefs.ErrInvalidArgument.
func (e *OFError) Is(target error) bool { return target == errdefs.ErrInvalidArgument }

// AddError is one message of a bundle that the switch rejected.
type AddError struct {
	// Index is the message's index in the slice given to Bundle, or -1 for an error of the bundle itself
	// (open or commit) that OVS attributed to no message.
	Index        int
	Type, Code   uint16
	Experimenter uint32
	Name         string
	Data         []byte
}

func (e AddError) String() string {
	if e.Index < 0 {
		return fmt.Sprintf("bundle: %s", e.Name)
	}
	return fmt.Sprintf("message %d: %s", e.Index, e.Name)
}

// BundleError reports a bundle the switch did not apply. Nothing of it was installed.
type BundleError struct {
	// Failed lists the rejected messages in the order OVS reported them; never empty.
	Failed []AddError
	// AtCommit is true when every add was accepted and the commit failed (e.g. OFPFMFC_TABLE_FULL); OVS rolled
	// the whole bundle back.
	AtCommit bool
	// Committed is false: the bundle was discarded or rolled back. It is true only if OVS reported errors for
	// adds and then committed anyway, which OVS 3.1 does not do.
	Committed bool
}

func (e *BundleError) Error() string {
	var b strings.Builder
	if e.AtCommit {
		b.WriteString("ofconn: bundle commit failed, nothing installed: ")
	} else {
		fmt.Fprintf(&b, "ofconn: bundle rejected, nothing installed: %d error(s): ", len(e.Failed))
	}
	for i, f := range e.Failed {
		if i == 8 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// Is makes a bundle rejection match errdefs.ErrInvalidArgument.
func (e *BundleError) Is(target error) bool { return target == errdefs.ErrInvalidArgument }

// decodeError reads the body of an OFPT_ERROR message (frame includes the 8-byte header).
func decodeError(frame []byte) *OFError {
	e := &OFError{}
	body := frame[8:]
	if len(body) < 4 {
		e.Name = "malformed OFPT_ERROR"
		e.Data = append([]byte(nil), body...)
		return e
	}
	e.Type = be.Uint16(body[0:2])
	e.Code = be.Uint16(body[2:4])
	data := body[4:]
	if e.Type == errTypeExperimenter && len(data) >= 4 {
		e.Experimenter = be.Uint32(data[0:4])
		data = data[4:]
	}
	e.Data = append([]byte(nil), data...)
	e.Name = ErrorName(e.Type, e.Code, e.Experimenter)
	return e
}

func (e *OFError) addError(index int) AddError {
	return AddError{Index: index, Type: e.Type, Code: e.Code, Experimenter: e.Experimenter, Name: e.Name, Data: e.Data}
}

const errTypeExperimenter = 0xffff

// errorTypes holds the OpenFlow 1.5 error types: the prefix of their codes' names and the code names in order.
var errorTypes = map[uint16]struct {
	name, prefix string
	codes        []string
}{
	0:  {"OFPET_HELLO_FAILED", "OFPHFC_", []string{"INCOMPATIBLE", "EPERM"}},
	1:  {"OFPET_BAD_REQUEST", "OFPBRC_", []string{"BAD_VERSION", "BAD_TYPE", "BAD_MULTIPART", "BAD_EXPERIMENTER", "BAD_EXP_TYPE", "EPERM", "BAD_LEN", "BUFFER_EMPTY", "BUFFER_UNKNOWN", "BAD_TABLE_ID", "IS_SLAVE", "BAD_PORT", "BAD_PACKET", "MULTIPART_BUFFER_OVERFLOW", "MULTIPART_REQUEST_TIMEOUT", "MULTIPART_REPLY_TIMEOUT", "MULTIPART_BAD_SCHED", "PIPELINE_FIELDS_ONLY", "UNKNOWN"}},
	2:  {"OFPET_BAD_ACTION", "OFPBAC_", []string{"BAD_TYPE", "BAD_LEN", "BAD_EXPERIMENTER", "BAD_EXP_TYPE", "BAD_OUT_PORT", "BAD_ARGUMENT", "EPERM", "TOO_MANY", "BAD_QUEUE", "BAD_OUT_GROUP", "MATCH_INCONSISTENT", "UNSUPPORTED_ORDER", "BAD_TAG", "BAD_SET_TYPE", "BAD_SET_LEN", "BAD_SET_ARGUMENT", "BAD_SET_MASK", "BAD_METER"}},
	3:  {"OFPET_BAD_INSTRUCTION", "OFPBIC_", []string{"UNKNOWN_INST", "UNSUP_INST", "BAD_TABLE_ID", "UNSUP_METADATA", "UNSUP_METADATA_MASK", "BAD_EXPERIMENTER", "BAD_EXP_TYPE", "BAD_LEN", "EPERM", "DUP_INST"}},
	4:  {"OFPET_BAD_MATCH", "OFPBMC_", []string{"BAD_TYPE", "BAD_LEN", "BAD_TAG", "BAD_DL_ADDR_MASK", "BAD_NW_ADDR_MASK", "BAD_WILDCARDS", "BAD_FIELD", "BAD_VALUE", "BAD_MASK", "BAD_PREREQ", "DUP_FIELD", "EPERM"}},
	5:  {"OFPET_FLOW_MOD_FAILED", "OFPFMFC_", []string{"UNKNOWN", "TABLE_FULL", "BAD_TABLE_ID", "OVERLAP", "EPERM", "BAD_TIMEOUT", "BAD_COMMAND", "BAD_FLAGS", "CANT_SYNC", "BAD_PRIORITY", "IS_SYNC"}},
	6:  {"OFPET_GROUP_MOD_FAILED", "OFPGMFC_", []string{"GROUP_EXISTS", "INVALID_GROUP", "WEIGHT_UNSUPPORTED", "OUT_OF_GROUPS", "OUT_OF_BUCKETS", "CHAINING_UNSUPPORTED", "WATCH_UNSUPPORTED", "LOOP", "UNKNOWN_GROUP", "CHAINED_GROUP", "BAD_TYPE", "BAD_COMMAND", "BAD_BUCKET", "BAD_WATCH", "EPERM", "UNKNOWN_BUCKET", "BUCKET_EXISTS"}},
	7:  {"OFPET_PORT_MOD_FAILED", "OFPPMFC_", []string{"BAD_PORT", "BAD_HW_ADDR", "BAD_CONFIG", "BAD_ADVERTISE", "EPERM"}},
	8:  {"OFPET_TABLE_MOD_FAILED", "OFPTMFC_", []string{"BAD_TABLE", "BAD_CONFIG", "EPERM"}},
	9:  {"OFPET_QUEUE_OP_FAILED", "OFPQOFC_", []string{"BAD_PORT", "BAD_QUEUE", "EPERM"}},
	10: {"OFPET_SWITCH_CONFIG_FAILED", "OFPSCFC_", []string{"BAD_FLAGS", "BAD_LEN", "EPERM"}},
	11: {"OFPET_ROLE_REQUEST_FAILED", "OFPRRFC_", []string{"STALE", "UNSUP", "BAD_ROLE", "ID_UNSUP", "ID_IN_USE"}},
	12: {"OFPET_METER_MOD_FAILED", "OFPMMFC_", []string{"UNKNOWN", "METER_EXISTS", "INVALID_METER", "UNKNOWN_METER", "BAD_COMMAND", "BAD_FLAGS", "BAD_RATE", "BAD_BURST", "BAD_BAND", "BAD_BAND_VALUE", "OUT_OF_METERS", "OUT_OF_BANDS"}},
	// Codes 2-4 were dropped in OpenFlow 1.5.
	13: {"OFPET_TABLE_FEATURES_FAILED", "OFPTFFC_", []string{"BAD_TABLE", "BAD_METADATA", "", "", "", "EPERM", "BAD_CAPA", "BAD_MAX_ENT", "BAD_FEATURES", "BAD_COMMAND", "TOO_MANY"}},
	14: {"OFPET_BAD_PROPERTY", "OFPBPC_", []string{"BAD_TYPE", "BAD_LEN", "BAD_VALUE", "TOO_MANY", "DUP_TYPE", "BAD_EXPERIMENTER", "BAD_EXP_TYPE", "BAD_EXP_VALUE", "EPERM"}},
	15: {"OFPET_ASYNC_CONFIG_FAILED", "OFPACFC_", []string{"INVALID", "UNSUPPORTED", "EPERM"}},
	16: {"OFPET_FLOW_MONITOR_FAILED", "OFPMOFC_", []string{"UNKNOWN", "MONITOR_EXISTS", "INVALID_MONITOR", "UNKNOWN_MONITOR", "BAD_COMMAND", "BAD_FLAGS", "BAD_TABLE_ID", "BAD_OUT"}},
	17: {"OFPET_BUNDLE_FAILED", "OFPBFC_", []string{"UNKNOWN", "EPERM", "BAD_ID", "BUNDLE_EXIST", "BUNDLE_CLOSED", "OUT_OF_BUNDLES", "BAD_TYPE", "BAD_FLAGS", "MSG_BAD_LEN", "MSG_BAD_XID", "MSG_UNSUP", "MSG_CONFLICT", "MSG_TOO_MANY", "MSG_FAILED", "TIMEOUT", "BUNDLE_IN_PROGRESS", "SCHED_NOT_SUPPORTED", "SCHED_FUTURE", "SCHED_PAST"}},
}

// nxErrors names the Nicira extension errors Open vSwitch sends on an
// OpenFlow 1.5 connection, by code (the NX1.2+, NX1.3+, NX1.4+ and
// NX1.4-1.5 codes of OVS's include/openvswitch/ofp-errors.h). A version's
// refusal of what it lacks is often one of them: 2.15 refuses encap(mpls)
// with NXBAC_BAD_HEADER_TYPE.
var nxErrors = map[uint16]string{
	2: "NXBRC_NXM_INVALID", 3: "NXBRC_NXM_BAD_TYPE", 4: "NXBRC_MUST_BE_ZERO", 5: "NXBRC_BAD_REASON",
	9: "NXBRC_FM_BAD_EVENT", 10: "NXBRC_UNENCODABLE_ERROR", 11: "NXBAC_MUST_BE_ZERO",
	12: "NXFMFC_HARDWARE", 13: "NXFMFC_BAD_TABLE_ID", 15: "NXBAC_BAD_CONJUNCTION",
	16: "NXTTMFC_BAD_COMMAND", 17: "NXTTMFC_BAD_OPT_LEN", 18: "NXTTMFC_BAD_FIELD_IDX", 19: "NXTTMFC_TABLE_FULL",
	20: "NXTTMFC_ALREADY_MAPPED", 21: "NXTTMFC_DUP_ENTRY", 22: "OFPBFC_BAD_VERSION", 23: "NXQOFC_QUEUE_ERROR",
	34: "NXR_NOT_SUPPORTED", 35: "NXR_STALE", 36: "NXST_NOT_CONFIGURED", 37: "NXFMFC_INVALID_TLV_FIELD",
	38: "NXTTMFC_INVALID_TLV_DEL", 39: "NXBAC_BAD_HEADER_TYPE", 40: "NXBAC_UNKNOWN_ED_PROP", 41: "NXBAC_BAD_ED_PROP",
	42: "NXBAC_CT_DATAPATH_SUPPORT", 43: "NXBMC_CT_DATAPATH_SUPPORT", 44: "NXTFFC_DUP_TABLE",
}

// ErrorName returns the symbolic name of an OpenFlow 1.5 error, e.g. ErrorName(2, 4, 0) == "OFPBAC_BAD_OUT_PORT".
// Unknown codes get a numeric description; experimenter errors (type 0xffff) name the experimenter, and Nicira's
// their code (nxErrors).
func ErrorName(typ, code uint16, experimenter uint32) string {
	if typ == errTypeExperimenter {
		switch experimenter {
		case 0x00002320:
			if n, ok := nxErrors[code]; ok {
				return n
			}
			return fmt.Sprintf("OFPET_EXPERIMENTER(NX,code=%d)", code)
		case 0x4f4e4600:
			return fmt.Sprintf("OFPET_EXPERIMENTER(ONF,code=%d)", code)
		}
		return fmt.Sprintf("OFPET_EXPERIMENTER(0x%08x,code=%d)", experimenter, code)
	}
	t, ok := errorTypes[typ]
	if !ok {
		return fmt.Sprintf("OFPET_%d(code=%d)", typ, code)
	}
	if int(code) < len(t.codes) && t.codes[code] != "" {
		return t.prefix + t.codes[code]
	}
	return fmt.Sprintf("%s(code=%d)", t.name, code)
}
