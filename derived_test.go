package parley_test

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// TestDecorate: the newest visible edit's text wins (rows arrive in any
// order); an edit of a recalled message, or one served recalled, is
// ignored; reactions count the latest state per (user, emoji), `me` is
// the caller's, and they come ordered by their oldest reaction still standing; replies count
// only those not recalled, and LastReplySeq is the latest of them. Events
// that are no message stay undecorated.
func TestDecorate(t *testing.T) {
	at := func(sec int) time.Time { return time.Unix(int64(sec), 0).UTC() }
	evs := []parley.Event{
		{Seq: 2, Kind: parley.EventMemberJoined, User: "ben"},
		{Seq: 3, Kind: parley.EventMessage, Sender: "ana", Body: "v1", At: at(3)},
		{Seq: 4, Kind: parley.EventMessage, Sender: "ana", Recalled: true},
		{Seq: 20, Kind: parley.EventMessage, Sender: "ben", Body: "reply", ReplyTo: 3, At: at(20)},
	}
	rows := []parley.DerivedRow{
		// Out of seq order on purpose: Decorate sorts.
		{Seq: 7, Kind: parley.EventEdit, Sender: "ana", Target: 3, Body: "v3", At: at(7)},
		{Seq: 5, Kind: parley.EventEdit, Sender: "ana", Target: 3, Body: "v2", At: at(5)},
		{Seq: 6, Kind: parley.EventEdit, Sender: "ana", Target: 4, Body: "", Recalled: true, At: at(6)},
		{Seq: 8, Kind: parley.EventEdit, Sender: "ana", Target: 99, Body: "not on the page", At: at(8)},
		{Seq: 9, Kind: parley.EventReaction, Sender: "ana", Target: 3, Emoji: "👍", On: true},
		{Seq: 10, Kind: parley.EventReaction, Sender: "ben", Target: 3, Emoji: "👍", On: true},
		{Seq: 11, Kind: parley.EventReaction, Sender: "ben", Target: 3, Emoji: "🎉", On: true},
		{Seq: 12, Kind: parley.EventReaction, Sender: "ben", Target: 3, Emoji: "🎉", On: false},
		{Seq: 15, Kind: parley.EventReaction, Sender: "ana", Target: 3, Emoji: "❤️", On: false},
		{Seq: 13, Kind: parley.EventReaction, Sender: "cy", Target: 3, Emoji: "❤️", On: true},
		{Seq: 14, Kind: parley.EventReaction, Sender: "ana", Target: 3, Emoji: "❤️", On: true},
		{Seq: 16, Kind: parley.EventReaction, Sender: "ben", Target: 4, Emoji: "👍", On: true},
		{Seq: 17, Kind: parley.EventMessage, Sender: "ben", ReplyTo: 3, Body: "r1"},
		{Seq: 18, Kind: parley.EventMessage, Sender: "ben", ReplyTo: 3, Recalled: true},
		{Seq: 19, Kind: parley.EventMessage, Sender: "cy", ReplyTo: 4, Body: "r to recalled"},
		{Seq: 20, Kind: parley.EventMessage, Sender: "ben", ReplyTo: 3, Body: "reply"},
		{Seq: 21, Kind: parley.EventMessage, Sender: "ben", Body: "no reply"},
	}
	parley.Decorate(evs, rows, "ana", 30)

	if evs[0].Derived != nil {
		t.Errorf("member_joined decorated: %+v", evs[0].Derived)
	}
	want3 := &parley.Derived{
		AsOf: 30, EditSeq: 7, EditedAt: at(7),
		Reactions:    []parley.Reaction{{Emoji: "👍", Count: 2, Me: true}, {Emoji: "❤️", Count: 1}},
		Replies:      2,
		LastReplySeq: 20,
	}
	if evs[1].Body != "v3" {
		t.Errorf("message 3 body %q, want the newest edit's v3", evs[1].Body)
	}
	if diff := diff(want3, evs[1].Derived); diff != "" {
		t.Errorf("message 3 derived (want, got):\n%s", diff)
	}
	// A recalled message: no text, no reactions, but its replies count
	// (the reply itself is not recalled).
	want4 := &parley.Derived{AsOf: 30, Replies: 1, LastReplySeq: 19}
	if evs[2].Body != "" {
		t.Errorf("recalled message 4 body %q", evs[2].Body)
	}
	if diff := diff(want4, evs[2].Derived); diff != "" {
		t.Errorf("recalled message 4 derived (want, got):\n%s", diff)
	}
	if diff := diff(&parley.Derived{AsOf: 30}, evs[3].Derived); diff != "" || evs[3].Body != "reply" {
		t.Errorf("reply 20: body %q, derived (want, got):\n%s", evs[3].Body, diff)
	}

	// Another caller: `me` is theirs.
	evs2 := []parley.Event{{Seq: 3, Kind: parley.EventMessage, Sender: "ana", Body: "v1"}}
	parley.Decorate(evs2, slices.Clone(rows), "cy", 30)
	wantR := []parley.Reaction{{Emoji: "👍", Count: 2}, {Emoji: "❤️", Count: 1, Me: true}}
	if diff := diff(wantR, evs2[0].Derived.Reactions); diff != "" {
		t.Errorf("reactions for cy (want, got):\n%s", diff)
	}

	// No rows: every message gets an empty Derived with AsOf.
	evs3 := []parley.Event{{Seq: 3, Kind: parley.EventMessage, Body: "x"}, {Seq: 4, Kind: parley.EventRecall, Target: 3}}
	parley.Decorate(evs3, nil, "ana", 4)
	if diff := diff(&parley.Derived{AsOf: 4}, evs3[0].Derived); diff != "" || evs3[1].Derived != nil {
		t.Errorf("no rows: (want, got):\n%s; recall derived %v", diff, evs3[1].Derived)
	}
}

