package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// TestDecodeSearch: a search frame needs q; before is a time in RFC 3339;
// limit is at least 1 (the store caps it). The query itself is left to
// parley.ParseSearch, which the use case runs.
func TestDecodeSearch(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		msg   string // "" = valid; else the error's message
	}{
		{"query only", `{"t":"search","rid":"1","q":"blue boat"}`, ""},
		{"every field", `{"t":"search","q":"boat*","conv":"g","from":"ana","before":"2026-12-02T21:40:00Z","limit":5,"cursor":"MTIz"}`, ""},
		{"before with offset and fraction", `{"t":"search","q":"x","before":"2026-12-02T22:40:00.5+01:00"}`, ""},
		{"limit above the page is capped later", `{"t":"search","q":"x","limit":5000}`, ""},
		{"without q", `{"t":"search","conv":"g"}`, "search needs q"},
		{"empty q", `{"t":"search","q":""}`, "search needs q"},
		{"q not a string", `{"t":"search","q":4}`, "frame is not a JSON request object: q: want a string, got a number"},
		{"limit 0", `{"t":"search","q":"x","limit":0}`, "limit must be at least 1"},
		{"before a date only", `{"t":"search","q":"x","before":"2026-12-02"}`, "before must be a time in RFC 3339, such as 2026-12-02T21:40:00Z"},
		{"before without a zone", `{"t":"search","q":"x","before":"2026-12-02T21:40:00"}`, "before must be a time in RFC 3339, such as 2026-12-02T21:40:00Z"},
		{"before a number", `{"t":"search","q":"x","before":1764711600000}`, "frame is not a JSON request object: before: want a string, got a number"},
		{"before 1970", `{"t":"search","q":"x","before":"1970-01-01T00:00:00Z"}`, "before must be later than 1970-01-01T00:00:00.001Z"},
	}
	for _, tt := range tests {
		r, err := DecodeRequest([]byte(tt.frame))
		if tt.msg == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		var pe *parley.Error
		if !errors.As(err, &pe) || pe.Code != parley.CodeInvalidArgument || pe.Msg != tt.msg {
			t.Errorf("%s: %v, want INVALID_ARGUMENT %q", tt.name, err, tt.msg)
		}
		if strings.Contains(tt.frame, `"rid"`) && r.RID == nil {
			t.Errorf("%s: rid lost", tt.name)
		}
	}
}

func TestSearchRequestConversion(t *testing.T) {
	r, err := DecodeRequest([]byte(`{"t":"search","q":"boat*","conv":"g","from":"ana","before":"2026-12-02T22:40:00.5+01:00","limit":5,"cursor":"MTIz"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.SearchRequest()
	if err != nil {
		t.Fatal(err)
	}
	want := parley.SearchRequest{Query: "boat*", Conv: "g", From: "ana", Limit: 5, Cursor: "MTIz",
		Before: time.Date(2026, 12, 2, 21, 40, 0, 5e8, time.UTC)}
	if !got.Before.Equal(want.Before) {
		t.Errorf("before %v, want %v", got.Before, want.Before)
	}
	got.Before = want.Before
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	r, _ = DecodeRequest([]byte(`{"t":"search","q":"x"}`))
	if got, _ := r.SearchRequest(); got.Limit != 0 || !got.Before.IsZero() {
		t.Errorf("defaults: %+v, want limit 0 (the store's default) and no before", got)
	}
}

// TestResultsShape pins the results frame: hits and each hit's highlights
// are lists even when empty, next only when set, and the event is encoded
// as everywhere else (FromEvent, with its derived state).
func TestResultsShape(t *testing.T) {
	at := time.Date(2026, 12, 2, 21, 40, 0, 123e6, time.UTC)
	page := parley.SearchPage{Next: "MTc2NDcxMTYwMDEyMy40Lmc", Hits: []parley.SearchHit{
		{Event: parley.Event{Conv: "g", Seq: 4, MID: "m4", Kind: parley.EventMessage, Sender: "ana", Device: "d", Body: "the blue boat", At: at,
			Derived: &parley.Derived{AsOf: 9, EditSeq: 6, EditedAt: at.Add(time.Second)}},
			Highlights: []parley.Highlight{{Start: 4, End: 8}, {Start: 9, End: 13}}},
		{Event: parley.Event{Conv: "g", Seq: 3, MID: "m3", Kind: parley.EventMessage, Sender: "ben", Device: "d", Body: "🚤", At: at}},
	}}
	want := `{"t":"results","next":"MTc2NDcxMTYwMDEyMy40Lmc","hits":[` +
		`{"ev":{"conv":"g","seq":4,"mid":"m4","kind":"message","sender":"ana","device":"d","body":"the blue boat","at":"2026-12-02T21:40:00.123Z","as_of":9,"edit_seq":6,"edited_at":"2026-12-02T21:40:01.123Z"},"highlights":[{"start":4,"end":8},{"start":9,"end":13}]},` +
		`{"ev":{"conv":"g","seq":3,"mid":"m3","kind":"message","sender":"ben","device":"d","body":"🚤","at":"2026-12-02T21:40:00.123Z"},"highlights":[]}]}`
	if got := string(MarshalFrame(Results(page))); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, want := string(MarshalFrame(Results(parley.SearchPage{}))), `{"t":"results","hits":[]}`; got != want {
		t.Errorf("empty page: got %s, want %s", got, want)
	}
	// A client reads it back whole.
	f, err := DecodeFrame(MarshalFrame(Results(page)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Hits) != 2 || f.Hits[0].Ev.Body != "the blue boat" || f.Hits[0].Highlights[1] != (Highlight{9, 13}) || f.Next != page.Next {
		b, _ := json.Marshal(f)
		t.Errorf("decoded %s", b)
	}
}

// FuzzDecodeSearch: an accepted search frame has a query and converts to
// a request whose before is a time after 1970 or none; ParseSearch then
// either takes it or refuses it as INVALID_ARGUMENT, never anything else.
func FuzzDecodeSearch(f *testing.F) {
	f.Add([]byte(`{"t":"search","q":"blue boat","limit":5}`))
	f.Add([]byte(`{"t":"search","q":"\"a phrase\"* from:ana in:g","before":"2026-12-02T21:40:00Z"}`))
	f.Add([]byte(`{"t":"search","q":"x","before":"2026-13-02T21:40:00Z","cursor":"!!"}`))
	f.Add([]byte(`{"t":"search","q":"我明天去","limit":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil || r.T != TSearch {
			return
		}
		s, err := r.SearchRequest()
		if err != nil {
			t.Fatalf("accepted a frame whose request does not convert: %v", err)
		}
		if s.Query == "" || s.Limit < 0 || !s.Before.IsZero() && s.Before.UnixMilli() < 1 {
			t.Fatalf("accepted a bad search %+v", s)
		}
		if _, err := parley.ParseSearch(s); err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Fatalf("ParseSearch: %v", err)
		}
	})
}
