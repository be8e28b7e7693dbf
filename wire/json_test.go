package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// TestDecodeProblem: what encoding/json refuses is told by field and JSON
// kind, never by Go type or struct name.
func TestDecodeProblem(t *testing.T) {
	type body struct {
		Seq     int64    `json:"seq"`
		Target  *int64   `json:"target"`
		Body    string   `json:"body"`
		Members []string `json:"members"`
		Admin   bool     `json:"admin"`
		Ratio   float64  `json:"ratio"`
		Inner   struct {
			N uint `json:"n"`
		} `json:"inner"`
	}
	tests := []struct {
		name, in, want string
	}{
		{"string for an integer", `{"seq":"4"}`, `seq: want an integer, got a string`},
		{"fraction for an integer", `{"seq":1.5}`, `seq: want an integer, got number 1.5`},
		{"overflow", `{"seq":1e40}`, `seq: want an integer, got number 1e40`},
		{"object for a pointer integer", `{"target":{}}`, `target: want an integer, got an object`},
		{"number for a string", `{"body":4}`, `body: want a string, got a number`},
		{"string for a list", `{"members":"cy"}`, `members: want a list, got a string`},
		{"number in a list", `{"members":[1]}`, `members: want a string, got a number`},
		{"string for a bool", `{"admin":"yes"}`, `admin: want true or false, got a string`},
		{"bool for a number", `{"ratio":true}`, `ratio: want a number, got true or false`},
		{"negative for unsigned", `{"inner":{"n":-1}}`, `inner.n: want a non-negative integer, got number -1`},
		{"array for the object", `[1]`, `want a JSON object, got an array`},
		{"string for the object", `"x"`, `want a JSON object, got a string`},
		{"syntax", `{"seq":}`, `malformed JSON at byte 8`},
		{"truncated", `{"seq":4`, `malformed JSON: it ends too early`},
		{"empty", ``, `empty: want one JSON object`},
		{"unknown field", `{"sqe":4}`, `unknown field "sqe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := json.NewDecoder(bytes.NewReader([]byte(tt.in)))
			dec.DisallowUnknownFields()
			var b body
			err := dec.Decode(&b)
			if err == nil {
				t.Fatalf("%s decoded", tt.in)
			}
			got := DecodeProblem(err)
			if got != tt.want {
				t.Errorf("DecodeProblem(%s) = %q, want %q (error: %v)", tt.in, got, tt.want, err)
			}
			for _, goName := range []string{"Go ", "int64", "struct", "body.", "[]string", "float64", "uint"} {
				if strings.Contains(got, goName) {
					t.Errorf("%q names a Go type (%q)", got, goName)
				}
			}
		})
	}
}

// TestDecodeRequestMessages: a frame's INVALID_ARGUMENT message names the
// field and what it must be.
func TestDecodeRequestMessages(t *testing.T) {
	tests := []struct{ frame, want string }{
		{`{"t":"ack","conv":"g","seq":"1"}`, "seq: want an integer, got a string"},
		{`{"t":"sync","conv":"g","after":0,"limit":"all"}`, "limit: want an integer, got a string"},
		{`{"t":"send","conv":7,"cmid":"c","body":"b"}`, "conv: want a string, got a number"},
		{`[]`, "want a JSON object, got an array"},
	}
	for _, tt := range tests {
		_, err := DecodeRequest([]byte(tt.frame))
		var pe *parley.Error
		if !errors.As(err, &pe) || pe.Code != parley.CodeInvalidArgument {
			t.Fatalf("%s: %v, want INVALID_ARGUMENT", tt.frame, err)
		}
		if !strings.HasSuffix(pe.Msg, tt.want) || strings.Contains(pe.Msg, "Go ") || strings.Contains(pe.Msg, "int64") {
			t.Errorf("%s: message %q, want it to end %q", tt.frame, pe.Msg, tt.want)
		}
	}
}

// TestWriteJSONKeepsAmpersand: links and bodies are written as they are.
func TestWriteJSONKeepsAmpersand(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, map[string]string{"url": "/download/j?exp=1&kid=k&sig=s&u=ben", "body": "<a>"}); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), `{"body":"<a>","url":"/download/j?exp=1&kid=k&sig=s&u=ben"}`+"\n"; got != want {
		t.Errorf("got %s want %s", got, want)
	}
	if got := string(MarshalFrame(Error(parley.CodeInvalidArgument, "a & b <c>"))); strings.Contains(got, `\u00`) {
		t.Errorf("frame escapes HTML: %s", got)
	}
}
