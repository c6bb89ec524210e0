package ofctl

import (
	"iter"
	"strings"
)

// kv is one key or key-value pair of ovs-ofctl syntax, with the byte offsets
// of key and value in the original line so errors can point at them.
type kv struct {
	key    string
	keyOff int
	delim  byte // ':', '=', '(' or 0 when the key stands alone
	val    string
	valOff int
}

// text returns the whole pair as written, for error messages.
func (p kv) text() string {
	switch p.delim {
	case 0:
		return p.key
	case '(':
		if strings.Contains(p.val, ")->") {
			return p.key + "(" + p.val
		}
		return p.key + "(" + p.val + ")"
	default:
		return p.key + string(p.delim) + p.val
	}
}

// scanner splits a string the way ovs-ofctl's ofputil_parse_key_value does:
// pairs are separated by commas or white space; a key ends at one of
// ":=(, \t\r\n"; after ':' or '=' the value runs to the next comma or white
// space outside parentheses, after '(' it runs to the matching ')'.
type scanner struct {
	s    string
	pos  int
	base int // offset of s within the line
	// rest, if set, names keys whose value after '=' is the whole rest of
	// the input ("actions=" in a flow).
	rest func(key string) bool
	// parens, if set, finds the end of a parenthesised value at once
	// (a long line's).
	parens *parenIndex
}

func newScanner(s string, base int) *scanner { return &scanner{s: s, base: base} }

// Byte classes of the scanner, a table rather than strings.IndexByte per
// byte: scanSep separates pairs, scanKeyEnd also ends a key.
var scanSep, scanKeyEnd [256]bool

func init() {
	for _, c := range []byte(", \t\r\n") {
		scanSep[c], scanKeyEnd[c] = true, true
	}
	for _, c := range []byte(":=(") {
		scanKeyEnd[c] = true
	}
}

// next returns the next pair; ok is false at the end of the input. An
// unbalanced parenthesis is reported through errTok.
func (sc *scanner) next() (p kv, ok bool, err error) {
	s := sc.s
	for sc.pos < len(s) && scanSep[s[sc.pos]] {
		sc.pos++
	}
	if sc.pos >= len(s) {
		return kv{}, false, nil
	}
	start := sc.pos
	end := start
	for end < len(s) && !scanKeyEnd[s[end]] {
		end++
	}
	p.key = s[start:end]
	p.keyOff = sc.base + start
	if end >= len(s) || scanSep[s[end]] {
		sc.pos = end
		p.valOff = sc.base + end
		return p, true, nil
	}
	p.delim = s[end]
	vstart := end + 1
	p.valOff = sc.base + vstart
	if p.delim == '=' && sc.rest != nil && sc.rest(p.key) {
		p.val = s[vstart:]
		sc.pos = len(s)
		return p, true, nil
	}
	if p.delim == '(' {
		i := sc.parens.closing(sc.base+end) - sc.base
		if i <= end || i >= len(s) {
			depth := 1
			for i = vstart; i < len(s); i++ {
				if s[i] == '(' {
					depth++
				} else if s[i] == ')' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
		}
		if i >= len(s) {
			return p, false, errAt(p.keyOff, s[start:], "missing ')'")
		}
		p.val = s[vstart:i]
		sc.pos = i + 1
		// "KEY(X)->Y" (check_pkt_larger) is one pair whose value is
		// "X)->Y", as in OVS's ofputil_parse_key_value.
		if strings.HasPrefix(s[i+1:], "->") {
			j := i + 3
			for j < len(s) && !scanSep[s[j]] {
				j++
			}
			p.val = s[vstart:j]
			sc.pos = j
		}
		return p, true, nil
	}
	i := vstart
	for i < len(s) && !scanSep[s[i]] {
		if s[i] == '(' {
			if j := sc.parens.closing(sc.base+i) - sc.base; j > i && j < len(s) {
				i = j + 1
				continue
			}
			depth := 0
			for i < len(s) {
				if s[i] == '(' {
					depth++
				} else if s[i] == ')' {
					depth--
				}
				i++
				if depth == 0 {
					break
				}
			}
			if depth != 0 {
				return p, false, errAt(p.keyOff, s[start:], "missing ')'")
			}
			continue
		}
		i++
	}
	p.val = s[vstart:i]
	sc.pos = i
	return p, true, nil
}

// splitTop splits s at separator sep outside parentheses, returning the
// pieces and their offsets relative to base.
func splitTop(s string, sep byte, base int) (parts []string, offs []int) {
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				parts = append(parts, s[start:i])
				offs = append(offs, base+start)
				start = i + 1
			}
		}
	}
	parts = append(parts, s[start:])
	offs = append(offs, base+start)
	return parts, offs
}

// parenIndex maps each '(' of a text to its matching ')'. A scanner nested n
// levels deep would otherwise scan the value of each level again to find its
// end: n times the text's length.
type parenIndex struct {
	base  int     // offset of the text within the line
	close []int32 // for each byte: the offset in the text of its matching ')' if it is a matched '(', else -1
}

// parenIndexMin is the shortest text worth an index: below it, scanning
// again costs less than building it.
const parenIndexMin = 4096

// indexParens indexes the parentheses of s, found at base in its line, in
// one pass.
func indexParens(s string, base int) *parenIndex {
	pi := &parenIndex{base: base, close: make([]int32, len(s))}
	var open []int32
	for i := 0; i < len(s); i++ {
		pi.close[i] = -1
		switch s[i] {
		case '(':
			open = append(open, int32(i))
		case ')':
			if n := len(open); n > 0 {
				pi.close[open[n-1]] = int32(i)
				open = open[:n-1]
			}
		}
	}
	return pi
}

// closing returns the line offset of the ')' that matches the '(' at line
// offset off, or -1 when there is none or pi is nil.
func (pi *parenIndex) closing(off int) int {
	if pi == nil || off < pi.base || off-pi.base >= len(pi.close) {
		return -1
	}
	if j := pi.close[off-pi.base]; j >= 0 {
		return pi.base + int(j)
	}
	return -1
}

// args ranges over the key[=value] items of s, which starts at byte base
// of the line: the loop of every parser of a parenthesised argument list
// (sample(...), ct(...), learn(...), ...). A scanning error is yielded
// once, with an empty item, and ends the range.
func args(s string, base int) iter.Seq2[kv, error] {
	return func(yield func(kv, error) bool) {
		sc := newScanner(s, base)
		for {
			q, ok, err := sc.next()
			if err != nil {
				yield(kv{}, err)
				return
			}
			if !ok || !yield(q, nil) {
				return
			}
		}
	}
}