// TestDecorateReactionOrder: emoji are listed by the reaction that first
// set one of them among those that hold now.
func TestDecorateReactionOrder(t *testing.T) {
	evs := []parley.Event{{Seq: 3, Kind: parley.EventMessage, Body: "x"}}
	rows := []parley.DerivedRow{
		{Seq: 4, Kind: parley.EventReaction, Sender: "ben", Target: 3, Emoji: "b", On: true},
		{Seq: 5, Kind: parley.EventReaction, Sender: "ben", Target: 3, Emoji: "a", On: true},
		{Seq: 6, Kind: parley.EventReaction, Sender: "cy", Target: 3, Emoji: "c", On: true},
		{Seq: 7, Kind: parley.EventReaction, Sender: "cy", Target: 3, Emoji: "b", On: true},
	}
	parley.Decorate(evs, rows, "ana", 7)
	var got []string
	for _, r := range evs[0].Derived.Reactions {
		got = append(got, r.Emoji)
	}
	if want := []string{"b", "a", "c"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if n := evs[0].Derived.Reactions[0].Count; n != 2 {
		t.Errorf("b counted %d, want 2", n)
	}
}

func TestMessageSeqs(t *testing.T) {
	evs := []parley.Event{
		{Seq: 1, Kind: parley.EventMemberJoined},
		{Seq: 2, Kind: parley.EventMessage},
		{Seq: 3, Kind: parley.EventEdit, Target: 2},
		{Seq: 4, Kind: parley.EventMessage, Recalled: true},
	}
	if got := parley.MessageSeqs(evs); !slices.Equal(got, []int64{2, 4}) {
		t.Errorf("MessageSeqs = %v, want [2 4]", got)
	}
}

func TestParseMentions(t *testing.T) {
	long32 := strings.Repeat("a", 32)
	tests := []struct {
		text  string
		users []string
		all   bool
	}{
		{"@ben hi", []string{"ben"}, false},
		{"hi @Ben.", []string{"ben"}, false},
		{"hi @BEN, @cy!", []string{"ben", "cy"}, false},
		{"mail ana@example.com", nil, false},
		{"@all", nil, true},
		{"hey @ALL and @ben", []string{"ben"}, true},
		{"@allison", []string{"allison"}, false},
		{"@@x", nil, false},
		{"@", nil, false},
		{"a@", nil, false},
		{"@-ben", nil, false},
		{"@ben_", []string{"ben"}, false},
		{"@ben-ana.", []string{"ben-ana"}, false},
		{"@ben.ana", []string{"ben.ana"}, false},
		{"(@cy)", []string{"cy"}, false},
		{"x.@cy", nil, false},
		{"x_@cy", nil, false},
		{"é@ben", nil, false}, // a letter before '@'
		{"键@ben", nil, false}, // a letter of another script
		{"٣@ben", nil, false}, // a digit of another script
		{"😀@ben", []string{"ben"}, false},
		{"—@ben", []string{"ben"}, false},
		{"\xff@ben", []string{"ben"}, false}, // invalid UTF-8 before: no letter
		{"@" + long32, []string{long32}, false},
		{"@" + long32 + "a", nil, false},                                // 33 characters: no user id
		{"@" + strings.Repeat("b", 70) + " @cy", []string{"cy"}, false}, // the scan stops at 64
		{"@ben @Ben @ben. @ben", []string{"ben"}, false},
		{"@cy @ben @cy", []string{"cy", "ben"}, false},
		{"@bén", []string{"b"}, false}, // the id stops at the first byte that is none of an id
		{"no mention", nil, false},
	}
	for _, tt := range tests {
		users, all := parley.ParseMentions(tt.text)
		if !slices.Equal(users, tt.users) || all != tt.all {
			t.Errorf("ParseMentions(%q) = %q, %v; want %q, %v", tt.text, users, all, tt.users, tt.all)
		}
		if parley.HasMentionToken(tt.text) != strings.Contains(tt.text, "@") {
			t.Errorf("HasMentionToken(%q) wrong", tt.text)
		}
	}
}

// FuzzParseMentions: no panic; every id returned is a valid user id,
// lower case, named once; a text without '@' mentions nobody.
func FuzzParseMentions(f *testing.F) {
	for _, s := range []string{"@ben hi", "hi @Ben.", "ana@example.com", "@all", "@@x", "é@ben", "@" + strings.Repeat("a", 70), "@ben @ben", "\xff@x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		users, all := parley.ParseMentions(text)
		seen := map[string]bool{}
		for _, u := range users {
			if !parley.ValidUserID(u) || u == parley.MentionAll {
				t.Fatalf("ParseMentions(%q) returned %q", text, u)
			}
			if seen[u] {
				t.Fatalf("ParseMentions(%q) returned %q twice", text, u)
			}
			seen[u] = true
		}
		if !strings.Contains(text, "@") && (len(users) > 0 || all) {
			t.Fatalf("ParseMentions(%q) without '@' = %q, %v", text, users, all)
		}
		got := parley.Mentioned(text, "ana", []string{"ana", "ben", "cy"}, 3, nil)
		if !slices.IsSorted(got) || slices.Contains(got, "ana") {
			t.Fatalf("Mentioned(%q) = %q", text, got)
		}
	})
}

