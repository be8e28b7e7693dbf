package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// WriteJSON writes v as one line of JSON to w. Every JSON answer of the
// server (HTTP bodies, problem details, WebSocket frames) goes through it,
// so both transports write the same bytes: '&', '<' and '>' stay literal
// instead of encoding/json's HTML escapes (\u0026 …), because a download
// link whose '&' reads as \u0026 is refused when pasted.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// marshal is WriteJSON into a byte slice, without the trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DecodeProblem says, for people, what is wrong with a JSON body or frame
// that encoding/json refused: which field, and what it must be
// ("seq: want an integer, got a string"), never the Go types behind it.
// Both transports build their INVALID_ARGUMENT messages with it.
func DecodeProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "a JSON object"
		if te.Type != nil {
			want = jsonKind(te.Type)
		}
		got := te.Value
		if got != "" && !strings.HasPrefix(got, "number ") {
			got = article(got)
		}
		if te.Field == "" {
			return fmt.Sprintf("want %s, got %s", want, got)
		}
		return fmt.Sprintf("%s: want %s, got %s", te.Field, want, got)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	}
	if errors.Is(err, io.EOF) {
		return "empty: want one JSON object"
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "malformed JSON: it ends too early"
	}
	// encoding/json has no type for these; the messages are its own.
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + field
	}
	return "want one JSON object"
}

// jsonKind names what a Go type accepts, in JSON's terms.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a JSON object"
}

// article puts "a"/"an" before a JSON kind as encoding/json names it
// ("string", "object", "array", "bool").
func article(kind string) string {
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "true or false"
	}
	return "a " + kind
}
