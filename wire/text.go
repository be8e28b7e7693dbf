package wire

import (
	"unicode/utf8"

	"github.com/parleychat/parley"
)

// CheckText checks the raw bytes of a JSON request (a WebSocket frame or an
// HTTP body, webhooks included) before it is decoded: every string in it
// must be valid Unicode. Both transports call it, so both refuse the same
// input. The error is INVALID_ARGUMENT.
//
// encoding/json accepts both faults silently and replaces them with U+FFFD,
// so a message would be stored other than it was sent:
//   - bytes that are not valid UTF-8;
//   - a \u escape of a UTF-16 surrogate (\ud800–\udfff) that is not part of
//     a pair: a high surrogate (\ud800–\udbff) must be followed at once by
//     a \u escape of a low one (\udc00–\udfff), and a low one must follow a
//     high one. "\ud83d\ude00" (one emoji) is fine.
//
// The scan needs no JSON parse: in valid JSON a backslash appears only
// inside strings, where escapes are read left to right, so taking every
// backslash as the start of an escape finds exactly the string escapes. In
// input that is not valid JSON the answer does not matter (the decoder
// refuses it anyway); the scan only never fails to terminate.
func CheckText(raw []byte) error {
	if !utf8.Valid(raw) {
		return parley.Errorf(parley.CodeInvalidArgument, "request is not valid UTF-8")
	}
	if i := loneSurrogate(raw); i >= 0 {
		return parley.Errorf(parley.CodeInvalidArgument, "request holds a lone UTF-16 surrogate escape at byte %d (\\ud800–\\udfff must form a pair)", i)
	}
	return nil
}

// loneSurrogate returns the offset of the first \u escape of a surrogate
// that is not in a valid pair, or -1.
func loneSurrogate(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) {
			return -1
		}
		if b[i+1] != 'u' {
			i++ // a one-character escape: \" \\ \/ \b \f \n \r \t
			continue
		}
		u, ok := hex4(b, i+2)
		if !ok {
			i++
			continue
		}
		switch {
		case u >= 0xDC00 && u <= 0xDFFF:
			return i // a low surrogate with no high one before it
		case u >= 0xD800 && u <= 0xDBFF:
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // the pair, both escapes
					continue
				}
			}
			return i
		}
		i += 5
	}
	return -1
}

// hex4 reads four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
