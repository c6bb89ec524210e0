package canon

import (
	"bytes"
	"crypto/sha256"
	"sync"

	"github.com/flowstate-io/flowstate/entry"
)

// Opaque reports whether canon keeps part of a canonical payload as the
// controller sent it (an action, a group property or a meter band that
// ofctl does not know): the form OVS gives it is then the switch's to say,
// and the engine learns it with Forms.
func Opaque(kind entry.Kind, payload []byte) bool {
	_, _, kept, err := decode(kind, payload)
	return err == nil && kept
}

// Key is the SHA-256 of a declared canonical payload: what Forms are kept
// under.
type Key = [sha256.Size]byte

// maxChain bounds how many learned forms Apply follows: a form learned for
// a form (the switch changed its mind, after an upgrade) is followed, a loop
// of them is not.
const maxChain = 4

// Forms holds the forms the switch gave entries that canon keeps in part as
// sent: what OVS stored for exactly that declared payload, seen right after
// flowstated installed it. The engine compares and sends an entry in the
// learned form, so an entry OVS rewrites (NXAST_SET_TUNNEL to set_field
// tun_id, say) does not drift for ever. A form is learned only from a dump
// that follows flowstated's own install of the payload, so it describes
// OVS's normalisation, not someone else's change; it is persisted (package
// store), so it survives restarts of flowstated and of vswitchd.
//
// Forms is safe for concurrent use; a nil *Forms knows no forms.
type Forms struct {
	mu sync.RWMutex
	m  map[Key][]byte
}

// NewForms returns Forms that know the given forms (as the store keeps them).
func NewForms(known map[Key][]byte) *Forms {
	m := make(map[Key][]byte, len(known))
	for k, v := range known {
		m[k] = v
	}
	return &Forms{m: m}
}

// Apply returns es with the payload of every entry whose form the switch
// taught replaced by that form; es itself is not modified.
func (f *Forms) Apply(es []entry.Entry) []entry.Entry {
	if f.empty() {
		return es
	}
	var out []entry.Entry
	for i, e := range es {
		p := f.Form(e.Payload)
		if len(p) == 0 || &p[0] == &e.Payload[0] {
			continue
		}
		if out == nil {
			out = append(make([]entry.Entry, 0, len(es)), es...)
		}
		out[i].Payload = p
	}
	if out == nil {
		return es
	}
	return out
}

// Form returns the form the switch taught for a declared payload, or the
// payload itself (the same slice) when it taught none.
func (f *Forms) Form(payload []byte) []byte {
	if f.empty() || len(payload) == 0 {
		return payload
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := payload
	for range maxChain {
		form, ok := f.m[sha256.Sum256(p)]
		if !ok || bytes.Equal(form, p) {
			break
		}
		p = form
	}
	return p
}

func (f *Forms) empty() bool {
	if f == nil {
		return true
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.m) == 0
}

// Learn records that the switch holds actual for declared, which flowstated
// has just installed, and returns the key and whether the form is new (and
// so needs persisting). Equal payloads teach nothing.
func (f *Forms) Learn(declared, actual []byte) (Key, bool) {
	k := sha256.Sum256(declared)
	if bytes.Equal(declared, actual) {
		return k, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if bytes.Equal(f.m[k], actual) {
		return k, false
	}
	f.m[k] = bytes.Clone(actual)
	return k, true
}
