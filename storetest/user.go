package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of accounts, devices and tokens.

// testStaleInstall: a device that logs in with a new install id replaces
// its install: the old token answers STALE_INSTALL (not UNAUTHENTICATED),
// so does Ack and Read with the old principal (before any other check but
// input validation), and the new install's delivered cursor starts at 0.
func testStaleInstall(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	e.bystander(t, "ana")
	s1 := e.login(t, "ben", "d1", "i1")
	if s1.Replaced {
		t.Errorf("a device's first login: Replaced, want not")
	}
	old := s1.Principal
	const c = "c-ab"
	e.group(t, old, c, "ana")
	e.send(t, old, c, "k3", "hello") // 3
	if got, err := e.st.Ack(ctx(t), old, c, 3); err != nil || got != 3 {
		t.Fatalf("ack 3: %d %v", got, err)
	}

	s2 := e.login(t, "ben", "d1", "i2")
	if !s2.Replaced {
		t.Errorf("a login with a new install: not Replaced, want Replaced")
	}
	_, err := e.st.Authenticate(ctx(t), s1.Token)
	wantCode(t, err, parley.CodeStaleInstall)
	p, err := e.st.Authenticate(ctx(t), s2.Token)
	if wantCode(t, err, "") && p != (parley.Principal{User: "ben", Role: parley.RoleUser, DeviceID: "d1", InstallID: "i2"}) {
		t.Errorf("new install's principal: %+v", p)
	}

	for _, tc := range []struct {
		name string
		do   func() error
		want parley.Code
	}{
		{"ack", func() error { _, err := e.st.Ack(ctx(t), old, c, 3); return err }, parley.CodeStaleInstall},
		{"read", func() error { _, err := e.st.Read(ctx(t), old, c, 3); return err }, parley.CodeStaleInstall},
		{"ack_unknown_conv", func() error { _, err := e.st.Ack(ctx(t), old, "c-nope", 1); return err }, parley.CodeStaleInstall},
		{"ack_above_head", func() error { _, err := e.st.Ack(ctx(t), old, c, 99); return err }, parley.CodeStaleInstall},
		{"read_above_head", func() error { _, err := e.st.Read(ctx(t), old, c, 99); return err }, parley.CodeStaleInstall},
		{"ack_malformed_conv", func() error { _, err := e.st.Ack(ctx(t), old, "c ab", 1); return err }, parley.CodeInvalidArgument},
		{"ack_negative", func() error { _, err := e.st.Ack(ctx(t), old, c, -1); return err }, parley.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot(t, c)
			wantCode(t, tc.do(), tc.want)
			e.unchanged(t, c, before)
		})
	}

	if s := e.summary(t, s2.Principal, c); s.Delivered != 0 {
		t.Errorf("new install's delivered %d, want 0", s.Delivered)
	}
	if got, err := e.st.Ack(ctx(t), s2.Principal, c, 2); err != nil || got != 2 {
		t.Errorf("new install's ack 2: %d %v, want 2 (the old install's 3 is gone)", got, err)
	}
	if n := e.db.Int(t, "SELECT max(seq) FROM delivered_cursors WHERE user_id = ? AND device_id = ? AND conv_id = ?", "ben", "d1", c); n != 2 {
		t.Errorf("stored delivered cursor %d, want 2", n)
	}
}

