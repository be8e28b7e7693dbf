package wire_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// A send frame's attachments reach the store's request; bad lists are
// refused by the decoder, before any storage work.
func TestDecodeAttachments(t *testing.T) {
	ids := func(n int) string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf(`"f%d"`, i))
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	tests := []struct {
		name  string
		frame string
		want  []string // nil with ok false: refused
		ok    bool
	}{
		{"with body", `{"t":"send","conv":"c","cmid":"k","body":"look","attachments":["f1","f2"]}`, []string{"f1", "f2"}, true},
		{"without body", `{"t":"send","conv":"c","cmid":"k","attachments":["f1"]}`, []string{"f1"}, true},
		{"ten", `{"t":"send","conv":"c","cmid":"k","attachments":` + ids(10) + `}`, nil, true},
		{"eleven", `{"t":"send","conv":"c","cmid":"k","attachments":` + ids(11) + `}`, nil, false},
		{"twice", `{"t":"send","conv":"c","cmid":"k","attachments":["f1","f1"]}`, nil, false},
		{"bad id", `{"t":"send","conv":"c","cmid":"k","attachments":["../etc"]}`, nil, false},
		{"not a send", `{"t":"edit","conv":"c","cmid":"k","target":1,"body":"x","attachments":["f1"]}`, nil, false},
		{"no body, no attachments", `{"t":"send","conv":"c","cmid":"k","attachments":[]}`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := wire.DecodeRequest([]byte(tt.frame))
			if !tt.ok {
				if parley.ErrorCode(err) != parley.CodeInvalidArgument {
					t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := r.SendRequest().Attachments
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Errorf("attachments = %q, want %q", got, tt.want)
			}
			if tt.want == nil && len(got) != 10 {
				t.Errorf("%d attachments, want 10", len(got))
			}
		})
	}
}

// An event's attachments are encoded with their JSON names; width and
// height only when known; none on a message without files.
func TestEventAttachments(t *testing.T) {
	ev := parley.Event{Conv: "c", Seq: 3, Kind: parley.EventMessage, Sender: "ann", At: time.Unix(1, 0),
		Attachments: []parley.Attachment{
			{ID: "f1", Name: "a.png", Size: 10, MIME: "image/png", SHA256: strings.Repeat("a", 64), Width: 4, Height: 3},
			{ID: "f2", Name: "b.txt", Size: 2, MIME: "text/plain; charset=utf-8", SHA256: strings.Repeat("b", 64)},
		}}
	b, err := json.Marshal(wire.FromEvent(ev))
	if err != nil {
		t.Fatal(err)
	}
	want := `"attachments":[{"id":"f1","name":"a.png","size":10,"mime":"image/png","sha256":"` + strings.Repeat("a", 64) + `","width":4,"height":3},` +
		`{"id":"f2","name":"b.txt","size":2,"mime":"text/plain; charset=utf-8","sha256":"` + strings.Repeat("b", 64) + `"}]`
	if !strings.Contains(string(b), want) {
		t.Errorf("event %s\nwant it to hold %s", b, want)
	}
	ev.Attachments = nil
	if b, _ := json.Marshal(wire.FromEvent(ev)); strings.Contains(string(b), "attachments") {
		t.Errorf("event without files: %s", b)
	}
}
