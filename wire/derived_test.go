package wire

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

// TestDecodeChatRequests: edits, reactions, replies and threads are
// validated completely by the decoder, before any storage work.
func TestDecodeChatRequests(t *testing.T) {
	long := strings.Repeat("é", parley.MaxBodyChars)
	tests := []struct {
		name  string
		frame string
		code  parley.Code // "" = valid
	}{
		{"edit", `{"t":"edit","conv":"g","target":3,"cmid":"e","body":"fixed"}`, ""},
		{"edit of 4000 characters", `{"t":"edit","conv":"g","target":3,"cmid":"e","body":"` + long + `"}`, ""},
		{"edit of 4001 characters", `{"t":"edit","conv":"g","target":3,"cmid":"e","body":"` + long + `x"}`, parley.CodeInvalidArgument},
		{"edit without body", `{"t":"edit","conv":"g","target":3,"cmid":"e"}`, parley.CodeInvalidArgument},
		{"edit without target", `{"t":"edit","conv":"g","cmid":"e","body":"b"}`, parley.CodeInvalidArgument},
		{"edit target 0", `{"t":"edit","conv":"g","target":0,"cmid":"e","body":"b"}`, parley.CodeInvalidArgument},
		{"edit with NUL", `{"t":"edit","conv":"g","target":3,"cmid":"e","body":"a\u0000b"}`, parley.CodeInvalidArgument},
		{"edit invalid UTF-8", "{\"t\":\"edit\",\"conv\":\"g\",\"target\":3,\"cmid\":\"e\",\"body\":\"\xff\"}", parley.CodeInvalidArgument},
		{"edit lone surrogate", `{"t":"edit","conv":"g","target":3,"cmid":"e","body":"\ud800"}`, parley.CodeInvalidArgument},
		{"edit cmid of 65", `{"t":"edit","conv":"g","target":3,"cmid":"` + strings.Repeat("c", 65) + `","body":"b"}`, parley.CodeInvalidArgument},
		{"react on", `{"t":"react","conv":"g","target":3,"emoji":"👍","on":true,"cmid":"r"}`, ""},
		{"react off", `{"t":"react","conv":"g","target":3,"emoji":":tada:","on":false,"cmid":"r"}`, ""},
		{"react skin tone sequence", `{"t":"react","conv":"g","target":3,"emoji":"👍🏽","on":true,"cmid":"r"}`, ""},
		{"react without on", `{"t":"react","conv":"g","target":3,"emoji":"👍","cmid":"r"}`, parley.CodeInvalidArgument},
		{"react on as string", `{"t":"react","conv":"g","target":3,"emoji":"👍","on":"yes","cmid":"r"}`, parley.CodeInvalidArgument},
		{"react without emoji", `{"t":"react","conv":"g","target":3,"on":true,"cmid":"r"}`, parley.CodeInvalidArgument},
		{"react emoji with a space", `{"t":"react","conv":"g","target":3,"emoji":"thumbs up","on":true,"cmid":"r"}`, parley.CodeInvalidArgument},
		{"react emoji with a tab", `{"t":"react","conv":"g","target":3,"emoji":"👍\t","on":true,"cmid":"r"}`, parley.CodeInvalidArgument},
		{"react emoji with NBSP", `{"t":"react","conv":"g","target":3,"emoji":"a\u00a0b","on":true,"cmid":"r"}`, parley.CodeInvalidArgument},
		{"react emoji of 65", `{"t":"react","conv":"g","target":3,"emoji":"` + strings.Repeat("x", 65) + `","on":true,"cmid":"r"}`, parley.CodeInvalidArgument},
		{"react without cmid", `{"t":"react","conv":"g","target":3,"emoji":"👍","on":true}`, parley.CodeInvalidArgument},
		{"send reply", `{"t":"send","conv":"g","cmid":"c","body":"b","reply_to":4}`, ""},
		{"send reply_to 0", `{"t":"send","conv":"g","cmid":"c","body":"b","reply_to":0}`, parley.CodeInvalidArgument},
		{"send reply_to negative", `{"t":"send","conv":"g","cmid":"c","body":"b","reply_to":-1}`, parley.CodeInvalidArgument},
		{"send reply_to string", `{"t":"send","conv":"g","cmid":"c","body":"b","reply_to":"4"}`, parley.CodeInvalidArgument},
		{"sync thread", `{"t":"sync","conv":"g","after":0,"thread":4}`, ""},
		{"sync thread 0", `{"t":"sync","conv":"g","after":0,"thread":0}`, parley.CodeInvalidArgument},
	}
	for _, tt := range tests {
		_, err := DecodeRequest([]byte(tt.frame))
		if got := parley.ErrorCode(err); got != tt.code {
			t.Errorf("%s: code %q (%v), want %q", tt.name, got, err, tt.code)
		}
	}
}

