package server

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendJSON encodes a decoded JSON value (maps, slices, strings, json.Number,
// bools, nil) exactly as encoding/json would — sorted map keys, HTML-safe
// string escaping — without reflection. Other types fall back to json.Marshal.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case map[string]any:
		b = append(b, '{')
		var small [16]string
		keys := small[:0]
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, t[k]); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case string:
		return appendJSONString(b, t), nil
	case json.Number:
		if t == "" {
			return append(b, '0'), nil
		}
		return append(b, t...), nil
	case bool:
		return strconv.AppendBool(b, t), nil
	case nil:
		return append(b, "null"...), nil
	case []string:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, e)
		}
		return append(b, ']'), nil
	case map[string]string:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = e
		}
		return appendJSON(b, m)
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, enc...), nil
}

const hexDigits = "0123456789abcdef"

// safe[c] is true for ASCII bytes that encoding/json copies unescaped.
var safe = func() (s [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		s[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainWord reports whether 8 bytes need no escaping: all in [0x20, 0x80)
// and none of " \ < > &.
func plainWord(w uint64) bool {
	hasZero := func(x uint64) uint64 { return (x - lsb) & ^x & msb }
	bad := w & msb                   // non-ASCII
	bad |= (w - 0x20*lsb) & ^w & msb // < 0x20
	bad |= hasZero(w ^ ('"' * lsb))
	bad |= hasZero(w ^ ('\\' * lsb))
	bad |= hasZero(w ^ ('<' * lsb))
	bad |= hasZero(w ^ ('>' * lsb))
	bad |= hasZero(w ^ ('&' * lsb))
	return bad == 0
}

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			if plainWord(w) {
				i += 8
				continue
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
