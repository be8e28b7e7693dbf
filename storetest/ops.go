package storetest

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of the operations records: the audit log and incoming webhooks.

// opsRows is what a rejected operations request must leave as it was.
type opsRows struct {
	Audit, AuditIDs int64 // rows and sum of ids of audit_log
	Hooks           int64
	Pending         int64 // audit entries still pending
}

func (e *env) opsRows(t *testing.T) opsRows {
	t.Helper()
	return opsRows{
		Audit:    e.db.Int(t, "SELECT count(*) FROM audit_log"),
		AuditIDs: e.db.Int(t, "SELECT CAST(sum(id) AS BIGINT) FROM audit_log"),
		Hooks:    e.db.Int(t, "SELECT count(*) FROM hooks"),
		Pending:  e.db.Int(t, "SELECT count(*) FROM audit_log WHERE outcome = 'pending'"),
	}
}

func (e *env) opsUnchanged(t *testing.T, before opsRows) {
	t.Helper()
	if after := e.opsRows(t); after != before {
		t.Errorf("a rejected request changed the operations records:\nbefore %+v\nafter  %+v", before, after)
	}
}

// auditLine renders an entry without its time, which is compared apart.
func auditLine(a parley.AuditEntry) string {
	return fmt.Sprintf("%d %q %q %q %q %q", a.ID, a.Operator, a.Action, a.Target, a.Params, a.Outcome)
}

func auditLines(as []parley.AuditEntry) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = auditLine(a)
	}
	return out
}

// wantAudit compares a page of the audit log with the entries expected.
func wantAudit(t *testing.T, what string, got []parley.AuditEntry, want ...parley.AuditEntry) {
	t.Helper()
	if g, w := auditLines(got), auditLines(want); !slices.Equal(g, w) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, strings.Join(g, " | "), strings.Join(w, " | "))
		return
	}
	for i := range got {
		if !got[i].At.Equal(want[i].At) {
			t.Errorf("%s: entry %d at %v, appended at %v", what, got[i].ID, got[i].At, want[i].At)
		}
	}
}