func TestMentioned(t *testing.T) {
	open := []string{"ana", "ben", "cy"}
	tests := []struct {
		name    string
		text    string
		sender  string
		allMax  int
		already []string
		want    []string
	}{
		{"named members", "@ben @cy", "ana", 0, nil, []string{"ben", "cy"}},
		{"sorted", "@cy then @ben", "ana", 0, nil, []string{"ben", "cy"}},
		{"not open", "@dan @ben", "ana", 0, nil, []string{"ben"}},
		{"never the sender", "@ana", "ana", 10, nil, nil},
		{"all within allMax", "@all", "ana", 3, nil, []string{"ben", "cy"}},
		{"all above allMax", "@all", "ana", 2, nil, nil},
		{"all above allMax keeps names", "@all @cy", "ana", 2, nil, []string{"cy"}},
		{"all off", "@all", "ana", 0, nil, nil},
		{"already excluded", "@ben @cy", "ana", 0, []string{"ben"}, []string{"cy"}},
		{"all minus already", "@all", "ben", 5, []string{"cy"}, []string{"ana"}},
		{"nobody", "hello", "ana", 5, nil, nil},
		{"email is no mention", "ben@cy.org", "ana", 5, nil, nil},
	}
	for _, tt := range tests {
		got := parley.Mentioned(tt.text, tt.sender, open, tt.allMax, tt.already)
		if !slices.Equal(got, tt.want) || (tt.want == nil && got != nil) {
			t.Errorf("%s: Mentioned(%q) = %#v, want %#v", tt.name, tt.text, got, tt.want)
		}
	}
}

