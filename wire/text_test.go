package wire

import (
	"encoding/json"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

func TestCheckText(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		ok   bool
	}{
		{"plain", `{"body":"hello"}`, true},
		{"raw multibyte", `{"body":"héllo 😀"}`, true},
		{"raw U+FFFD is text like any other", "{\"body\":\"\uFFFD\"}", true},
		{"valid pair", `{"body":"\ud83d\ude00"}`, true},
		{"valid pair, upper case", `{"body":"\uD83D\uDE00"}`, true},
		{"two pairs", `{"body":"\ud83d\ude00\ud83d\ude01"}`, true},
		{"BMP escape", `{"body":"\u00e9\u4e2d"}`, true},
		{"escaped backslash then u", `{"body":"\\ud800"}`, true},
		{"escaped backslash, then a pair", `{"body":"\\\ud83d\ude00"}`, true},
		{"one-character escapes", `{"body":"\"\\\/\b\f\n\r\t"}`, true},
		{"raw 0xff", "{\"body\":\"a\xffb\"}", false},
		{"truncated UTF-8", "{\"body\":\"\xe2\x82\"}", false},
		{"encoded surrogate in raw UTF-8", "{\"body\":\"\xed\xa0\x80\"}", false},
		{"lone high", `{"body":"\ud800"}`, false},
		{"lone high at end of string", `{"body":"a\udbff"}`, false},
		{"lone low", `{"body":"\udc00"}`, false},
		{"low then high", `{"body":"\ude00\ud83d"}`, false},
		{"high then text", `{"body":"\ud83dx\ude00"}`, false},
		{"high then BMP escape", `{"body":"\ud83d\u0041"}`, false},
		{"high then high", `{"body":"\ud83d\ud83d\ude00"}`, false},
		{"pair then lone low", `{"body":"\ud83d\ude00\ude00"}`, false},
		{"in a key", `{"\ud800":"x"}`, false},
		{"in the rid", `{"t":"convs","rid":"\udfff"}`, false},
	}
	for _, tt := range tests {
		err := CheckText([]byte(tt.raw))
		if got := err == nil; got != tt.ok {
			t.Errorf("%s: CheckText(%q) = %v, want ok %v", tt.name, tt.raw, err, tt.ok)
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("%s: code %s, want INVALID_ARGUMENT", tt.name, parley.ErrorCode(err))
		}
	}
}

// TestDecodeRequestSurrogates: the gateway's decoder refuses a lone
// surrogate escape that encoding/json alone would store as U+FFFD.
func TestDecodeRequestSurrogates(t *testing.T) {
	frame := `{"t":"send","rid":"1","conv":"g","cmid":"c","body":"\ud800"}`
	var r Request
	if err := json.Unmarshal([]byte(frame), &r); err != nil || r.Body != "\uFFFD" {
		t.Fatalf("encoding/json no longer replaces a lone surrogate (%q, %v): this check may be moot", r.Body, err)
	}
	if _, err := DecodeRequest([]byte(frame)); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Fatalf("DecodeRequest(lone surrogate) = %v, want INVALID_ARGUMENT", err)
	}
	if r, err := DecodeRequest([]byte(`{"t":"send","conv":"g","cmid":"c","body":"\ud83d\ude00"}`)); err != nil || r.Body != "😀" {
		t.Fatalf("DecodeRequest(pair) = %q, %v", r.Body, err)
	}
}

// FuzzCheckText compares CheckText with a reference decoding: the input,
// put inside quotes, is taken as one JSON string and decoded in full into
// UTF-16 code units (raw UTF-8 characters encoded, escapes taken as they
// are); it is acceptable exactly when the input is valid UTF-8 and those
// units decode with no unpaired surrogate. When acceptable, encoding/json
// must decode the string to the same text. Any bytes at all must not panic
// the scan.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{
		`hello`, `\ud83d\ude00`, `\ud800`, `\udc00`, `\ud83dx`, `\\ud800`, `\\\ud800`,
		`\ud83d\u0041`, `\u00e9`, "\xff", `\"\n`, `\u12`, `\`, `\ud83d\ude`, "\uFFFD",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = CheckText(b) // arbitrary bytes: must not panic
		doc := append(append([]byte{'"'}, b...), '"')
		if !json.Valid(doc) {
			return // not one JSON string: the decoder refuses it anyway
		}
		units, ok := referenceUnits(b)
		if !ok {
			t.Fatalf("json.Valid accepted %q but the reference cannot decode it", doc)
		}
		want := utf8.Valid(doc) && pairedUnits(units)
		err := CheckText(doc)
		if got := err == nil; got != want {
			t.Fatalf("CheckText(%q) = %v, reference says acceptable %v", doc, err, want)
		}
		if want {
			var s string
			if err := json.Unmarshal(doc, &s); err != nil {
				t.Fatalf("json.Unmarshal(%q): %v", doc, err)
			}
			if ref := string(utf16.Decode(units)); s != ref {
				t.Fatalf("json decodes %q as %q, the reference as %q", doc, s, ref)
			}
		}
	})
}

// referenceUnits decodes the inside of a JSON string into UTF-16 code
// units, escapes as they are written (so a lone surrogate stays visible).
func referenceUnits(b []byte) ([]uint16, bool) {
	var units []uint16
	for len(b) > 0 {
		if b[0] != '\\' {
			r, n := utf8.DecodeRune(b)
			units = utf16.AppendRune(units, r)
			b = b[n:]
			continue
		}
		if len(b) < 2 {
			return nil, false
		}
		switch c := b[1]; c {
		case '"', '\\', '/':
			units, b = append(units, uint16(c)), b[2:]
		case 'b':
			units, b = append(units, '\b'), b[2:]
		case 'f':
			units, b = append(units, '\f'), b[2:]
		case 'n':
			units, b = append(units, '\n'), b[2:]
		case 'r':
			units, b = append(units, '\r'), b[2:]
		case 't':
			units, b = append(units, '\t'), b[2:]
		case 'u':
			if len(b) < 6 {
				return nil, false
			}
			var u uint16
			for _, h := range b[2:6] {
				var d byte
				switch {
				case h >= '0' && h <= '9':
					d = h - '0'
				case h >= 'a' && h <= 'f':
					d = h - 'a' + 10
				case h >= 'A' && h <= 'F':
					d = h - 'A' + 10
				default:
					return nil, false
				}
				u = u<<4 | uint16(d)
			}
			units, b = append(units, u), b[6:]
		default:
			return nil, false
		}
	}
	return units, true
}

// pairedUnits reports whether every surrogate in units is half of a pair.
func pairedUnits(units []uint16) bool {
	for i := 0; i < len(units); i++ {
		u := rune(units[i])
		if !utf16.IsSurrogate(u) {
			continue
		}
		if i+1 < len(units) && utf16.DecodeRune(u, rune(units[i+1])) != utf8.RuneError {
			i++
			continue
		}
		return false
	}
	return true
}
