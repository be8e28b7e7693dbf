package parley_test

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

func TestCodesTable(t *testing.T) {
	retryable := map[parley.Code]bool{parley.CodeUnavailable: true, parley.CodeRateLimited: true}
	seen := map[parley.Code]bool{}
	for _, c := range parley.Codes {
		if seen[c.Code] {
			t.Errorf("%s listed twice", c.Code)
		}
		seen[c.Code] = true
		if c.Retryable != retryable[c.Code] {
			t.Errorf("%s: retryable = %v", c.Code, c.Retryable)
		}
		if c.Code.IsTerminal() == retryable[c.Code] {
			t.Errorf("%s: IsTerminal = %v", c.Code, c.Code.IsTerminal())
		}
		if c.Action == "" {
			t.Errorf("%s: action %q", c.Code, c.Action)
		}
	}
	if len(seen) != 18 {
		t.Errorf("got %d codes, docs/protocol.md names 18", len(seen))
	}
}

// docs/protocol.md carries the client action of every code.
func TestProtocolDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range parley.Codes {
		row := fmt.Sprintf("| `%s` |", c.Code)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/protocol.md has no row starting %q", row)
		}
	}
}

func TestErrorCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code parley.Code
		msg  string
	}{
		{"nil", nil, "", ""},
		{"protocol", parley.Errorf(parley.CodeNotSender, "only the sender"), parley.CodeNotSender, "only the sender"},
		{"wrapped", fmt.Errorf("op: %w", parley.ErrNotMember), parley.CodeNotMember, parley.ErrNotMember.Msg},
		{"internal", errors.New(`pq: relation "events" does not exist`), parley.CodeUnavailable, parley.InternalMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parley.ErrorCode(tt.err); got != tt.code {
				t.Errorf("ErrorCode = %q, want %q", got, tt.code)
			}
			if tt.err != nil {
				if got := parley.ErrorMessage(tt.err); got != tt.msg {
					t.Errorf("ErrorMessage = %q, want %q", got, tt.msg)
				}
			}
		})
	}
}

func TestResolveLogin(t *testing.T) {
	tests := []struct {
		in, kind, value string
		ok              bool
	}{
		{"ana", parley.LoginByID, "ana", true},
		{"Ana", parley.LoginByID, "ana", true},
		{"  ANA ", parley.LoginByID, "ana", true},
		{"ana.b_c-9", parley.LoginByID, "ana.b_c-9", true},
		{"Ana@Example.COM", parley.LoginByEmail, "ana@example.com", true},
		{" ana@example.com", parley.LoginByEmail, "ana@example.com", true},
		{"", "", "", false},
		{".ana", "", "", false},
		{"ana b", "", "", false},
		{strings.Repeat("a", 33), "", "", false},
		{strings.Repeat("a", 32), parley.LoginByID, strings.Repeat("a", 32), true},
		{"ana@", "", "", false},
		{"@example.com", "", "", false},
		{"a@b@example.com", "", "", false},
		{"ana@example", "", "", false},
		{"ana@exa mple.com", "", "", false},
		{"ünï", "", "", false},
	}
	for _, tt := range tests {
		kind, value, err := parley.ResolveLogin(tt.in)
		if (err == nil) != tt.ok || kind != tt.kind || value != tt.value {
			t.Errorf("ResolveLogin(%q) = %q, %q, %v; want %q, %q, ok=%v", tt.in, kind, value, err, tt.kind, tt.value, tt.ok)
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("ResolveLogin(%q): code %s", tt.in, parley.ErrorCode(err))
		}
	}
}

// FuzzResolveLogin: the resolver never panics, its output is canonical (a
// second pass is a no-op) and always a valid id or a lower-case email.
func FuzzResolveLogin(f *testing.F) {
	for _, s := range []string{"ana", "Ana@Example.COM", " x ", "a@b.c", "\xff", "a@@b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, login string) {
		kind, value, err := parley.ResolveLogin(login)
		if err != nil {
			return
		}
		if !utf8.ValidString(value) || value != strings.ToLower(value) {
			t.Fatalf("%q resolved to non-canonical %q", login, value)
		}
		if kind == parley.LoginByID && !parley.ValidUserID(value) {
			t.Fatalf("%q resolved to invalid id %q", login, value)
		}
		k2, v2, err := parley.ResolveLogin(value)
		if err != nil || k2 != kind || v2 != value {
			t.Fatalf("resolving %q again gave %q %q %v", value, k2, v2, err)
		}
	})
}

