package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of accounts a person manages: display names, password changes,
// the signed-in devices, and the absolute token lifetime.

// testDisplayName: a display name is trimmed, bounded, free of control
// characters, cleared by an empty string, and read back by User and the
// directory (whose ID filter lists exactly one user).
func testDisplayName(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	e.user(t, "anatole", "", "")
	ana := e.login(t, "ana", "d1", "i1").Principal

	for _, tc := range []struct {
		name, in, want string
		code           parley.Code
	}{
		{"plain", "Ana Lima", "Ana Lima", ""},
		{"trimmed", "  Ana \t", "Ana", ""},
		{"unicode", "安娜 🌸", "安娜 🌸", ""},
		{"longest", strings.Repeat("é", 64), strings.Repeat("é", 64), ""},
		{"too_long", strings.Repeat("é", 65), "", parley.CodeInvalidArgument},
		{"control", "Ana\nLima", "", parley.CodeInvalidArgument},
		{"nul", "Ana\x00", "", parley.CodeInvalidArgument},
		{"invalid_utf8", "Ana\xff", "", parley.CodeInvalidArgument},
		{"cleared", "   ", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := e.st.User(ctx(t), "ana")
			u, err := e.st.SetDisplayName(ctx(t), "ana", tc.in)
			if !wantCode(t, err, tc.code) {
				return
			}
			if tc.code != "" {
				after, _ := e.st.User(ctx(t), "ana")
				if after.DisplayName != before.DisplayName {
					t.Errorf("a refused name changed it: %q → %q", before.DisplayName, after.DisplayName)
				}
				return
			}
			if u.DisplayName != tc.want || u.ID != "ana" {
				t.Errorf("SetDisplayName returned %+v, want display name %q", u, tc.want)
			}
			if got, err := e.st.User(ctx(t), "ana"); err != nil || got.DisplayName != tc.want {
				t.Errorf("User: %q %v, want %q", got.DisplayName, err, tc.want)
			}
		})
	}
	_, err := e.st.SetDisplayName(ctx(t), "ghost", "Ghost")
	wantCode(t, err, parley.CodeNotFound)

	_, err = e.st.SetDisplayName(ctx(t), "ana", "Ana Lima")
	ok(t, err, "set display name")
	page, err := e.st.Directory(ctx(t), ana, parley.DirectoryQuery{Prefix: "ana", Limit: 10})
	ok(t, err, "directory")
	want := []parley.DirectoryEntry{{ID: "ana", DisplayName: "Ana Lima"}, {ID: "anatole"}}
	if !equalEntries(page.Items, want) {
		t.Errorf("directory: %+v, want %+v", page.Items, want)
	}
	page, err = e.st.Directory(ctx(t), ana, parley.DirectoryQuery{ID: "ana", Limit: 1})
	if ok(t, err, "directory by id"); len(page.Items) != 1 || page.Items[0] != want[0] || page.HasMore {
		t.Errorf("directory by id: %+v, want only %+v", page, want[0])
	}
	page, err = e.st.Directory(ctx(t), ana, parley.DirectoryQuery{ID: "ghost", Limit: 1})
	if ok(t, err, "directory by unknown id"); len(page.Items) != 0 {
		t.Errorf("directory by unknown id: %+v, want none", page.Items)
	}
	_, err = e.st.Directory(ctx(t), ana, parley.DirectoryQuery{ID: "Not An Id", Limit: 1})
	wantCode(t, err, parley.CodeInvalidArgument)
}