// testAuditAppendAndPage: AppendAudit sets an increasing ID and At from the
// database clock (ignoring what the caller put there) and keeps every field
// byte for byte; Audit pages newest first by ID with Before and Limit (0 is
// DefaultAuditPage); an entry or query out of bounds is INVALID_ARGUMENT
// and stores nothing; a cancelled context is UNAVAILABLE and stores
// nothing.
func testAuditAppendAndPage(t *testing.T, e *env) {
	start := time.Now()
	var appended []parley.AuditEntry
	for i, in := range []parley.AuditEntry{
		{Operator: "root", Action: "user.disable", Target: "ben", Params: `{"id":"ben"}`, Outcome: "ok"},
		{Operator: "root", Action: "conv.rollback", Target: "c-ab", Params: `{"to_seq":3}`, Outcome: "NOT_FOUND"},
		{Operator: "ops", Action: "config.show", Outcome: "ok"},                                                        // empty target and params
		{Operator: "root", Action: "hook.create", Target: "c-ab", Params: `{"title":"café ☕ \"q\"\n"}`, Outcome: "ok"}, // non-ASCII, escapes
		{Operator: "root", Action: "retention.set", Target: "c:x.y_z-1", Params: "{}", Outcome: "INVALID_ARGUMENT",
			ID: 999, At: time.Unix(1, 0)}, // the store sets both
	} {
		got, err := e.st.AppendAudit(ctx(t), in)
		ok(t, err, fmt.Sprintf("append audit %d", i))
		want := in
		want.ID, want.At = got.ID, got.At
		if auditLine(got) != auditLine(want) {
			t.Errorf("append %d returned %s, want the input %s", i, auditLine(got), auditLine(want))
		}
		if i > 0 && got.ID <= appended[i-1].ID {
			t.Errorf("append %d: id %d after id %d, want increasing", i, got.ID, appended[i-1].ID)
		}
		if !within(got.At, start, time.Now()) {
			t.Errorf("append %d: At %v, want the database clock near %v", i, got.At, start)
		}
		appended = append(appended, got)
	}
	newest := slices.Clone(appended)
	slices.Reverse(newest)

	all, err := e.st.Audit(ctx(t), parley.AuditQuery{})
	ok(t, err, "audit with the default limit")
	wantAudit(t, "audit, default limit", all, newest...)

	// Keyset paging with a limit of 2: 5 4 | 3 2 | 1 | nothing.
	var before int64
	for page, want := range [][]parley.AuditEntry{newest[0:2], newest[2:4], newest[4:5], nil} {
		got, err := e.st.Audit(ctx(t), parley.AuditQuery{Before: before, Limit: 2})
		ok(t, err, fmt.Sprintf("audit page %d", page))
		wantAudit(t, fmt.Sprintf("audit page %d (before %d)", page, before), got, want...)
		if len(got) == 0 {
			break
		}
		before = got[len(got)-1].ID
	}
	got, err := e.st.Audit(ctx(t), parley.AuditQuery{Before: appended[4].ID + 1000, Limit: parley.MaxAuditPage})
	ok(t, err, "audit before a future id")
	wantAudit(t, "audit before a future id", got, newest...)

	// A second store on the same database (another gateway) reads the same log.
	got, err = e.db.Open(t).Audit(ctx(t), parley.AuditQuery{Limit: 1})
	ok(t, err, "audit through a second store")
	wantAudit(t, "audit through a second store", got, newest[0])

	long := strings.Repeat("a", parley.MaxAuditAction+1)
	valid := parley.AuditEntry{Operator: "root", Action: "user.disable", Target: "ben", Params: "{}", Outcome: "ok"}
	with := func(f func(*parley.AuditEntry)) parley.AuditEntry { a := valid; f(&a); return a }
	for _, tc := range []struct {
		name  string
		entry parley.AuditEntry
	}{
		{"empty_operator", with(func(a *parley.AuditEntry) { a.Operator = "" })},
		{"empty_action", with(func(a *parley.AuditEntry) { a.Action = "" })},
		{"long_operator", with(func(a *parley.AuditEntry) { a.Operator = long })},
		{"long_action", with(func(a *parley.AuditEntry) { a.Action = long })},
		{"long_target", with(func(a *parley.AuditEntry) { a.Target = long })},
		{"long_outcome", with(func(a *parley.AuditEntry) { a.Outcome = long })},
		{"long_params", with(func(a *parley.AuditEntry) { a.Params = strings.Repeat("x", parley.MaxAuditParams+1) })},
		{"long_params_multibyte", with(func(a *parley.AuditEntry) { a.Params = strings.Repeat("é", parley.MaxAuditParams/2+1) })},
		{"nul_params", with(func(a *parley.AuditEntry) { a.Params = "{\x00}" })},
		{"invalid_utf8_target", with(func(a *parley.AuditEntry) { a.Target = "b\xffn" })},
	} {
		t.Run("reject_"+tc.name, func(t *testing.T) {
			before := e.opsRows(t)
			_, err := e.st.AppendAudit(ctx(t), tc.entry)
			wantCode(t, err, parley.CodeInvalidArgument)
			e.opsUnchanged(t, before)
		})
	}
	for _, tc := range []struct {
		name string
		q    parley.AuditQuery
	}{
		{"negative_limit", parley.AuditQuery{Limit: -1}},
		{"limit_over_max", parley.AuditQuery{Limit: parley.MaxAuditPage + 1}},
		{"negative_before", parley.AuditQuery{Before: -1}},
	} {
		t.Run("query_"+tc.name, func(t *testing.T) {
			_, err := e.st.Audit(ctx(t), tc.q)
			wantCode(t, err, parley.CodeInvalidArgument)
		})
	}

	t.Run("cancelled", func(t *testing.T) {
		dead, cancel := context.WithCancel(ctx(t))
		cancel()
		before := e.opsRows(t)
		_, err := e.st.AppendAudit(dead, valid)
		wantCode(t, err, parley.CodeUnavailable)
		_, err = e.st.Audit(dead, parley.AuditQuery{})
		wantCode(t, err, parley.CodeUnavailable)
		e.opsUnchanged(t, before)
	})

	// The bounds are inclusive.
	edge := parley.AuditEntry{
		Operator: strings.Repeat("o", parley.MaxAuditAction),
		Action:   strings.Repeat("a", parley.MaxAuditAction),
		Target:   strings.Repeat("t", parley.MaxAuditAction),
		Params:   strings.Repeat("é", parley.MaxAuditParams/2),
		Outcome:  strings.Repeat("c", parley.MaxAuditAction),
	}
	edge, err = e.st.AppendAudit(ctx(t), edge)
	ok(t, err, "append an entry at every bound")
	got, err = e.st.Audit(ctx(t), parley.AuditQuery{Limit: 1})
	ok(t, err, "audit after the entry at the bounds")
	wantAudit(t, "entry at the bounds", got, edge)
}