func TestDirectID(t *testing.T) {
	if a, b := parley.DirectID("ben", "ana"), parley.DirectID("ana", "ben"); a != b || a != "dm:ana:ben" {
		t.Errorf("DirectID: %q and %q, want dm:ana:ben both", a, b)
	}
	// 3 + 30 + 1 + 30 = 64: still the readable form.
	x30, y30 := strings.Repeat("x", 30), strings.Repeat("y", 30)
	if got := parley.DirectID(y30, x30); got != "dm:"+x30+":"+y30 {
		t.Errorf("DirectID of two 30-character ids = %q", got)
	}
	long1, long2 := strings.Repeat("a", 32), strings.Repeat("b", 32)
	h := parley.DirectID(long1, long2)
	if h != parley.DirectID(long2, long1) {
		t.Errorf("hashed DirectID depends on order")
	}
	if !strings.HasPrefix(h, "dmh:") || len(h) != 44 || len(h) > parley.MaxConvIDChars || !parley.ValidConvID(h) {
		t.Errorf("hashed DirectID %q: want dmh: and 40 hex digits, a valid conversation id", h)
	}
	if h2 := parley.DirectID(long1, strings.Repeat("c", 32)); h2 == h {
		t.Errorf("two pairs share the hashed id %q", h)
	}
	if h3 := parley.DirectID(long1+"", strings.Repeat("b", 31)+"c"); h3 == h {
		t.Errorf("near pairs share the hashed id %q", h)
	}
	for _, id := range []string{"dm:ana:ben", h, "dmh:", "dm:"} {
		if !parley.ReservedConvID(id) {
			t.Errorf("ReservedConvID(%q) = false", id)
		}
	}
	for _, id := range []string{"c-dm:x", "dmx", "DM:ana:ben", "dm-ana", ""} {
		if parley.ReservedConvID(id) {
			t.Errorf("ReservedConvID(%q) = true", id)
		}
	}
	_, err := parley.ValidateNewConversation("ana", parley.NewConversation{ID: parley.DirectID("ana", "ben"), Kind: parley.KindGroup})
	if parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("a group with a direct id: %v", err)
	}
}

func TestCheckEmoji(t *testing.T) {
	tests := []struct {
		emoji string
		ok    bool
	}{
		{"👍", true},
		{"👍🏽", true},
		{"❤️", true},
		{"👨‍👩‍👧", true},
		{":+1:", true},
		{"x", true},
		{strings.Repeat("😀", 64), true},
		{strings.Repeat("😀", 65), false},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{" 👍", false},
		{"👍 ", false},
		{"a b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\u00a0b", false}, // no-break space
		{"a\u3000b", false}, // ideographic space
		{"a\x01", false},
		{"a\x7f", false},
		{"a\u0085", false},
		{"a\x00", false},
		{"\xff", false},
		{"👍\xf0\x9f", false},
	}
	for _, tt := range tests {
		err := parley.CheckEmoji(tt.emoji)
		if (err == nil) != tt.ok {
			t.Errorf("CheckEmoji(%q) = %v, want ok=%v", tt.emoji, err, tt.ok)
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("CheckEmoji(%q): code %s", tt.emoji, parley.ErrorCode(err))
		}
	}
}

func TestValidateEditReact(t *testing.T) {
	edit := parley.EditRequest{Conv: "c", Target: 3, CMID: "k", Body: "x"}
	react := parley.ReactRequest{Conv: "c", Target: 3, CMID: "k", Emoji: "👍", On: true}
	tests := []struct {
		name string
		err  error
		ok   bool
	}{
		{"edit ok", parley.ValidateEdit(edit), true},
		{"edit target 0", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Target = 0 })), false},
		{"edit cmid empty", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.CMID = "" })), false},
		{"edit body 4000", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Body = strings.Repeat("é", 4000) })), true},
		{"edit body 4001", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Body = strings.Repeat("é", 4001) })), false},
		{"edit body NUL", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Body = "a\x00" })), false},
		{"edit body invalid", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Body = "a\xff" })), false},
		{"edit window negative", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Window = -time.Second })), false},
		{"edit allMax negative", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.AllMax = -1 })), false},
		{"edit conv bad", parley.ValidateEdit(with(edit, func(r *parley.EditRequest) { r.Conv = "c d" })), false},
		{"react ok", parley.ValidateReact(react), true},
		{"react target negative", parley.ValidateReact(with(react, func(r *parley.ReactRequest) { r.Target = -1 })), false},
		{"react emoji space", parley.ValidateReact(with(react, func(r *parley.ReactRequest) { r.Emoji = "a b" })), false},
		{"react cmid 65", parley.ValidateReact(with(react, func(r *parley.ReactRequest) { r.CMID = strings.Repeat("k", 65) })), false},
		{"send reply negative", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "k", Body: "x", ReplyTo: -1}), false},
		{"send allMax negative", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "k", Body: "x", AllMax: -1}), false},
	}
	for _, tt := range tests {
		if (tt.err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, tt.err, tt.ok)
		}
		if tt.err != nil && parley.ErrorCode(tt.err) != parley.CodeInvalidArgument {
			t.Errorf("%s: code %s", tt.name, parley.ErrorCode(tt.err))
		}
	}
	if _, err := parley.ValidateSync(parley.SyncRequest{Conv: "c", Limit: 1, Thread: -1}); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("sync thread -1: %v", err)
	}
}

