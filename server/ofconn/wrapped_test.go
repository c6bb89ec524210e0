package ofconn

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzCompleteGroupDesc: no stream crashes the reader of wrapped group
// descriptions or makes it read past what the stream holds; what it returns
// starts with the reply it was given. Seeds: testdata/fuzz/FuzzCompleteGroupDesc
// (a reply, then the bytes that follow it on the wire).
func FuzzCompleteGroupDesc(f *testing.F) {
	f.Fuzz(func(t *testing.T, reply, rest []byte) {
		if len(reply) < headerLen+8 {
			return
		}
		got, err := completeGroupDesc(bufio.NewReader(bytes.NewReader(rest)), reply)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(got, reply) || len(got) > len(reply)+len(rest) {
			t.Fatalf("%d bytes from a reply of %d and %d more", len(got), len(reply), len(rest))
		}
	})
}

// wrappedReply builds the GROUP_DESC reply OVS 3.1 sends for one group of
// n buckets of size bytes each, with props after them: every length field
// modulo 65536.
func wrappedReply(n, size int, props []byte) []byte {
	f := make([]byte, headerLen+8+minGroupDesc)
	f[0], f[1] = 6, 19
	be.PutUint16(f[8:], 7)
	for i := range n {
		b := make([]byte, size)
		be.PutUint16(b, uint16(size))
		be.PutUint16(b[2:], uint16(size-8))
		be.PutUint32(b[4:], uint32(i))
		f = append(f, b...)
	}
	be.PutUint16(f[headerLen+8+8:], uint16(n*size))
	f = append(f, props...)
	be.PutUint16(f[headerLen+8:], uint16(len(f)-headerLen-8))
	be.PutUint16(f[2:], uint16(len(f)))
	return f
}

// TestCompleteGroupDesc: a reply whose lengths wrapped is read whole, with
// or without properties, also when its buckets happen to end at the wrapped
// length (the next message decides), and a reply that did not wrap is left
// alone.
func TestCompleteGroupDesc(t *testing.T) {
	selection := make([]byte, 40)
	be.PutUint16(selection, 0xffff)
	be.PutUint16(selection[2:], 40)
	barrier := []byte{6, 21, 0, 8, 0, 0, 0, 9}
	for _, tc := range []struct {
		name    string
		n, size int
		props   []byte
	}{
		{"small", 10, 24, nil},
		{"wrapped", 3000, 24, nil},
		{"wrapped with properties", 3000, 56, selection},
		// 16+16+4096*16 = 65568: the wrapped cut (32 bytes) falls after the first bucket.
		{"buckets end at the wrapped length", 4096, 16, nil},
		{"twice wrapped", 9000, 16, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := wrappedReply(tc.n, tc.size, tc.props)
			cut := len(full) & 0xffff
			if cut < headerLen+8 {
				t.Fatalf("test reply of %d bytes cuts at %d", len(full), cut)
			}
			got, err := completeGroupDesc(bufio.NewReader(bytes.NewReader(append(bytes.Clone(full[cut:]), barrier...))), full[:cut])
			if err != nil || !bytes.Equal(got, full) {
				t.Fatalf("read %d bytes (%v), want %d", len(got), err, len(full))
			}
			if _, err := splitEntries(got, 7, minGroupDesc, func(raw []byte) error {
				if len(raw) != len(full)-headerLen-8 {
					t.Fatalf("entry of %d bytes", len(raw))
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