// testHookCreateRules: CreateHook checks in the documented order (input →
// conversation NOT_FOUND → bot missing or disabled NOT_FOUND → bot without
// an open period NOT_MEMBER), a rejected request stores nothing; a created
// hook has a NewID id and a base64url secret of HookSecretBytes, Hook
// returns it with that secret (from another store too), AdminHooks lists
// every hook with its secret blanked, and two hooks never share a secret.
func testHookCreateRules(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	for _, u := range []string{"bot", "ghost", "off", "gone"} {
		e.bystander(t, u)
	}
	const c = "c-ab"
	e.group(t, ana, c, "bot", "off", "gone")
	_, err := e.st.RemoveMember(ctx(t), ana, c, "gone")
	ok(t, err, "remove gone")
	ok(t, e.st.SetUserDisabled(ctx(t), "off", true), "disable off")

	for _, tc := range []struct {
		name string
		h    parley.NewHook
		want parley.Code
		msg  string // the message, when it tells which check answered
	}{
		{"malformed_conv", parley.NewHook{Conv: "c ab", Bot: "nobody", CreatedBy: "root"}, parley.CodeInvalidArgument, ""},
		{"empty_conv", parley.NewHook{Bot: "bot", CreatedBy: "root"}, parley.CodeInvalidArgument, ""},
		{"malformed_bot", parley.NewHook{Conv: "c-nope", Bot: "Bot!", CreatedBy: "root"}, parley.CodeInvalidArgument, ""},
		{"empty_bot", parley.NewHook{Conv: c, CreatedBy: "root"}, parley.CodeInvalidArgument, ""},
		{"empty_created_by", parley.NewHook{Conv: "c-nope", Bot: "bot"}, parley.CodeInvalidArgument, ""},
		{"long_created_by", parley.NewHook{Conv: c, Bot: "bot", CreatedBy: strings.Repeat("r", parley.MaxAuditAction+1)}, parley.CodeInvalidArgument, ""},
		{"unknown_conv_unknown_bot", parley.NewHook{Conv: "c-nope", Bot: "nobody", CreatedBy: "root"}, parley.CodeNotFound, parley.ErrConvNotFound.Msg},
		{"unknown_conv_non_member_bot", parley.NewHook{Conv: "c-nope", Bot: "ghost", CreatedBy: "root"}, parley.CodeNotFound, parley.ErrConvNotFound.Msg},
		{"unknown_bot", parley.NewHook{Conv: c, Bot: "nobody", CreatedBy: "root"}, parley.CodeNotFound, parley.ErrBotNotFound.Msg},
		{"disabled_bot", parley.NewHook{Conv: c, Bot: "off", CreatedBy: "root"}, parley.CodeNotFound, parley.ErrBotNotFound.Msg},
		{"bot_not_member", parley.NewHook{Conv: c, Bot: "ghost", CreatedBy: "root"}, parley.CodeNotMember, ""},
		{"bot_removed", parley.NewHook{Conv: c, Bot: "gone", CreatedBy: "root"}, parley.CodeNotMember, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, conv := e.opsRows(t), e.snapshot(t, c)
			_, err := e.st.CreateHook(ctx(t), tc.h)
			if wantCode(t, err, tc.want) && tc.msg != "" && parley.ErrorMessage(err) != tc.msg {
				t.Errorf("message %q, want %q (the check order)", parley.ErrorMessage(err), tc.msg)
			}
			e.opsUnchanged(t, before)
			e.unchanged(t, c, conv)
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		dead, cancel := context.WithCancel(ctx(t))
		cancel()
		before := e.opsRows(t)
		_, err := e.st.CreateHook(dead, parley.NewHook{Conv: c, Bot: "bot", CreatedBy: "root"})
		wantCode(t, err, parley.CodeUnavailable)
		_, err = e.st.AdminHooks(dead, parley.AdminQuery{Limit: parley.MaxAdminPage})
		wantCode(t, err, parley.CodeUnavailable)
		e.opsUnchanged(t, before)
	})

	hooks := e.hooks(t, "hooks before any")
	if len(hooks) != 0 {
		t.Errorf("hooks before any were created: %+v", hooks)
	}

	start := time.Now()
	h1, err := e.st.CreateHook(ctx(t), parley.NewHook{Conv: c, Bot: "bot", CreatedBy: "root"})
	ok(t, err, "create hook")
	h2, err := e.st.CreateHook(ctx(t), parley.NewHook{Conv: c, Bot: "bot", CreatedBy: "ops"})
	ok(t, err, "create a second hook for the same bot")
	end := time.Now()
	for _, h := range []parley.Hook{h1, h2} {
		if !validNewID(h.ID) {
			t.Errorf("hook id %q is not NewID text", h.ID)
		}
		if b, err := base64.RawURLEncoding.DecodeString(h.Secret); err != nil || len(b) != parley.HookSecretBytes {
			t.Errorf("hook %s: secret %q is not base64url of %d bytes (%d, %v)", h.ID, h.Secret, parley.HookSecretBytes, len(b), err)
		}
		if h.Conv != c || h.Bot != "bot" {
			t.Errorf("hook %s: conv %q bot %q, want %s and bot", h.ID, h.Conv, h.Bot, c)
		}
		if !within(h.CreatedAt, start, end) {
			t.Errorf("hook %s: created at %v, want the database clock near %v", h.ID, h.CreatedAt, start)
		}
	}
	if h1.CreatedBy != "root" || h2.CreatedBy != "ops" {
		t.Errorf("created by %q and %q, want root and ops", h1.CreatedBy, h2.CreatedBy)
	}
	if h1.ID == h2.ID || h1.Secret == h2.Secret {
		t.Errorf("two hooks share an id or a secret: %+v %+v", h1, h2)
	}

	other := e.db.Open(t) // another gateway sees the same hooks
	for _, st := range []parley.Store{e.st, other} {
		for _, h := range []parley.Hook{h1, h2} {
			got, err := st.Hook(ctx(t), h.ID)
			if wantCode(t, err, "") && !sameHook(got, h) {
				t.Errorf("Hook(%s) = %+v, want %+v", h.ID, got, h)
			}
		}
	}

	blank := func(h parley.Hook) parley.Hook { h.Secret = ""; return h }
	wantHooks(t, "hooks, secrets blanked", e.hooks(t, "hooks"), blank(h1), blank(h2))
}