// testIdentityResolver: one resolver turns every login form (id in any
// case, email in any case with spaces) into the canonical user for both
// User and Login; unknown logins are NOT_FOUND (User) or UNAUTHENTICATED
// (Login, same message as a wrong password); ids and emails are unique
// whatever their case.
func testIdentityResolver(t *testing.T, e *env) {
	u := e.user(t, "ana", "Ana@Example.COM", "")
	if u.ID != "ana" || u.Email != "ana@example.com" || u.Role != parley.RoleUser || u.Disabled {
		t.Errorf("created %+v, want ana with email ana@example.com, role user", u)
	}

	for _, login := range []string{"ana", "ANA", " Ana ", " ana@example.com ", "Ana@Example.COM", "ANA@EXAMPLE.COM"} {
		t.Run("user_"+login, func(t *testing.T) {
			got, err := e.st.User(ctx(t), login)
			if wantCode(t, err, "") && (got.ID != "ana" || got.Email != "ana@example.com") {
				t.Errorf("User(%q) = %+v", login, got)
			}
		})
	}
	for _, login := range []string{"ana", "ANA", " ana@example.com "} {
		t.Run("login_"+login, func(t *testing.T) {
			s, err := e.st.Login(ctx(t), parley.LoginRequest{Login: login, Password: password, DeviceID: "d1", InstallID: "i1"})
			if wantCode(t, err, "") && s.User != "ana" {
				t.Errorf("Login(%q) user %q", login, s.User)
			}
		})
	}
	for _, tc := range []struct {
		login string
		want  parley.Code
	}{
		{"nobody", parley.CodeNotFound},
		{"nobody@example.com", parley.CodeNotFound},
		{"ana@example.org", parley.CodeNotFound},
		{"not valid!", parley.CodeInvalidArgument},
		{"", parley.CodeInvalidArgument},
	} {
		t.Run("unknown_"+tc.login, func(t *testing.T) {
			_, err := e.st.User(ctx(t), tc.login)
			wantCode(t, err, tc.want)
		})
	}

	_, unknown := e.st.Login(ctx(t), parley.LoginRequest{Login: "nobody", Password: password, DeviceID: "d1", InstallID: "i1"})
	_, wrong := e.st.Login(ctx(t), parley.LoginRequest{Login: "ana", Password: "wrong " + password, DeviceID: "d1", InstallID: "i1"})
	wantCode(t, unknown, parley.CodeUnauthenticated)
	wantCode(t, wrong, parley.CodeUnauthenticated)
	if parley.ErrorMessage(unknown) != parley.ErrorMessage(wrong) {
		t.Errorf("unknown login %q and wrong password %q differ", parley.ErrorMessage(unknown), parley.ErrorMessage(wrong))
	}

	for _, tc := range []struct {
		name string
		nu   parley.NewUser
		want parley.Code
	}{
		{"duplicate_id", parley.NewUser{ID: "ana", Email: "other@example.com"}, parley.CodeAlreadyExists},
		{"duplicate_email_other_case", parley.NewUser{ID: "ana2", Email: "ANA@example.com"}, parley.CodeAlreadyExists},
		{"id_not_canonical", parley.NewUser{ID: "Ana"}, parley.CodeInvalidArgument},
		{"email_malformed", parley.NewUser{ID: "ana3", Email: "ana@"}, parley.CodeInvalidArgument},
		{"role_unknown", parley.NewUser{ID: "ana4", Role: "root"}, parley.CodeInvalidArgument},
		{"password_short", parley.NewUser{ID: "ana5", Password: "pw-ana5"}, parley.CodeInvalidArgument},
		{"password_7_characters_14_bytes", parley.NewUser{ID: "ana6", Password: "ééééééé"}, parley.CodeInvalidArgument},
		{"password_invalid_utf8", parley.NewUser{ID: "ana7", Password: "password\xff"}, parley.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.st.CreateUser(ctx(t), tc.nu)
			wantCode(t, err, tc.want)
			if n := e.db.Int(t, "SELECT count(*) FROM users"); n != 1 {
				t.Errorf("%d users, want 1", n)
			}
		})
	}
	if got, err := e.st.User(ctx(t), "ana"); err != nil || got.Email != "ana@example.com" {
		t.Errorf("ana after rejected creations: %+v %v", got, err)
	}
	// Eight code points are enough, whatever their bytes.
	_, err := e.st.CreateUser(ctx(t), parley.NewUser{ID: "ana8", Password: "éééééééé"})
	ok(t, err, "create user with an 8-character password")
	_, err = e.st.Login(ctx(t), parley.LoginRequest{Login: "ana8", Password: "éééééééé", DeviceID: "d1", InstallID: "i1"})
	ok(t, err, "login with an 8-character password")
}

// testLoginReplaced: Session.Replaced is true only when the login replaced
// another install of the device; a device's first login, a login with its
// current install, and another device's login replace nothing.
func testLoginReplaced(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	for _, step := range []struct {
		device, install string
		want            bool
	}{
		{"d1", "i1", false}, // a new device
		{"d1", "i1", false}, // the current install again
		{"d2", "i1", false}, // another new device
		{"d1", "i2", true},  // d1's install i1 replaced
		{"d1", "i2", false},
		{"d1", "i1", true}, // back to i1 replaces i2
		{"d2", "i1", false},
	} {
		s := e.login(t, "ben", step.device, step.install)
		if s.Replaced != step.want {
			t.Errorf("login %s/%s: Replaced %v, want %v", step.device, step.install, s.Replaced, step.want)
		}
	}
}

