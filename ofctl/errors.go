package ofctl

import (
	"errors"
	"fmt"
	"strconv"
)

// SyntaxError reports a line of ovs-ofctl syntax that cannot be turned into
// an OpenFlow message, pointing at the offending token.
type SyntaxError struct {
	Line  int    // 1-based line number within a file; 0 for a single flow
	Col   int    // 1-based byte column of Token within the line
	Token string // the offending text, possibly empty at end of input
	Msg   string // what is wrong, e.g. "unknown field"
	err   error  // the cause when it has a type of its own (*LimitError)
}

// Unwrap returns the cause of e, a *LimitError when the text passes one of
// OVS's limits, or nil.
func (e *SyntaxError) Unwrap() error { return e.err }

func (e *SyntaxError) Error() string {
	var where string
	if e.Line > 0 {
		where = fmt.Sprintf("line %d, column %d", e.Line, e.Col)
	} else {
		where = fmt.Sprintf("column %d", e.Col)
	}
	return fmt.Sprintf("ofctl: %s (%s): %s", where, strconv.Quote(e.Token), e.Msg)
}

// errAt builds a SyntaxError for token tok found at byte offset off (0-based)
// of the line.
func errAt(off int, tok, format string, args ...any) *SyntaxError {
	return &SyntaxError{Col: off + 1, Token: tok, Msg: fmt.Sprintf(format, args...)}
}

// maxToken is the longest token an error quotes: a refused line may be a
// megabyte long.
const maxToken = 64

// errLimit is errAt for a refusal by one of OVS's limits, quoting at most
// maxToken bytes of tok.
func errLimit(off int, tok string, le error) *SyntaxError {
	if len(tok) > maxToken {
		tok = tok[:maxToken] + "..."
	}
	msg := le.Error()
	var e *LimitError
	if errors.As(le, &e) {
		msg = e.text()
	}
	se := errAt(off, tok, "%s", msg)
	se.err = le
	return se
}