func TestChatRequestConversions(t *testing.T) {
	r, err := DecodeRequest([]byte(`{"t":"react","conv":"g","target":3,"emoji":"👍","on":true,"cmid":"r"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.ReactRequest(), (parley.ReactRequest{Conv: "g", Target: 3, Emoji: "👍", On: true, CMID: "r"}); got != want {
		t.Errorf("ReactRequest = %+v, want %+v", got, want)
	}
	r, _ = DecodeRequest([]byte(`{"t":"edit","conv":"g","target":3,"cmid":"e","body":"b"}`))
	if got, want := r.EditRequest(), (parley.EditRequest{Conv: "g", Target: 3, CMID: "e", Body: "b"}); got != want {
		t.Errorf("EditRequest = %+v, want %+v", got, want)
	}
	r, _ = DecodeRequest([]byte(`{"t":"send","conv":"g","cmid":"c","body":"b","reply_to":4}`))
	if got := r.SendRequest(); got.ReplyTo != 4 || got.Body != "b" {
		t.Errorf("SendRequest = %+v", got)
	}
	r, _ = DecodeRequest([]byte(`{"t":"sync","conv":"g","after":2,"thread":4}`))
	if got := r.SyncRequest(); got.Thread != 4 || got.After != 2 {
		t.Errorf("SyncRequest = %+v", got)
	}
}

// TestEventShapes pins the event JSON of the chat fields: what is omitted
// when empty, what is always there, and that as_of comes only with derived
// state.
func TestEventShapes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	base := `"conv":"g","seq":%s,"mid":"m","kind":"%s","sender":"ann","device":"d","body":"%s","at":"2026-01-02T03:04:05.006Z"`
	ev := func(seq int64, kind parley.EventKind, body string) parley.Event {
		return parley.Event{Conv: "g", Seq: seq, MID: "m", Kind: kind, Sender: "ann", Device: "d", Body: body, At: at}
	}
	reply := ev(5, parley.EventMessage, "hi @bob")
	reply.ReplyTo, reply.Mentions = 2, []string{"bob"}
	decorated := ev(2, parley.EventMessage, "v2")
	decorated.Derived = &parley.Derived{AsOf: 9, EditSeq: 4, EditedAt: at.Add(time.Second),
		Reactions: []parley.Reaction{{Emoji: "👍", Count: 2, Me: true}}, Replies: 1, LastReplySeq: 5}
	plain := ev(2, parley.EventMessage, "v1")
	plain.Derived = &parley.Derived{AsOf: 9}
	edit := ev(4, parley.EventEdit, "v2")
	edit.Target = 2
	off := ev(6, parley.EventReaction, "")
	off.Target, off.Emoji = 2, "👍"
	tests := []struct {
		name string
		ev   parley.Event
		want string
	}{
		{"pushed message: no derived fields", ev(1, parley.EventMessage, "hi"), `{` + sprintf(base, "1", "message", "hi") + `}`},
		{"reply with mentions", reply, `{` + sprintf(base, "5", "message", "hi @bob") + `,"reply_to":2,"mentions":["bob"]}`},
		{"decorated, nothing derived: as_of only", plain, `{` + sprintf(base, "2", "message", "v1") + `,"as_of":9}`},
		{"decorated", decorated, `{` + sprintf(base, "2", "message", "v2") + `,"as_of":9,"edit_seq":4,"edited_at":"2026-01-02T03:04:06.006Z","reactions":[{"emoji":"👍","count":2,"me":true}],"replies":1,"last_reply_seq":5}`},
		{"edit", edit, `{` + sprintf(base, "4", "edit", "v2") + `,"target":2}`},
		{"reaction off: on always present", off, `{` + sprintf(base, "6", "reaction", "") + `,"target":2,"emoji":"👍","on":false}`},
	}
	for _, tt := range tests {
		if got := string(MarshalFrame(Frame{Ev: ptr(FromEvent(tt.ev))})); got != `{"ev":`+tt.want+`}` {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.name, got, `{"ev":`+tt.want+`}`)
		}
	}
	if got := string(MarshalFrame(Convs(parley.ConvsPage{Convs: []parley.ConvSummary{{Conv: "g"}}}))); !strings.Contains(got, `"mentions_unread":0`) {
		t.Errorf("convs entry without mentions_unread: %s", got)
	}
	for _, tt := range []struct {
		f    Frame
		want string
	}{
		{Edited(parley.Edited{Conv: "g", Seq: 4}), `{"t":"edited","conv":"g","seq":4,"dup":false}`},
		{Reacted(parley.Reacted{Conv: "g", Seq: 0, Dup: true}), `{"t":"reacted","conv":"g","seq":0,"dup":true}`},
	} {
		if got := string(MarshalFrame(tt.f)); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

func sprintf(format string, args ...string) string {
	for _, a := range args {
		format = strings.Replace(format, "%s", a, 1)
	}
	return format
}

// FuzzDecodeEdit: an accepted edit frame is an edit the store may take as
// it is: valid UTF-8, 1–4000 characters without NUL, a target of at least
// 1, a cmid in bounds.
func FuzzDecodeEdit(f *testing.F) {
	f.Add(`g`, int64(3), `e`, `fixed`)
	f.Add(`g`, int64(0), `e`, "a\x00b")
	f.Add(`g`, int64(-1), ``, "\xff")
	f.Add(`g`, int64(1), `e`, strings.Repeat("x", parley.MaxBodyChars+1))
	f.Fuzz(func(t *testing.T, conv string, target int64, cmid, body string) {
		frame := MarshalFrame(Frame{T: TEdit, Conv: conv, Seq: &target, MID: cmid, Msg: body})
		// A Frame has no target/cmid/body: rename its fields into an edit.
		s := strings.NewReplacer(`"seq":`, `"target":`, `"mid":`, `"cmid":`, `"msg":`, `"body":`).Replace(string(frame))
		r, err := DecodeRequest([]byte(s))
		if err != nil {
			if parley.ErrorCode(err) != parley.CodeInvalidArgument {
				t.Fatalf("error code %s", parley.ErrorCode(err))
			}
			return
		}
		e := r.EditRequest()
		n := utf8.RuneCountInString(e.Body)
		if !utf8.ValidString(e.Body) || n < 1 || n > parley.MaxBodyChars || strings.ContainsRune(e.Body, 0) || e.Target < 1 {
			t.Fatalf("accepted a bad edit %+v", e)
		}
		if parley.ValidateEdit(e) != nil {
			t.Fatal("accepted an edit the store refuses")
		}
	})
}

// FuzzDecodeReact: an accepted react frame names an emoji of 1–64
// characters without whitespace or control characters and an explicit on.
func FuzzDecodeReact(f *testing.F) {
	f.Add([]byte(`{"t":"react","conv":"g","target":3,"emoji":"👍","on":true,"cmid":"r"}`))
	f.Add([]byte(`{"t":"react","conv":"g","target":3,"emoji":"a b","on":false,"cmid":"r"}`))
	f.Add([]byte(`{"t":"react","conv":"g","target":3,"emoji":"\u2028","on":true,"cmid":"r"}`))
	f.Add([]byte(`{"t":"react","conv":"g","target":3,"emoji":":x:","cmid":"r"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil || r.T != TReact {
			return
		}
		x := r.ReactRequest()
		if r.On == nil || x.Target < 1 || parley.CheckEmoji(x.Emoji) != nil || parley.ValidateReact(x) != nil {
			t.Fatalf("accepted a bad reaction %+v", x)
		}
		if strings.ContainsFunc(x.Emoji, func(c rune) bool { return c == ' ' || c == '\t' || c == '\n' }) {
			t.Fatalf("accepted whitespace in %q", x.Emoji)
		}
	})
}