// testKnownInstall: KnownInstall is true for a device's current install
// of the user a login names (by id or email, any case), and false for an
// install the device replaced, another user's install, an unknown login
// and a malformed one (never an error).
func testKnownInstall(t *testing.T, e *env) {
	e.user(t, "ana", "ana@example.com", "")
	e.user(t, "ben", "", "")
	e.login(t, "ana", "d1", "old")
	e.login(t, "ana", "d1", "i1") // replaces "old"
	e.login(t, "ben", "d1", "b1")
	for _, tc := range []struct {
		login, install string
		want           bool
	}{
		{"ana", "i1", true},
		{" ANA@Example.com ", "i1", true},
		{"ana", "old", false},
		{"ana", "b1", false},
		{"nobody", "i1", false},
		{"not valid!", "i1", false},
		{"ana", "", false},
	} {
		got, err := e.st.KnownInstall(ctx(t), tc.login, tc.install)
		if err != nil || got != tc.want {
			t.Errorf("KnownInstall(%q, %q) = %v, %v; want %v", tc.login, tc.install, got, err, tc.want)
		}
	}
}

// testDisabledUser: a disabled account's tokens stop at the next
// Authenticate and it cannot log in (the one UNAUTHENTICATED message);
// enabling it again allows login, and the tokens of before stay revoked.
func testDisabledUser(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	s := e.login(t, "ben", "d1", "i1")
	_, wrong := e.st.Login(ctx(t), parley.LoginRequest{Login: "ben", Password: "wrong", DeviceID: "d1", InstallID: "i1"})
	wantCode(t, wrong, parley.CodeUnauthenticated)

	ok(t, e.st.SetUserDisabled(ctx(t), "ben", true), "disable")
	if u, err := e.st.User(ctx(t), "ben"); err != nil || !u.Disabled {
		t.Errorf("User after disabling: %+v %v", u, err)
	}
	_, err := e.st.Authenticate(ctx(t), s.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	_, err = e.st.Login(ctx(t), parley.LoginRequest{Login: "ben", Password: password, DeviceID: "d1", InstallID: "i1"})
	wantCode(t, err, parley.CodeUnauthenticated)
	if err != nil && parley.ErrorMessage(err) != parley.ErrorMessage(wrong) {
		t.Errorf("disabled login says %q, a wrong password %q", parley.ErrorMessage(err), parley.ErrorMessage(wrong))
	}
	wantCode(t, e.st.SetUserDisabled(ctx(t), "ghost", true), parley.CodeNotFound)

	ok(t, e.st.SetUserDisabled(ctx(t), "ben", false), "enable")
	_, err = e.st.Authenticate(ctx(t), s.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	s2 := e.login(t, "ben", "d1", "i1")
	if p, err := e.st.Authenticate(ctx(t), s2.Token); err != nil || p.User != "ben" {
		t.Errorf("authenticate after enabling: %+v %v", p, err)
	}
}

// testLogout: a revoked token is UNAUTHENTICATED; revoking twice or an
// unknown token is not an error; other tokens of the user keep working.
func testLogout(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	s1 := e.login(t, "ana", "d1", "i1")
	s2 := e.login(t, "ana", "d2", "i1")
	if s1.Token == s2.Token {
		t.Fatal("two logins got the same token")
	}
	if n := e.db.Int(t, "SELECT count(*) FROM tokens WHERE user_id = ? AND token_hash = ?", "ana", []byte(s1.Token)); n != 0 {
		t.Errorf("a token is stored in clear")
	}
	if n := e.db.Int(t, "SELECT count(*) FROM tokens WHERE user_id = ? AND token_hash = ?", "ana", parley.HashToken(s1.Token)); n != 1 {
		t.Errorf("%d tokens stored as HashToken(token), want 1", n)
	}
	p, err := e.st.Authenticate(ctx(t), s1.Token)
	if wantCode(t, err, "") && p != s1.Principal {
		t.Errorf("Authenticate = %+v, login said %+v", p, s1.Principal)
	}
	ok(t, e.st.Logout(ctx(t), s1.Token), "logout")
	_, err = e.st.Authenticate(ctx(t), s1.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	ok(t, e.st.Logout(ctx(t), s1.Token), "logout twice")
	ok(t, e.st.Logout(ctx(t), "no-such-token"), "logout unknown")
	if _, err := e.st.Authenticate(ctx(t), s2.Token); err != nil {
		t.Errorf("the other device's token: %v", err)
	}
	for _, tok := range []string{"", "garbage", s1.Token + "x"} {
		_, err := e.st.Authenticate(ctx(t), tok)
		wantCode(t, err, parley.CodeUnauthenticated)
	}
}

// testIdentityOutageIsUnavailable: a store that cannot answer — its handle
// closed, as when the database went away, or the call's context already
// over — fails Authenticate, Login and Logout as UNAVAILABLE, never as a
// refusal (UNAUTHENTICATED, STALE_INSTALL): the identify step turns a
// refusal into a terminal 401, and a client would drop a request that was
// never judged.
func testIdentityOutageIsUnavailable(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	s := e.login(t, "ana", "d1", "i1")
	gone := e.db.Open(t)
	if err := gone.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	dead, cancel := context.WithCancel(ctx(t))
	cancel()
	for _, st := range []struct {
		name  string
		store parley.Store
		ctx   context.Context
	}{
		{"closed store", gone, ctx(t)},
		{"cancelled context", e.st, dead},
	} {
		t.Run(st.name, func(t *testing.T) {
			_, err := st.store.Authenticate(st.ctx, s.Token)
			wantCode(t, err, parley.CodeUnavailable)
			_, err = st.store.Login(st.ctx, parley.LoginRequest{Login: "ana", Password: password, DeviceID: "d2", InstallID: "i1"})
			wantCode(t, err, parley.CodeUnavailable)
			wantCode(t, st.store.Logout(st.ctx, s.Token), parley.CodeUnavailable)
		})
	}
	// The live store still knows the token.
	if _, err := e.st.Authenticate(ctx(t), s.Token); err != nil {
		t.Errorf("after the failures: %v", err)
	}
}

// tokenRows counts the stored rows of a token.
func (e *env) tokenRows(t *testing.T, token string) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM tokens WHERE token_hash = ?", parley.HashToken(token))
}

// testTokenIdleLifetime (TokenIdle 3h, TokenRefresh 1h): a token idle
// longer than TokenIdle is UNAUTHENTICATED and deleted on lookup; a use
// refreshes it, but only once the last refresh is TokenRefresh old, so a
// use 30 minutes after login does not move its lifetime and a use after
// 90 minutes does. Tokens nobody presents stay until a sweep.
func testTokenIdleLifetime(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	early := e.login(t, "ana", "d1", "i1")
	late := e.login(t, "ana", "d2", "i1")
	unused := e.login(t, "ana", "d3", "i1")

	e.db.BackdateTokens(t, 30*time.Minute)
	if _, err := e.st.Authenticate(ctx(t), early.Token); err != nil {
		t.Fatalf("30 minutes after login: %v", err)
	}
	e.db.BackdateTokens(t, time.Hour)
	if _, err := e.st.Authenticate(ctx(t), late.Token); err != nil {
		t.Fatalf("90 minutes after login: %v", err)
	}
	e.db.BackdateTokens(t, 100*time.Minute) // 3h10m after login, 1h40m after late's refresh

	_, err := e.st.Authenticate(ctx(t), early.Token)
	wantCode(t, err, parley.CodeUnauthenticated) // a use within TokenRefresh did not refresh it
	if n := e.tokenRows(t, early.Token); n != 0 {
		t.Errorf("an expired token has %d rows after its lookup, want 0", n)
	}
	_, err = e.st.Authenticate(ctx(t), early.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	p, err := e.st.Authenticate(ctx(t), late.Token)
	if wantCode(t, err, "") && p != late.Principal {
		t.Errorf("refreshed token: %+v, login said %+v", p, late.Principal)
	}
	if n := e.tokenRows(t, unused.Token); n != 1 {
		t.Errorf("an expired token nobody presented has %d rows before a sweep, want 1", n)
	}
	n, err := e.st.SweepTokens(ctx(t), 10)
	if wantCode(t, err, "") && n != 1 {
		t.Errorf("sweep deleted %d, want 1 (the unused token)", n)
	}
	_, err = e.st.Authenticate(ctx(t), unused.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	if _, err := e.st.Authenticate(ctx(t), late.Token); err != nil {
		t.Errorf("the refreshed token after a sweep: %v", err)
	}
}

// testTokenSweepBounded (TokenIdle 3h, StaleInstallGrace 1h): a sweep
// deletes at most its limit, idle tokens and replaced installs' tokens past
// their grace alike, and never a live token or one still in its grace.
func testTokenSweepBounded(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	idle := []parley.Session{e.login(t, "ana", "d1", "i1"), e.login(t, "ana", "d2", "i1"), e.login(t, "ana", "d3", "i1")}
	e.db.BackdateTokens(t, 4*time.Hour)
	old := e.login(t, "ana", "d4", "i1")
	e.login(t, "ana", "d4", "i2") // replaces old's install
	e.db.BackdateTokens(t, 2*time.Hour)
	recent := e.login(t, "ana", "d5", "i1")
	e.login(t, "ana", "d5", "i2") // replaces recent's install: in its grace
	live := e.login(t, "ana", "d6", "i1")

	_, err := e.st.SweepTokens(ctx(t), 0)
	wantCode(t, err, parley.CodeInvalidArgument)
	before := e.db.Int(t, "SELECT count(*) FROM tokens")
	var got []int
	for range 4 {
		n, err := e.st.SweepTokens(ctx(t), 2)
		ok(t, err, "sweep")
		got = append(got, n)
	}
	if want := []int{2, 2, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("sweeps of at most 2 deleted %v, want %v", got, want)
	}
	if after := e.db.Int(t, "SELECT count(*) FROM tokens"); after != before-4 {
		t.Errorf("%d tokens after the sweeps, want %d", after, before-4)
	}
	for _, s := range append(idle, old) {
		if n := e.tokenRows(t, s.Token); n != 0 {
			t.Errorf("token of %s still stored after the sweeps", s.DeviceID)
		}
	}
	_, err = e.st.Authenticate(ctx(t), recent.Token)
	wantCode(t, err, parley.CodeStaleInstall)
	_, err = e.st.Authenticate(ctx(t), live.Token)
	wantCode(t, err, "")
}

// testStaleInstallGrace (StaleInstallGrace 2h, TokenIdle 10h): a replaced
// install's token answers STALE_INSTALL through its grace — also when the
// device later returns to that install id — and then UNAUTHENTICATED,
// deleted by the sweep or on lookup, whichever comes first.
func testStaleInstallGrace(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	s1 := e.login(t, "ben", "d1", "i1")
	s2 := e.login(t, "ben", "d1", "i2")
	_, err := e.st.Authenticate(ctx(t), s1.Token)
	wantCode(t, err, parley.CodeStaleInstall)

	e.db.BackdateTokens(t, time.Hour)
	_, err = e.st.Authenticate(ctx(t), s1.Token)
	wantCode(t, err, parley.CodeStaleInstall)
	if n, err := e.st.SweepTokens(ctx(t), 10); err != nil || n != 0 {
		t.Errorf("sweep in the grace: %d, %v; want 0", n, err)
	}

	s3 := e.login(t, "ben", "d1", "i1") // back to i1: s1 stays replaced, s2 is now
	_, err = e.st.Authenticate(ctx(t), s1.Token)
	wantCode(t, err, parley.CodeStaleInstall)
	_, err = e.st.Authenticate(ctx(t), s2.Token)
	wantCode(t, err, parley.CodeStaleInstall)
	if p, err := e.st.Authenticate(ctx(t), s3.Token); wantCode(t, err, "") && p != s3.Principal {
		t.Errorf("current install: %+v", p)
	}

	e.db.BackdateTokens(t, 90*time.Minute) // s1 replaced 2h30m ago, s2 1h30m ago
	if n, err := e.st.SweepTokens(ctx(t), 10); err != nil || n != 1 {
		t.Errorf("sweep after s1's grace: %d, %v; want 1", n, err)
	}
	if n := e.tokenRows(t, s1.Token); n != 0 {
		t.Errorf("s1 has %d rows after the sweep", n)
	}
	_, err = e.st.Authenticate(ctx(t), s1.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	_, err = e.st.Authenticate(ctx(t), s2.Token)
	wantCode(t, err, parley.CodeStaleInstall)

	e.db.BackdateTokens(t, time.Hour) // s2 replaced 2h30m ago, no sweep
	_, err = e.st.Authenticate(ctx(t), s2.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	if n := e.tokenRows(t, s2.Token); n != 0 {
		t.Errorf("s2 has %d rows after its lookup past the grace", n)
	}
	if _, err := e.st.Authenticate(ctx(t), s3.Token); err != nil {
		t.Errorf("the current install after the others expired: %v", err)
	}
}

// testTokenLifetimeUpgrade: migration 0004 on a database that holds tokens
// from before it. Every token starts its idle lifetime at the upgrade, and
// the tokens of installs replaced before it (not marked then) start their
// grace: they answer STALE_INSTALL, then UNAUTHENTICATED once the default
// grace (7 days) is over, while a current token lives on.
func testTokenLifetimeUpgrade(t *testing.T, e *env) {
	e.user(t, "ana", "", "")
	old := e.login(t, "ana", "d1", "i1")
	cur := e.login(t, "ana", "d2", "i1")
	// Back to the schema of migration 0003, where a login that replaced
	// an install changed only the device row.
	for _, q := range []string{
		"UPDATE devices SET install_id = 'i2' WHERE user_id = 'ana' AND device_id = 'd1'",
		"DROP INDEX tokens_by_user",
		"DROP INDEX tokens_idle",
		"DROP INDEX tokens_replaced",
		"DROP INDEX delivered_cursors_by_conv",
		"DROP INDEX read_cursors_by_conv",
		"ALTER TABLE tokens DROP COLUMN last_used_at",
		"ALTER TABLE tokens DROP COLUMN replaced_at",
		"DELETE FROM schema_migrations WHERE version = 4",
	} {
		e.db.Exec(t, q)
	}
	st := e.db.Open(t) // migrates again
	if n := e.db.Int(t, "SELECT count(*) FROM tokens WHERE replaced_at IS NOT NULL"); n != 1 {
		t.Errorf("%d tokens marked replaced by the upgrade, want 1", n)
	}
	_, err := st.Authenticate(ctx(t), old.Token)
	wantCode(t, err, parley.CodeStaleInstall)
	if _, err := st.Authenticate(ctx(t), cur.Token); err != nil {
		t.Errorf("a current token after the upgrade: %v", err)
	}
	e.db.BackdateTokens(t, parley.DefaultStaleInstallGrace+time.Minute)
	_, err = st.Authenticate(ctx(t), old.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	if _, err := st.Authenticate(ctx(t), cur.Token); err != nil {
		t.Errorf("a current token 7 days after the upgrade: %v", err)
	}
}

// testSetPassword: a new password works and the old one does not; every
// token of the user is revoked with it; a short password, a malformed id
// and an unknown user change nothing.
func testSetPassword(t *testing.T, e *env) {
	e.user(t, "ben", "", "")
	e.user(t, "cy", "", "")
	s := e.login(t, "ben", "d1", "i1")
	other := e.login(t, "cy", "d1", "i1")

	wantCode(t, e.st.SetPassword(ctx(t), "ben", "short7!"), parley.CodeInvalidArgument)
	wantCode(t, e.st.SetPassword(ctx(t), "Not An Id", "long enough password"), parley.CodeInvalidArgument)
	wantCode(t, e.st.SetPassword(ctx(t), "ghost", "long enough password"), parley.CodeNotFound)
	if p, err := e.st.Authenticate(ctx(t), s.Token); err != nil || p.User != "ben" {
		t.Fatalf("token after refused password changes: %+v %v, want it still working", p, err)
	}
	e.login(t, "ben", "d2", "i1") // the old password still works after refusals

	const fresh = "a brand new password"
	ok(t, e.st.SetPassword(ctx(t), "ben", fresh), "set password")
	_, err := e.st.Authenticate(ctx(t), s.Token)
	wantCode(t, err, parley.CodeUnauthenticated)
	_, err = e.st.Login(ctx(t), parley.LoginRequest{Login: "ben", Password: password, DeviceID: "d1", InstallID: "i1"})
	wantCode(t, err, parley.CodeUnauthenticated)
	if got, err := e.st.Login(ctx(t), parley.LoginRequest{Login: "ben", Password: fresh, DeviceID: "d1", InstallID: "i1"}); err != nil || got.User != "ben" {
		t.Errorf("login with the new password: %+v %v", got.Principal, err)
	}
	if p, err := e.st.Authenticate(ctx(t), other.Token); err != nil || p.User != "cy" {
		t.Errorf("another user's token after ben's password change: %+v %v", p, err)
	}
}
