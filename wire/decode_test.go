package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// fastSeeds are frames both decoders see: the common shapes decodeFast
// takes and the near misses it must leave to encoding/json.
var fastSeeds = []string{
	`{"t":"typing","conv":"c-team","rid":"t"}`, `{"t":"presence","state":"away"}`, `{"t":"presence","state":"gone","rid":3}`,
	`{"t":"send","rid":"1","conv":"g","cmid":"c","body":"hi"}`,
	`{"t":"send","rid":17,"conv":"g","cmid":"c","body":"line\nnext \"q\" \\ \/ \t\b\f\r"}`,
	` { "t" : "sync" , "conv" : "g" , "after" : 0 , "limit" : 5 , "epoch" : -1 } `,
	`{"t":"recall","conv":"g","target":3,"cmid":"r","rid":9}`,
	`{"t":"ack","conv":"g","seq":1}`, `{"t":"read","conv":"g","seq":-0}`,
	`{"t":"fetch","conv":"g","seq":123456789012345678}`,
	`{"t":"fetch","conv":"g","seq":1234567890123456789}`,
	`{"t":"fetch","conv":"g","seq":99999999999999999999}`,
	`{"t":"convs","limit":2,"before":"MTIuYw"}`, `{"t":"sub"}`, `{}`, `{"t":""}`,
	`{"t":"ack","conv":"g","seq":"1"}`, `{"t":"ack","conv":"g","seq":1.5}`, `{"t":"ack","conv":"g","seq":1e2}`,
	`{"t":"ack","conv":"g","seq":01}`, `{"t":"ack","conv":"g","seq":-}`, `{"t":"ack","conv":"g","seq":null}`,
	`{"T":"send","Conv":"g","CMID":"c","BODY":"b"}`, `{"t":"send","t":"sync"}`, `{"t":"convs","x":1}`,
	`{"t":"send","conv":"g","cmid":"c","body":"\u00e9\ud83d\ude00"}`, `{"t":"send","body":"\x"}`,
	`{"t":"convs","rid":"\u0072"}`, `{"t":"convs","rid":{}}`, `{"t":"convs","rid":null}`, `{"t":"convs","rid":1.5}`,
	`{"t":"convs","rid":"` + strings.Repeat("r", MaxRIDBytes+1) + `"}`,
	`{"t":"convs","rid":` + strings.Repeat("7", 18) + `}`,
	`{"t":"convs"}{"t":"convs"}`, `{"t":"convs"},`, `{"t":"convs",}`, `{"t":"convs"`, `{"t" "convs"}`,
	`{"t":"send","conv":"g","cmid":"c","body":"re","reply_to":4}`, `{"t":"sync","conv":"g","after":0,"thread":4}`,
	`{"t":"send","conv":"g","cmid":"c","body":"re","reply_to":0}`, `{"t":"send","reply_to":4,"reply_to":5}`,
	`{"t":"react","conv":"g","target":3,"emoji":"👍","on":true,"cmid":"r"}`,
	"{\"t\":\"send\",\"body\":\"a\tb\"}", `[]`, `null`, `{"t":null}`, ``, `"t"`, `{"t":"send","body":"é✓"}`,
}

// FuzzDecodeFast: DecodeRequest (which tries decodeFast first) and the
// encoding/json decoder give the same request and the same error (code
// and message) for every frame; a frame decodeFast takes is one
// encoding/json accepts as the same Request.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		compareDecoders(t, b)
	})
}

// TestDecodeFastSame runs the fuzz comparison over the seeds (go test
// without -fuzz runs them too; this names the ones decodeFast must take).
func TestDecodeFastSame(t *testing.T) {
	for _, s := range fastSeeds {
		compareDecoders(t, []byte(s))
	}
	for _, s := range []string{fastSeeds[0], fastSeeds[1], fastSeeds[2], fastSeeds[3], fastSeeds[6], `{}`,
		`{"t":"send","conv":"g","cmid":"c","body":"re","reply_to":4}`} {
		var r Request
		if !decodeFast([]byte(s), &r) {
			t.Errorf("decodeFast left %s to encoding/json", s)
		}
	}
	for _, s := range []string{`{"t":"send","t":"sync"}`, `{"T":"send"}`, `{"t":"convs","x":1}`, `{"t":"ack","seq":1.5}`, `{"t":"ack","seq":null}`} {
		var r Request
		if decodeFast([]byte(s), &r) {
			t.Errorf("decodeFast took %s", s)
		}
	}
}

func compareDecoders(t *testing.T, b []byte) {
	t.Helper()
	got, gotErr := DecodeRequest(b)
	var want Request
	var wantErr error
	if wantErr = CheckText(b); wantErr == nil {
		want, wantErr = decodeJSON(b)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: request\n%+v\nwant (encoding/json)\n%+v", b, got, want)
	}
	if errText(gotErr) != errText(wantErr) || parley.ErrorCode(gotErr) != parley.ErrorCode(wantErr) {
		t.Fatalf("%q: error %v, want (encoding/json) %v", b, gotErr, wantErr)
	}
	var r Request
	if CheckText(b) == nil && decodeFast(b, &r) {
		var j Request
		if json.Unmarshal(b, &j) != nil || !reflect.DeepEqual(r, j) {
			t.Fatalf("%q: decodeFast took it as %+v; encoding/json gives %+v", b, r, j)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var benchSend = []byte(`{"t":"send","rid":"42","conv":"rt-07","cmid":"7-1234","body":"benchmark message 1234"}`)

// BenchmarkDecodeSend: a send frame, by DecodeRequest (fast) and by
// encoding/json (json).
func BenchmarkDecodeSend(b *testing.B) {
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeRequest(benchSend); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := CheckText(benchSend); err != nil {
				b.Fatal(err)
			}
			if _, err := decodeJSON(benchSend); err != nil {
				b.Fatal(err)
			}
		}
	})
}