func equalEntries(a, b []parley.DirectoryEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testChangePassword: a wrong current password is INVALID_ARGUMENT and
// changes nothing; a new password too short is refused before any check;
// a change keeps the caller's token and deletes every other token of the
// user (other devices, and the caller's device's older tokens), no one
// else's.
func testChangePassword(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	e.user(t, "cy", "", "")
	s := e.login(t, "ben", "d1", "i1")
	older := e.login(t, "ben", "d1", "i1")
	phone := e.login(t, "ben", "d2", "i1")
	other := e.login(t, "cy", "d1", "i1")
	const fresh = "a brand new password"

	err := e.st.ChangePassword(ctx(t), s.Principal, s.Token, "not the password", fresh)
	if wantCode(t, err, parley.CodeInvalidArgument) && err.Error() != parley.ErrWrongPassword.Error() {
		t.Errorf("wrong current password: %q, want %q", err, parley.ErrWrongPassword)
	}
	wantCode(t, e.st.ChangePassword(ctx(t), s.Principal, s.Token, password, "short7!"), parley.CodeInvalidArgument)
	wantCode(t, e.st.ChangePassword(ctx(t), s.Principal, s.Token, "", fresh), parley.CodeInvalidArgument)
	for _, tok := range []string{s.Token, older.Token, phone.Token} {
		if _, err := e.st.Authenticate(ctx(t), tok); err != nil {
			t.Fatalf("a token after refused changes: %v", err)
		}
	}

	ok(t, e.st.ChangePassword(ctx(t), s.Principal, s.Token, password, fresh), "change password")
	if p, err := e.st.Authenticate(ctx(t), s.Token); err != nil || p != s.Principal {
		t.Errorf("the caller's token after the change: %+v %v", p, err)
	}
	for name, tok := range map[string]string{"older token of the device": older.Token, "other device": phone.Token} {
		_, err := e.st.Authenticate(ctx(t), tok)
		if !wantCode(t, err, parley.CodeUnauthenticated) {
			t.Errorf("(%s)", name)
		}
	}
	if p, err := e.st.Authenticate(ctx(t), other.Token); err != nil || p.User != "cy" {
		t.Errorf("another user's token: %+v %v", p, err)
	}
	_, err = e.st.Login(ctx(t), parley.LoginRequest{Login: "ben", Password: password, DeviceID: "d3", InstallID: "i1"})
	wantCode(t, err, parley.CodeUnauthenticated)
	if got, err := e.st.Login(ctx(t), parley.LoginRequest{Login: "ben", Password: fresh, DeviceID: "d3", InstallID: "i1"}); err != nil || got.User != "ben" {
		t.Errorf("login with the new password: %+v %v", got.Principal, err)
	}
}

// testSessions: the signed-in devices are those with a live token of
// their current install, one entry each, by device id, the caller's marked
// current; revoking a device deletes its tokens (NOT_FOUND when it has
// none, INVALID_ARGUMENT for a malformed id) and no other device's.
func testSessions(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	e.user(t, "cy", "", "")
	laptop := e.login(t, "ben", "laptop", "i1")
	e.login(t, "ben", "laptop", "i1") // a second token of the same device: one entry
	phone := e.login(t, "ben", "phone", "i1")
	e.login(t, "ben", "tablet", "i1")
	tablet := e.login(t, "ben", "tablet", "i2") // replaced install: only i2 counts
	e.login(t, "cy", "desk", "i1")

	got, err := e.st.Sessions(ctx(t), laptop.Principal)
	ok(t, err, "sessions")
	wantSessions(t, got, []string{"laptop", "phone", "tablet"}, "laptop")
	for _, s := range got {
		if s.CreatedAt.IsZero() || s.LastSeen.Before(s.CreatedAt) || time.Since(s.LastSeen) > time.Hour {
			t.Errorf("session %+v: times out of order or not now", s)
		}
	}

	wantCode(t, e.st.RevokeDevice(ctx(t), laptop.Principal, ""), parley.CodeInvalidArgument)
	wantCode(t, e.st.RevokeDevice(ctx(t), laptop.Principal, "desk"), parley.CodeNotFound) // cy's device
	ok(t, e.st.RevokeDevice(ctx(t), laptop.Principal, "phone"), "revoke phone")
	_, err = e.st.Authenticate(ctx(t), phone.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	wantCode(t, e.st.RevokeDevice(ctx(t), laptop.Principal, "phone"), parley.CodeNotFound)
	for _, tok := range []string{laptop.Token, tablet.Token} {
		if _, err := e.st.Authenticate(ctx(t), tok); err != nil {
			t.Errorf("another device's token after revoking phone: %v", err)
		}
	}
	got, err = e.st.Sessions(ctx(t), tablet.Principal)
	ok(t, err, "sessions after revoke")
	wantSessions(t, got, []string{"laptop", "tablet"}, "tablet")
	got, err = e.st.Sessions(ctx(t), parley.Principal{User: "cy", DeviceID: "desk", InstallID: "i1"})
	ok(t, err, "cy's sessions")
	wantSessions(t, got, []string{"desk"}, "desk")
}

func wantSessions(t *testing.T, got []parley.DeviceSession, devices []string, current string) {
	t.Helper()
	var ids []string
	for _, s := range got {
		ids = append(ids, s.DeviceID)
		if s.Current != (s.DeviceID == current) {
			t.Errorf("session %s: current %v, want %v", s.DeviceID, s.Current, s.DeviceID == current)
		}
	}
	if strings.Join(ids, ",") != strings.Join(devices, ",") {
		t.Errorf("sessions %v, want %v", ids, devices)
	}
}

// testTokenMaxLifetime (TokenMax 5h, TokenIdle 3h, TokenRefresh 1h): a
// token in steady use still ends TokenMax after its login: Authenticate
// refuses and deletes it, the sweep deletes one nobody presents, and the
// signed-in devices no longer list it.
func testTokenMaxLifetime(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	busy := e.login(t, "ana", "d1", "i1")
	quiet := e.login(t, "ana", "d2", "i1")
	for range 2 {
		e.db.BackdateTokens(t, 2*time.Hour)
		for _, tok := range []string{busy.Token, quiet.Token} {
			if _, err := e.st.Authenticate(ctx(t), tok); err != nil {
				t.Fatalf("a token in use within its lifetime: %v", err)
			}
		}
	}
	e.db.BackdateTokens(t, 2*time.Hour) // 6h since login, 2h since the last refresh
	_, err := e.st.Authenticate(ctx(t), busy.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	if n := e.tokenRows(t, busy.Token); n != 0 {
		t.Errorf("a token past TokenMax has %d rows after its lookup, want 0", n)
	}
	if got, err := e.st.Sessions(ctx(t), quiet.Principal); err != nil || len(got) != 0 {
		t.Errorf("sessions with every token past TokenMax: %+v %v, want none", got, err)
	}
	n, err := e.st.SweepTokens(ctx(t), 10)
	if wantCode(t, err, "") && n != 1 {
		t.Errorf("sweep deleted %d, want 1 (the token nobody presented)", n)
	}
	if n := e.tokenRows(t, quiet.Token); n != 0 {
		t.Errorf("a token past TokenMax has %d rows after a sweep, want 0", n)
	}
	fresh := e.login(t, "ana", "d1", "i1")
	if _, err := e.st.Authenticate(ctx(t), fresh.Token); err != nil {
		t.Errorf("a new login after TokenMax: %v", err)
	}
}