func TestPeriods(t *testing.T) {
	ps := parley.Periods{{From: 1, To: 5}, {From: 9, To: 0}}
	for seq, want := range map[int64]bool{0: false, 1: true, 5: true, 6: false, 8: false, 9: true, 100: true} {
		if got := ps.Visible(seq); got != want {
			t.Errorf("Visible(%d) = %v", seq, got)
		}
	}
	if !ps.Open() || ps.Head(20) != 20 {
		t.Errorf("open member: Open %v Head %d", ps.Open(), ps.Head(20))
	}
	left := parley.Periods{{From: 1, To: 5}, {From: 9, To: 12}}
	if left.Open() || left.Head(20) != 12 {
		t.Errorf("former member: Open %v Head %d", left.Open(), left.Head(20))
	}
	got := fmt.Sprint(ps.Ranges(3, 20))
	if got != "[[4 5] [9 20]]" {
		t.Errorf("Ranges(3, 20) = %s", got)
	}
	if got := fmt.Sprint(ps.Ranges(7, 20)); got != "[[9 20]]" {
		t.Errorf("Ranges(7, 20) = %s", got)
	}
	if got := fmt.Sprint(left.Ranges(12, 12)); got != "[]" {
		t.Errorf("Ranges(12, 12) = %s", got)
	}
}

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := parley.NewID()
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