// testHookDelete: DeleteHook removes one hook at once (Hook NOT_FOUND,
// gone from AdminHooks, the other hook and its secret untouched); deleting it
// again or deleting an id nobody issued is NOT_FOUND; a malformed id is
// INVALID_ARGUMENT for Hook and DeleteHook alike.
func testHookDelete(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "bot")
	const c = "c-ab"
	e.group(t, ana, c, "bot")
	h1, err := e.st.CreateHook(ctx(t), parley.NewHook{Conv: c, Bot: "bot", CreatedBy: "root"})
	ok(t, err, "create hook 1")
	h2, err := e.st.CreateHook(ctx(t), parley.NewHook{Conv: c, Bot: "bot", CreatedBy: "root"})
	ok(t, err, "create hook 2")

	ok(t, e.st.DeleteHook(ctx(t), h1.ID), "delete hook 1")
	_, err = e.st.Hook(ctx(t), h1.ID)
	wantCode(t, err, parley.CodeNotFound)
	_, err = e.db.Open(t).Hook(ctx(t), h1.ID)
	wantCode(t, err, parley.CodeNotFound)
	wantCode(t, e.st.DeleteHook(ctx(t), h1.ID), parley.CodeNotFound)
	if got, err := e.st.Hook(ctx(t), h2.ID); wantCode(t, err, "") && !sameHook(got, h2) {
		t.Errorf("the other hook after the delete: %+v, want %+v", got, h2)
	}
	h2.Secret = ""
	wantHooks(t, "hooks after the delete", e.hooks(t, "hooks after the delete"), h2)

	for _, tc := range []struct{ name, id string }{
		{"new_id", parley.NewID()},
		{"one_char", "0"},
		{"max_length", strings.Repeat("f", parley.MaxHookIDChars)},
	} {
		t.Run("unknown_"+tc.name, func(t *testing.T) {
			before := e.opsRows(t)
			_, err := e.st.Hook(ctx(t), tc.id)
			wantCode(t, err, parley.CodeNotFound)
			wantCode(t, e.st.DeleteHook(ctx(t), tc.id), parley.CodeNotFound)
			e.opsUnchanged(t, before)
		})
	}
	for _, tc := range []struct{ name, id string }{
		{"empty", ""},
		{"upper_case", strings.ToUpper(h2.ID)},
		{"not_hex", "hook-1"},
		{"too_long", strings.Repeat("a", parley.MaxHookIDChars+1)},
		{"space", h2.ID + " "},
		{"sql", "' OR 1=1 --"},
	} {
		t.Run("malformed_"+tc.name, func(t *testing.T) {
			before := e.opsRows(t)
			_, err := e.st.Hook(ctx(t), tc.id)
			wantCode(t, err, parley.CodeInvalidArgument)
			wantCode(t, e.st.DeleteHook(ctx(t), tc.id), parley.CodeInvalidArgument)
			e.opsUnchanged(t, before)
		})
	}
}

