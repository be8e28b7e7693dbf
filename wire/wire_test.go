package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		code  parley.Code // "" = valid
		rid   string
	}{
		{"send", `{"t":"send","rid":"1","conv":"g","cmid":"c","body":"hi"}`, "", `"1"`},
		{"sync", `{"t":"sync","conv":"g","after":0}`, "", ""},
		{"sync with limit and epoch", `{"t":"sync","conv":"g","after":3,"limit":500,"epoch":2}`, "", ""},
		{"ack", `{"t":"ack","conv":"g","seq":1}`, "", ""},
		{"read", `{"t":"read","conv":"g","seq":1}`, "", ""},
		{"recall", `{"t":"recall","conv":"g","target":3,"cmid":"r"}`, "", ""},
		{"convs", `{"t":"convs"}`, "", ""},
		{"fetch", `{"t":"fetch","conv":"g","seq":2}`, "", ""},
		{"sub", `{"t":"sub","rid":7}`, "", "7"},
		{"typing", `{"t":"typing","conv":"c-team"}`, "", ""},
		{"typing with rid", `{"t":"typing","conv":"c-team","rid":"r"}`, "", `"r"`},
		{"typing without conv", `{"t":"typing","rid":"r"}`, parley.CodeInvalidArgument, `"r"`},
		{"typing in a malformed conv", `{"t":"typing","conv":"a b"}`, parley.CodeInvalidArgument, ""},
		{"typing with conv a number", `{"t":"typing","conv":5}`, parley.CodeInvalidArgument, ""},
		{"presence away", `{"t":"presence","state":"away"}`, "", ""},
		{"presence online", `{"t":"presence","state":"online","rid":1}`, "", "1"},
		{"presence offline", `{"t":"presence","state":"offline"}`, parley.CodeInvalidArgument, ""},
		{"presence in another case", `{"t":"presence","state":"Away"}`, parley.CodeInvalidArgument, ""},
		{"presence without state", `{"t":"presence"}`, parley.CodeInvalidArgument, ""},
		{"presence state escaped", `{"t":"presence","state":"\u0061way"}`, "", ""},
		{"unknown fields are ignored", `{"t":"convs","x":1}`, "", ""},
		{"invalid UTF-8", "{\"t\":\"convs\",\"rid\":\"\xff\"}", parley.CodeInvalidArgument, ""},
		{"not JSON", `nope`, parley.CodeInvalidArgument, ""},
		{"array", `[]`, parley.CodeInvalidArgument, ""},
		{"two objects", `{"t":"convs"}{"t":"convs"}`, parley.CodeInvalidArgument, ""},
		{"no type", `{"rid":"a"}`, parley.CodeInvalidArgument, `"a"`},
		{"unknown type", `{"t":"x","rid":"a"}`, parley.CodeInvalidArgument, `"a"`},
		{"send without cmid", `{"t":"send","conv":"g","body":"b"}`, parley.CodeInvalidArgument, ""},
		{"sync without after", `{"t":"sync","conv":"g"}`, parley.CodeInvalidArgument, ""},
		{"sync limit 0", `{"t":"sync","conv":"g","after":0,"limit":0}`, parley.CodeInvalidArgument, ""},
		{"ack without seq", `{"t":"ack","conv":"g"}`, parley.CodeInvalidArgument, ""},
		{"recall without target", `{"t":"recall","conv":"g","cmid":"r"}`, parley.CodeInvalidArgument, ""},
		{"seq as string keeps rid", `{"t":"ack","rid":"k","conv":"g","seq":"1"}`, parley.CodeInvalidArgument, `"k"`},
		{"seq fraction", `{"t":"ack","conv":"g","seq":1.5}`, parley.CodeInvalidArgument, ""},
		{"rid object", `{"t":"convs","rid":{}}`, parley.CodeInvalidArgument, ""},
		{"rid of 128 bytes", `{"t":"convs","rid":"` + strings.Repeat("r", MaxRIDBytes) + `"}`, "", `"` + strings.Repeat("r", MaxRIDBytes) + `"`},
		{"rid of 129 bytes", `{"t":"convs","rid":"` + strings.Repeat("r", MaxRIDBytes+1) + `"}`, parley.CodeInvalidArgument, ""},
		{"rid of 128 bytes written with escapes", `{"t":"convs","rid":"` + strings.Repeat(`\u0072`, MaxRIDBytes) + `"}`, "", `"` + strings.Repeat(`\u0072`, MaxRIDBytes) + `"`},
		{"rid number of 128 digits", `{"t":"convs","rid":` + strings.Repeat("7", MaxRIDBytes) + `}`, "", strings.Repeat("7", MaxRIDBytes)},
		{"rid number of 129 digits", `{"t":"convs","rid":` + strings.Repeat("7", MaxRIDBytes+1) + `}`, parley.CodeInvalidArgument, ""},
	}
	for _, tt := range tests {
		r, err := DecodeRequest([]byte(tt.frame))
		if got := parley.ErrorCode(err); got != tt.code {
			t.Errorf("%s: code %q (%v), want %q", tt.name, got, err, tt.code)
		}
		if string(r.RID) != tt.rid {
			t.Errorf("%s: rid %s, want %s", tt.name, r.RID, tt.rid)
		}
	}
}

