package ofproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// fuzzRecorder refuses every third change's first message and accepts the
// rest, so both answers are exercised.
type fuzzRecorder struct{ n int }

func (f *fuzzRecorder) Apply(_ context.Context, msgs []ofconn.Message) error {
	f.n++
	if f.n%3 == 0 {
		return &ofconn.BundleError{Failed: []ofconn.AddError{{Index: 0, Type: 2, Code: 9}}}
	}
	return nil
}

// FuzzRecorder feeds a recording session's controller side arbitrary
// OpenFlow 1.5 messages (the stream split at each header's length): nothing
// may panic, every answer is a well-formed message, and what is held stays
// counted exactly.
func FuzzRecorder(f *testing.F) {
	ctrl := func(xid, id uint32, typ, flags uint16) []byte {
		b := []byte{6, 33, 0, 16, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[4:], xid)
		b = binary.BigEndian.AppendUint32(b, id)
		b = binary.BigEndian.AppendUint16(b, typ)
		return binary.BigEndian.AppendUint16(b, flags)
	}
	flowMod := make([]byte, 56)
	copy(flowMod, []byte{6, 14, 0, 56, 0, 0, 0, 5})
	add := append([]byte{6, 34, 0, 72, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 3}, flowMod...)
	f.Add(append(append(append(ctrl(1, 1, 0, 3), add...), ctrl(2, 1, 4, 3)...), flowMod...))
	f.Add(append(ctrl(3, 2, 2, 3), ctrl(4, 2, 6, 3)...))
	f.Add(add[:20])
	f.Add([]byte{6, 4, 0, 16, 0, 0, 0, 1, 0, 0, 0x23, 0x20, 0, 0, 0, 24})
	f.Fuzz(func(t *testing.T, stream []byte) {
		var out bytes.Buffer
		p := &Proxy{log: slog.New(slog.DiscardHandler), ctx: context.Background()}
		s := &session{p: p, downW: bufio.NewWriter(&out)}
		r := &recorder{s: s, rec: &fuzzRecorder{}, bundles: make(map[uint32]*openBundle)}
		br := bytes.NewReader(stream)
		for {
			m, err := ofconn.ReadMessage(br)
			if err != nil {
				break
			}
			m[0] = 6
			switch classify(m) {
			case state:
				err = r.standalone(context.Background(), []ofconn.Message{m})
			case bundleCtrl:
				err = r.bundleControl(context.Background(), m)
			case bundleAdd:
				err = r.bundleAdd(m)
			}
			if err != nil {
				t.Fatalf("recorder: %v", err)
			}
		}
		held := 0
		for _, b := range r.bundles {
			for _, a := range b.adds {
				held += len(a)
			}
		}
		if held != r.held {
			t.Fatalf("held %d bytes by count, %d by the bundles", r.held, held)
		}
		if err := s.downW.Flush(); err != nil {
			t.Fatal(err)
		}
		for ans := bytes.NewReader(out.Bytes()); ; {
			m, err := ofconn.ReadMessage(ans)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil || m[0] != 6 || (m[1] != 1 && m[1] != 33) {
				t.Fatalf("malformed answer %x: %v", m, err)
			}
		}
	})
}
