package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/errdefs"
)

// TestChunks: a request is cut into messages of at most chunkEntries entries
// and chunkBytes (or one entry, whatever its size), in order, and an empty
// request is still one message (it carries the bridge and module).
func TestChunks(t *testing.T) {
	big := strings.Repeat("x", chunkBytes)
	distinct := make([]Entry, 2*chunkEntries+1)
	for i := range distinct {
		distinct[i] = FlowText(strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name string
		es   []Entry
		want []int // entries per message
	}{
		{"empty", nil, []int{0}},
		{"one", []Entry{FlowText("a")}, []int{1}},
		{"by count", distinct, []int{chunkEntries, chunkEntries, 1}},
		{"by bytes", []Entry{FlowText(big[:chunkBytes/2]), FlowText(big[:chunkBytes/2]), FlowText("a")}, []int{1, 2}},
		{"an entry over the budget goes alone", []Entry{FlowText("a"), FlowText(big), FlowText("b")}, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			firsts := 0
			seen := 0
			n, err := chunks(entries(tc.es), func(first bool, part []Entry) error {
				if first {
					firsts++
				}
				for i := range part {
					if part[i].Text != tc.es[seen+i].Text {
						t.Fatalf("message %d: entries out of order", len(got))
					}
				}
				seen += len(part)
				got = append(got, len(part))
				return nil
			})
			if err != nil || firsts != 1 || seen != len(tc.es) || n != seen || len(got) != len(tc.want) {
				t.Fatalf("chunks %v (err %v, %d first), want %v", got, err, firsts, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("chunks %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestChunksSeqError: an error of the entries' source stops the messages
// there and is returned, with how many entries were sent before it.
func TestChunksSeqError(t *testing.T) {
	errRead := errors.New("read failed")
	seq := func(yield func(Entry, error) bool) {
		for i := range chunkEntries + 10 {
			if !yield(FlowText(strconv.Itoa(i)), nil) {
				return
			}
		}
		yield(Entry{}, errRead)
	}
	messages := 0
	n, err := chunks(seq, func(bool, []Entry) error { messages++; return nil })
	if !errors.Is(err, errRead) || messages != 1 || n != chunkEntries+10 {
		t.Fatalf("chunks: %d entries in %d messages, %v; want the first message sent, then the source's error", n, messages, err)
	}
}

// TestDeleteOverOneMessage: a Delete is one message; one over the limit is
// refused before it is sent, naming the limit and the remedy.
func TestDeleteOverOneMessage(t *testing.T) {
	c, err := New("unix:///nonexistent/flowstate.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	es := make([]Entry, 300)
	for i := range es {
		es[i] = FlowText(strings.Repeat("x", 60<<10))
	}
	_, err = c.Delete(context.Background(), Module{Bridge: "br-int", Name: "pod"}, es...)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "16777216 bytes of one message") ||
		!strings.Contains(err.Error(), "split it") {
		t.Fatalf("delete of 18 MB: %v", err)
	}
}