func with[T any](r T, f func(*T)) T { f(&r); return r }

// TestTargetChecks: the check order of EditTarget and MessageTarget.
func TestTargetChecks(t *testing.T) {
	msg := parley.EditTarget{Found: true, Visible: true, Kind: parley.EventMessage, Sender: "ana"}
	tests := []struct {
		name string
		t    parley.EditTarget
		user string
		want parley.Code
	}{
		{"ok", msg, "ana", ""},
		{"missing", parley.EditTarget{}, "ana", parley.CodeNotFound},
		{"invisible before sender", with(msg, func(t *parley.EditTarget) { t.Visible = false }), "ben", parley.CodeNotFound},
		{"not a message", with(msg, func(t *parley.EditTarget) { t.Kind = parley.EventRecall }), "ana", parley.CodeNotFound},
		{"sender before recalled", with(msg, func(t *parley.EditTarget) { t.Recalled = true }), "ben", parley.CodeNotSender},
		{"recalled before window", with(msg, func(t *parley.EditTarget) { t.Recalled, t.Expired = true, true }), "ana", parley.CodeAlreadyRecalled},
		{"window", with(msg, func(t *parley.EditTarget) { t.Expired = true }), "ana", parley.CodeEditWindowExpired},
	}
	for _, tt := range tests {
		if got := parley.ErrorCode(tt.t.Check(tt.user, 3)); got != tt.want {
			t.Errorf("EditTarget %s: %q, want %q", tt.name, got, tt.want)
		}
	}
	m := parley.MessageTarget{Found: true, Visible: true, Kind: parley.EventMessage}
	if err := m.Check(3); err != nil || m.Root(3) != 3 {
		t.Errorf("MessageTarget ok: %v, root %d", err, m.Root(3))
	}
	if r := with(m, func(t *parley.MessageTarget) { t.ReplyTo = 2 }).Root(5); r != 2 {
		t.Errorf("root of a reply: %d, want 2", r)
	}
	for name, mt := range map[string]parley.MessageTarget{
		"missing":           {},
		"invisible":         with(m, func(t *parley.MessageTarget) { t.Visible, t.Recalled = false, true }),
		"not a message":     with(m, func(t *parley.MessageTarget) { t.Kind = parley.EventEdit }),
		"recalled (wanted)": with(m, func(t *parley.MessageTarget) { t.Recalled = true }),
	} {
		want := parley.CodeNotFound
		if name == "recalled (wanted)" {
			want = parley.CodeAlreadyRecalled
		}
		if got := parley.ErrorCode(mt.Check(3)); got != want {
			t.Errorf("MessageTarget %s: %q, want %q", name, got, want)
		}
	}
}