func TestValidateBounds(t *testing.T) {
	body := func(n int) string { return strings.Repeat("é", n) }
	tests := []struct {
		name string
		err  error
		ok   bool
	}{
		{"cmid empty", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "", Body: "x"}), false},
		{"cmid 64", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: strings.Repeat("ж", 64), Body: "x"}), true},
		{"cmid 65", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: strings.Repeat("ж", 65), Body: "x"}), false},
		{"body 4000", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "k", Body: body(4000)}), true},
		{"body 4001", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "k", Body: body(4001)}), false},
		{"body empty", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "k", Body: ""}), false},
		{"body invalid utf8", parley.ValidateSend(parley.SendRequest{Conv: "c", CMID: "k", Body: "a\xffb"}), false},
		{"conv bad", parley.ValidateSend(parley.SendRequest{Conv: "c/d", CMID: "k", Body: "x"}), false},
		{"conv 65", parley.ValidateSend(parley.SendRequest{Conv: strings.Repeat("c", 65), CMID: "k", Body: "x"}), false},
		{"recall target 0", parley.ValidateRecall(parley.RecallRequest{Conv: "c", CMID: "k", Target: 0}), false},
	}
	for _, tt := range tests {
		if (tt.err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, tt.err, tt.ok)
		}
		if tt.err != nil && parley.ErrorCode(tt.err) != parley.CodeInvalidArgument {
			t.Errorf("%s: code %s", tt.name, parley.ErrorCode(tt.err))
		}
	}
	for limit, want := range map[int]int{1: 1, 200: 200, 1000: 200} {
		r, err := parley.ValidateSync(parley.SyncRequest{Conv: "c", Limit: limit})
		if err != nil || r.Limit != want {
			t.Errorf("limit %d: got %d, %v", limit, r.Limit, err)
		}
	}
	for _, r := range []parley.SyncRequest{{Conv: "c", Limit: 0}, {Conv: "c", Limit: 1, After: -1}} {
		if _, err := parley.ValidateSync(r); parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// FuzzValidateSend: a send is accepted exactly when its cmid is 1–64 and
// its body 1–4000 code points of valid UTF-8 without NUL, and a rejection
// is always INVALID_ARGUMENT.
func FuzzValidateSend(f *testing.F) {
	f.Add("c-ab", "k1", "hello")
	f.Add("c-ab", "", "x")
	f.Add("c/ab", "k", "x")
	f.Add("c-ab", "k", "a\x00b")
	f.Add("c-ab", "k", "\xed\xa0\x80")
	f.Fuzz(func(t *testing.T, conv, cmid, body string) {
		err := parley.ValidateSend(parley.SendRequest{Conv: conv, CMID: cmid, Body: body})
		ok := func(s string, max int) bool {
			n := utf8.RuneCountInString(s)
			return utf8.ValidString(s) && !strings.ContainsRune(s, 0) && n >= 1 && n <= max
		}
		want := parley.ValidConvID(conv) && ok(cmid, parley.MaxCMIDChars) && ok(body, parley.MaxBodyChars)
		if (err == nil) != want {
			t.Fatalf("ValidateSend(%q, %q, %d bytes) = %v, want ok=%v", conv, cmid, len(body), err, want)
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Fatalf("code %s", parley.ErrorCode(err))
		}
	})
}

func TestRetentionCut(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name                   string
		r                      parley.Retention
		minSeq, head, keepFrom int64
		want                   int64
	}{
		{"no policy keeps all", parley.Retention{}, 1, 10, 0, 0},
		{"keep last 3", parley.Retention{KeepLast: 3}, 1, 10, 0, 7},
		{"keep last more than stored", parley.Retention{KeepLast: 30}, 1, 10, 0, 0},
		{"keep last below min_seq", parley.Retention{KeepLast: 3}, 9, 10, 0, 8},
		{"age: young from 6", parley.Retention{MaxAge: day}, 1, 10, 6, 5},
		{"age: nothing young", parley.Retention{MaxAge: day}, 1, 10, 0, 10},
		{"age and count: the longer prefix", parley.Retention{MaxAge: day, KeepLast: 2}, 1, 10, 4, 8},
		{"age wins over count", parley.Retention{MaxAge: day, KeepLast: 8}, 1, 10, 6, 5},
		{"empty log", parley.Retention{KeepLast: 1, MaxAge: day}, 5, 4, 0, 4},
	}
	for _, tt := range tests {
		if got := tt.r.Cut(tt.minSeq, tt.head, tt.keepFrom); got != tt.want {
			t.Errorf("%s: Cut = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestCheckToken(t *testing.T) {
	p := parley.Principal{User: "ana", DeviceID: "d1", InstallID: "i2", Role: parley.RoleUser}
	o := parley.Options{TokenIdle: 10 * time.Hour, TokenRefresh: time.Hour, StaleInstallGrace: 2 * time.Hour, TokenMax: 100 * time.Hour}
	tests := []struct {
		name   string
		found  bool
		rec    parley.TokenRecord
		want   parley.Code
		action parley.TokenAction
	}{
		{"unknown", false, parley.TokenRecord{}, parley.CodeUnauthenticated, parley.TokenKeep},
		{"current install", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2"}, "", parley.TokenKeep},
		{"disabled", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Disabled: true}, parley.CodeUnauthenticated, parley.TokenKeep},
		{"replaced install", true, parley.TokenRecord{Principal: p, DeviceInstall: "i3"}, parley.CodeStaleInstall, parley.TokenKeep},
		{"device gone", true, parley.TokenRecord{Principal: p}, parley.CodeStaleInstall, parley.TokenKeep},
		{"used within the refresh interval", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Idle: 59 * time.Minute}, "", parley.TokenKeep},
		{"due a refresh", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Idle: time.Hour}, "", parley.TokenRefresh},
		{"idle at the limit", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Idle: 10 * time.Hour}, "", parley.TokenRefresh},
		{"idle expired", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Idle: 10*time.Hour + time.Millisecond}, parley.CodeUnauthenticated, parley.TokenDelete},
		{"idle expired and disabled", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Disabled: true, Idle: 11 * time.Hour}, parley.CodeUnauthenticated, parley.TokenDelete},
		{"replaced, in grace, never refreshed", true, parley.TokenRecord{Principal: p, DeviceInstall: "i3", Idle: 5 * time.Hour, Replaced: true, ReplacedFor: 2 * time.Hour}, parley.CodeStaleInstall, parley.TokenKeep},
		{"replaced, device back on its install", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Replaced: true, ReplacedFor: time.Minute}, parley.CodeStaleInstall, parley.TokenKeep},
		{"busy, at the absolute lifetime", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Age: 100 * time.Hour}, "", parley.TokenKeep},
		{"busy, past the absolute lifetime", true, parley.TokenRecord{Principal: p, DeviceInstall: "i2", Age: 100*time.Hour + time.Millisecond}, parley.CodeUnauthenticated, parley.TokenDelete},
		{"replaced, past the grace", true, parley.TokenRecord{Principal: p, DeviceInstall: "i3", Replaced: true, ReplacedFor: 2*time.Hour + time.Millisecond}, parley.CodeUnauthenticated, parley.TokenDelete},
	}
	for _, tt := range tests {
		got, action, err := o.CheckToken(tt.found, tt.rec)
		if parley.ErrorCode(err) != tt.want || (err == nil && got != p) || action != tt.action {
			t.Errorf("%s: %+v, action %d, %v; want code %q, action %d", tt.name, got, action, err, tt.want, tt.action)
		}
	}
	for _, tok := range []string{"", strings.Repeat("x", 257)} {
		if parley.ErrorCode(parley.CheckTokenShape(tok)) != parley.CodeUnauthenticated {
			t.Errorf("token of %d bytes accepted", len(tok))
		}
	}
}

func TestTokenDefaults(t *testing.T) {
	o := parley.Options{}.WithDefaults()
	if o.TokenIdle != parley.DefaultTokenIdle || o.TokenRefresh != parley.DefaultTokenRefresh || o.StaleInstallGrace != parley.DefaultStaleInstallGrace {
		t.Errorf("defaults: %+v", o)
	}
	// A refresh interval above half the idle lifetime could let a token in
	// use expire between two refreshes: it is clamped.
	o = parley.Options{TokenIdle: time.Hour, TokenRefresh: 2 * time.Hour}.WithDefaults()
	if o.TokenRefresh != 30*time.Minute {
		t.Errorf("refresh %s for idle 1h, want 30m", o.TokenRefresh)
	}
	if err := parley.CheckSweep(0); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("CheckSweep(0) = %v", err)
	}
}