// sameHook compares hooks field by field, times by Equal.
func sameHook(a, b parley.Hook) bool {
	return a.ID == b.ID && a.Conv == b.Conv && a.Bot == b.Bot && a.Secret == b.Secret &&
		a.CreatedBy == b.CreatedBy && a.CreatedAt.Equal(b.CreatedAt)
}

// hooks returns every webhook as the operators' listing shows it (one
// page: the tests create far fewer than MaxAdminPage).
func (e *env) hooks(t *testing.T, what string) []parley.Hook {
	t.Helper()
	page, err := e.st.AdminHooks(ctx(t), parley.AdminQuery{Limit: parley.MaxAdminPage})
	ok(t, err, what)
	if page.HasMore {
		t.Fatalf("%s: more than %d hooks", what, parley.MaxAdminPage)
	}
	return page.Items
}

// wantHooks compares a listing of hooks with want, both in id order (the
// listing's order).
func wantHooks(t *testing.T, what string, got []parley.Hook, want ...parley.Hook) {
	t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b parley.Hook) int { return strings.Compare(a.ID, b.ID) })
	if !slices.EqualFunc(got, want, sameHook) {
		t.Errorf("%s:\ngot  %+v\nwant %+v", what, got, want)
	}
}

// validNewID reports whether id is the text of a UUIDv7 as NewID makes it.
func validNewID(id string) bool {
	if len(id) != 36 || !parley.ValidHookID(id) {
		return false
	}
	for i, c := range id {
		if dash := i == 8 || i == 13 || i == 18 || i == 23; dash != (c == '-') {
			return false
		}
	}
	return id[14] == '7' && strings.ContainsRune("89ab", rune(id[19]))
}

// testAuditFinish: an entry appended as pending is finished once with its
// outcome; finishing it again, finishing a finished or unknown entry is
// NOT_FOUND; a bad outcome is INVALID_ARGUMENT; nothing else changes.
func testAuditFinish(t *testing.T, e *env) {
	pending, err := e.st.AppendAudit(ctx(t), parley.AuditEntry{Operator: "root", Action: "conv.rollback", Target: "g", Params: "{}", Outcome: parley.AuditPending})
	ok(t, err, "append pending")
	done, err := e.st.AppendAudit(ctx(t), parley.AuditEntry{Operator: "root", Action: "user.disable", Target: "ben", Outcome: "ok"})
	ok(t, err, "append finished")

	for _, c := range []struct {
		name    string
		id      int64
		outcome string
		code    parley.Code
	}{
		{"pending as an outcome", pending.ID, parley.AuditPending, parley.CodeInvalidArgument},
		{"empty outcome", pending.ID, "", parley.CodeInvalidArgument},
		{"outcome too long", pending.ID, strings.Repeat("X", parley.MaxAuditAction+1), parley.CodeInvalidArgument},
		{"zero id", 0, "ok", parley.CodeInvalidArgument},
		{"finished entry", done.ID, "NOT_FOUND", parley.CodeNotFound},
		{"unknown entry", pending.ID + 100, "ok", parley.CodeNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.opsRows(t)
			wantCode(t, e.st.FinishAudit(ctx(t), c.id, c.outcome), c.code)
			e.opsUnchanged(t, before)
		})
	}

	ok(t, e.st.FinishAudit(ctx(t), pending.ID, "ok"), "finish")
	wantCode(t, e.st.FinishAudit(ctx(t), pending.ID, "NOT_FOUND"), parley.CodeNotFound)
	got, err := e.st.Audit(ctx(t), parley.AuditQuery{})
	ok(t, err, "audit")
	pending.Outcome = "ok"
	wantAudit(t, "after finishing", got, done, pending)
}