// TestFingerprintsDiffer: a send, a reply, an edit and a reaction with the
// same conversation, seq and text never share a request hash, so a key
// reused across kinds is IDEMPOTENCY_MISMATCH even before the kind is
// compared; a plain send keeps the old Fingerprint.
func TestFingerprintsDiffer(t *testing.T) {
	send := parley.SendRequest{Conv: "c", CMID: "k", Body: "3"}
	if !bytes.Equal(parley.SendFingerprint(send), parley.Fingerprint("c", "3")) {
		t.Errorf("a plain send's fingerprint changed")
	}
	fps := map[string][]byte{
		"send":        parley.SendFingerprint(send),
		"reply 3":     parley.SendFingerprint(with(send, func(r *parley.SendRequest) { r.ReplyTo = 3 })),
		"reply 4":     parley.SendFingerprint(with(send, func(r *parley.SendRequest) { r.ReplyTo = 4 })),
		"send 'edit'": parley.SendFingerprint(with(send, func(r *parley.SendRequest) { r.Body = "edit:3" })),
		"edit 3":      parley.EditFingerprint("c", 3, "3"),
		"edit 4":      parley.EditFingerprint("c", 4, "3"),
		"react on":    parley.ReactFingerprint("c", 3, "3", true),
		"react off":   parley.ReactFingerprint("c", 3, "3", false),
		"react 4":     parley.ReactFingerprint("c", 4, "3", true),
		"react other": parley.ReactFingerprint("c", 3, "4", true),
		"other conv":  parley.EditFingerprint("d", 3, "3"),
	}
	seen := map[string]string{}
	for name, fp := range fps {
		if other, ok := seen[string(fp)]; ok {
			t.Errorf("%s and %s share a fingerprint", name, other)
		}
		seen[string(fp)] = name
	}
	// AllMax is policy, not content.
	if !bytes.Equal(parley.SendFingerprint(with(send, func(r *parley.SendRequest) { r.AllMax = 7 })), fps["send"]) {
		t.Errorf("AllMax changed the fingerprint")
	}
}

// diff renders want and got when they differ ("" when equal).
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("want %+v\ngot  %+v", deref(want), deref(got))
}

func deref(v any) any {
	if d, ok := v.(*parley.Derived); ok && d != nil {
		return *d
	}
	return v
}

func TestCheckDirectPeer(t *testing.T) {
	for _, tt := range []struct {
		user string
		ok   bool
	}{{"ben", true}, {"ana", false}, {"", false}, {"Ben", false}, {"b:en", false}, {strings.Repeat("b", 33), false}} {
		err := parley.CheckDirectPeer("ana", tt.user)
		if (err == nil) != tt.ok || (err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument) {
			t.Errorf("CheckDirectPeer(ana, %q) = %v, want ok=%v", tt.user, err, tt.ok)
		}
	}
}

func TestMentionsColumn(t *testing.T) {
	for _, users := range [][]string{nil, {"ben"}, {"ben", "cy", "d.an"}} {
		s := parley.JoinMentions(users)
		if got := parley.SplitMentions(s); !slices.Equal(got, users) || (users == nil && got != nil) {
			t.Errorf("SplitMentions(JoinMentions(%q)) = %#v", users, got)
		}
	}
	if s := parley.JoinMentions([]string{"ben", "cy"}); s != "ben cy" {
		t.Errorf("JoinMentions = %q, want %q", s, "ben cy")
	}
}

func TestCheckDirectoryQuery(t *testing.T) {
	tests := []struct {
		q             parley.DirectoryQuery
		prefix, after string
		ok            bool
	}{
		{parley.DirectoryQuery{Prefix: " AnA ", Limit: 10}, "ana", "", true},
		{parley.DirectoryQuery{Prefix: "é", Limit: 1}, "é", "", true},
		{parley.DirectoryQuery{Limit: 200, After: parley.AdminCursor("ben")}, "", "ben", true},
		{parley.DirectoryQuery{Prefix: strings.Repeat("a", 64), Limit: 1}, strings.Repeat("a", 64), "", true},
		{parley.DirectoryQuery{Prefix: strings.Repeat("a", 65), Limit: 1}, "", "", false},
		{parley.DirectoryQuery{Prefix: "a\xff", Limit: 1}, "", "", false},
		{parley.DirectoryQuery{Prefix: "a\x00", Limit: 1}, "", "", false},
		{parley.DirectoryQuery{Limit: 0}, "", "", false},
		{parley.DirectoryQuery{Limit: 201}, "", "", false},
		{parley.DirectoryQuery{Limit: 1, After: "%%"}, "", "", false},
	}
	for _, tt := range tests {
		prefix, after, err := parley.CheckDirectoryQuery(tt.q)
		if (err == nil) != tt.ok || (err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument) {
			t.Errorf("CheckDirectoryQuery(%+v) = %v, want ok=%v", tt.q, err, tt.ok)
			continue
		}
		if tt.ok && (prefix != tt.prefix || after != tt.after) {
			t.Errorf("CheckDirectoryQuery(%+v) = %q, %q; want %q, %q", tt.q, prefix, after, tt.prefix, tt.after)
		}
	}
}