func TestSyncRequestDefaults(t *testing.T) {
	r, err := DecodeRequest([]byte(`{"t":"sync","conv":"g","after":4}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.SyncRequest(); got.Limit != parley.DefaultPage || got.Epoch != 0 || got.After != 4 {
		t.Fatalf("defaults: %+v", got)
	}
	r, _ = DecodeRequest([]byte(`{"t":"sync","conv":"g","after":0,"limit":9999}`))
	if got := r.SyncRequest(); got.Limit != parley.MaxPage {
		t.Fatalf("limit not capped: %+v", got)
	}
}

// TestFrameShapes pins the JSON of replies: fields a type carries are
// present even when zero, and others are absent.
func TestFrameShapes(t *testing.T) {
	tests := []struct {
		f    Frame
		want string
	}{
		{Sent(parley.Sent{Conv: "g", Seq: 3, MID: "m", Epoch: 1}), `{"t":"sent","conv":"g","seq":3,"mid":"m","dup":false,"epoch":1}`},
		{Page(parley.Page{Conv: "g", Head: 0, MinSeq: 1, Epoch: 1}), `{"t":"page","conv":"g","epoch":1,"events":[],"next_after":0,"has_more":false,"head":0,"min_seq":1,"trimmed":false}`},
		{Acked("g", 0), `{"t":"acked","conv":"g","delivered":0}`},
		{ReadOK("g", 2), `{"t":"read_ok","conv":"g","read":2}`},
		{Convs(parley.ConvsPage{}), `{"t":"convs","has_more":false,"convs":[]}`},
		{Convs(parley.ConvsPage{HasMore: true, Next: "MTIuYw"}), `{"t":"convs","has_more":true,"convs":[],"next":"MTIuYw"}`},
		{Error(parley.CodeNotMember, "m"), `{"t":"error","code":"NOT_MEMBER","msg":"m"}`},
		{Hint("g", 5, nil), `{"t":"hint","conv":"g","head":5}`},
		{Goaway(), `{"t":"goaway"}`},
	}
	for _, tt := range tests {
		if got := string(MarshalFrame(tt.f)); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

// FuzzDecodeRequest: no frame panics the decoder; an accepted frame has a
// known type, its required fields, a valid rid, and came as valid UTF-8.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"t":"send","rid":"1","conv":"g","cmid":"c","body":"hi"}`,
		`{"t":"sync","conv":"g","after":0,"limit":5,"epoch":1}`,
		`{"t":"recall","conv":"g","target":3,"cmid":"r","rid":9}`,
		`{"t":"ack","conv":"g","seq":"1"}`,
		`{"t":"edit","conv":"g","target":3,"cmid":"e","body":"fixed"}`,
		`{"t":"react","conv":"g","target":3,"emoji":"👍","on":true,"cmid":"r"}`,
		`{"t":"send","conv":"g","cmid":"c","body":"re","reply_to":3}`,
		`{"t":"typing","conv":"c-team","rid":"t1"}`, `{"t":"typing","conv":""}`,
		`{"t":"presence","state":"away"}`, `{"t":"presence","state":"offline","rid":2}`,
		"{\"t\":\"convs\",\"rid\":\"\xff\"}",
		`[]`, `null`, `{"t":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			if parley.ErrorCode(err) != parley.CodeInvalidArgument {
				t.Fatalf("error code %s, want INVALID_ARGUMENT", parley.ErrorCode(err))
			}
			if !validRID(r.RID) {
				t.Fatalf("an invalid rid %q would be echoed", r.RID)
			}
			return
		}
		if !utf8.Valid(b) {
			t.Fatal("accepted invalid UTF-8")
		}
		if _, ok := required[r.T]; !ok {
			t.Fatalf("accepted unknown type %q", r.T)
		}
		if r.check() != nil || !validRID(r.RID) {
			t.Fatal("accepted a request that fails its own checks")
		}
		if r.RID != nil && !json.Valid(r.RID) {
			t.Fatal("rid is not JSON")
		}
	})
}

// FuzzDecodeFrame: a client decodes whatever a server (or something posing
// as one) sends; no input panics it, and an accepted frame has a type and
// encodes back to JSON that decodes to the same frame.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range []Frame{
		Sent(parley.Sent{Conv: "g", Seq: 3, MID: "m", Epoch: 1}),
		Page(parley.Page{Conv: "g", Events: []parley.Event{{Conv: "g", Seq: 1, Kind: parley.EventMessage, Body: "hi"}}, Head: 1, MinSeq: 1, Epoch: 1}),
		Convs(parley.ConvsPage{Convs: []parley.ConvSummary{{Conv: "g", Head: 2}}, HasMore: true, Next: "MTIuZw"}),
		Error(parley.CodeRateLimited, "slow down"),
		Hint("g", 5, nil),
		Resync(),
		Typing("g", "ben", time.Date(2026, 12, 7, 12, 0, 5, 0, time.UTC)),
		PresencePush(parley.Presence{User: "ben", State: parley.PresenceAway, LastSeen: time.Date(2026, 12, 7, 12, 0, 5, 0, time.UTC)}),
		PresencePush(parley.Presence{User: "cy", State: parley.PresenceOffline}),
	} {
		f.Add(MarshalFrame(fr))
	}
	f.Add([]byte(`{"t":"event","ev":{"seq":"x"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		if fr.T == "" {
			t.Fatal("accepted a frame without t")
		}
		again, err := DecodeFrame(MarshalFrame(fr))
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if string(MarshalFrame(again)) != string(MarshalFrame(fr)) {
			t.Fatalf("frame changed in a round trip:\n%s\n%s", MarshalFrame(fr), MarshalFrame(again))
		}
	})
}
