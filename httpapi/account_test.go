package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

type meBody struct {
	User struct {
		ID, Name, Role string
		DisplayName    string `json:"display_name"`
	}
	Device string
}

// TestDisplayName: PATCH /api/me sets, trims and clears the display name
// and answers the me object; GET /api/me, GET /api/users/{id} and the
// directory show it; bad names are 400 and change nothing.
func TestDisplayName(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleUser)
		ben := s.user("ben", parley.RoleUser)

		var me meBody
		s.do("PATCH", "/api/me", ana, map[string]any{"display_name": "  Ana Lima "}).want(200).decode(&me)
		if me.User.ID != "ana" || me.User.DisplayName != "Ana Lima" || me.User.Name != "Ana Lima" || me.Device != "d1" {
			t.Errorf("PATCH /api/me: %+v", me)
		}
		for _, body := range []any{
			map[string]any{"display_name": strings.Repeat("x", 65)},
			map[string]any{"display_name": "a\u0007b"},
			map[string]any{"display_name": 3},
			map[string]any{},
		} {
			s.do("PATCH", "/api/me", ana, body).want(400, parley.CodeInvalidArgument)
		}
		s.do("GET", "/api/me", ana, nil).want(200).decode(&me)
		if me.User.DisplayName != "Ana Lima" {
			t.Errorf("GET /api/me after refusals: %+v", me)
		}

		var u struct {
			ID          string
			DisplayName *string `json:"display_name"`
		}
		s.do("GET", "/api/users/ana", ben, nil).want(200).decode(&u)
		if u.ID != "ana" || u.DisplayName == nil || *u.DisplayName != "Ana Lima" {
			t.Errorf("GET /api/users/ana: %+v", u)
		}
		var dir struct{ Users []map[string]string }
		s.do("GET", "/api/users?q=a", ben, nil).want(200).decode(&dir)
		if len(dir.Users) != 1 || dir.Users[0]["display_name"] != "Ana Lima" {
			t.Errorf("directory: %+v", dir.Users)
		}
		s.do("GET", "/api/users/ghost", ben, nil).want(404, parley.CodeNotFound)
		s.do("GET", "/api/users/Not%20An%20Id", ben, nil).want(400, parley.CodeInvalidArgument)

		me = meBody{}
		s.do("PATCH", "/api/me", ana, map[string]any{"display_name": ""}).want(200).decode(&me)
		if me.User.DisplayName != "" || me.User.Name != "ana" {
			t.Errorf("cleared: %+v", me)
		}
		u.DisplayName = nil
		s.do("GET", "/api/users/ana", ben, nil).want(200).decode(&u)
		if u.DisplayName != nil {
			t.Errorf("cleared name still shown: %q", *u.DisplayName)
		}
	})
}

// TestUserLookupFollowsDirectoryPolicy: with directory: shared, GET
// /api/users/{id} answers only users who share a conversation with the
// caller; others are 404 like an unknown id.
func TestUserLookupFollowsDirectoryPolicy(t *testing.T) {
	s := start(t, openSQLite(t), serverOptions{config: "directory: shared\n"})
	ana := s.user("ana", parley.RoleUser)
	s.user("ben", parley.RoleUser)
	s.user("cy", parley.RoleUser)
	s.do("POST", "/api/convs", ana, map[string]any{"id": "c1", "title": "t", "members": []string{"ben"}}).want(201)
	s.do("GET", "/api/users/ben", ana, nil).want(200)
	s.do("GET", "/api/users/ana", ana, nil).want(200)
	s.do("GET", "/api/users/cy", ana, nil).want(404, parley.CodeNotFound)
}

// TestPasswordChangeClosesOtherSockets is the regression test of a
// password change: the other device's socket closes at once (well before
// the reauth round), its token is refused, the caller's own socket and
// token stay, and the new password logs in.
func TestPasswordChangeClosesOtherSockets(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{reauth: time.Hour})
		laptop := s.user("cy", parley.RoleUser)
		phone := s.login("cy", "phone", "i1")
		mine := dialWS(t, s, laptop)
		other := dialWS(t, s, phone)

		s.do("POST", "/api/me/password", laptop, map[string]string{"current": "password-cy", "new": "a much newer password"}).want(204)
		start := time.Now()
		if f := other.next(wire.TError); f.Code != parley.CodeUnauthenticated {
			t.Fatalf("other device's socket got %+v", f)
		}
		if _, err := other.read(); err == nil {
			t.Errorf("other device's socket still open after its error frame")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("other socket closed after %v, want at once", d)
		}
		s.do("GET", "/api/convs", phone, nil).want(401, parley.CodeUnauthenticated)
		s.do("GET", "/api/convs", laptop, nil).want(200)
		mine.send(map[string]any{"t": "convs", "rid": "r1"})
		mine.next(wire.TConvs)
		r := s.do("POST", "/api/login", "", map[string]string{"login": "cy", "password": "a much newer password", "device_id": "phone", "install_id": "i1"})
		r.want(200)
	})
}

// TestPasswordChangeRefusals: a wrong current password is 400 (never 401:
// the client stays signed in) with a sentence, counts as a failed login of
// the account in the backoff (429 after the free failures), and changes
// nothing; a short new password is 400.
func TestPasswordChangeRefusals(t *testing.T) {
	backoff := ratelimit.NewBackoff(ratelimit.BackoffOptions{Free: 2, Base: time.Minute})
	s := start(t, openSQLite(t), serverOptions{loginBackoff: backoff})
	tok := s.user("cy", parley.RoleUser)
	other := s.login("cy", "phone", "i1")
	s.do("POST", "/api/me/password", tok, map[string]string{"current": "password-cy", "new": "short"}).want(400, parley.CodeInvalidArgument)
	for range 2 {
		p := s.do("POST", "/api/me/password", tok, map[string]string{"current": "wrong password", "new": "a much newer password"}).want(400, parley.CodeInvalidArgument).problem()
		if p.Detail != "the current password is wrong" {
			t.Errorf("wrong current password: detail %q", p.Detail)
		}
	}
	s.do("POST", "/api/me/password", tok, map[string]string{"current": "password-cy", "new": "a much newer password"}).want(429, parley.CodeRateLimited)
	s.do("GET", "/api/convs", other, nil).want(200)
	s.do("GET", "/api/convs", tok, nil).want(200)
}

// TestSessions: GET /api/me/sessions lists the signed-in devices with the
// caller's marked current; DELETE signs one out and closes its socket at
// once; an unknown device is 404.
func TestSessions(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{reauth: time.Hour})
		laptop := s.user("cy", parley.RoleUser)
		phone := s.login("cy", "phone", "i1")
		ws := dialWS(t, s, phone)

		var list struct {
			Sessions []struct {
				DeviceID  string `json:"device_id"`
				CreatedAt string `json:"created_at"`
				LastSeen  string `json:"last_seen"`
				Current   bool
			}
		}
		s.do("GET", "/api/me/sessions", laptop, nil).want(200).decode(&list)
		if len(list.Sessions) != 2 || list.Sessions[0].DeviceID != "d1" || !list.Sessions[0].Current ||
			list.Sessions[1].DeviceID != "phone" || list.Sessions[1].Current || list.Sessions[1].CreatedAt == "" || list.Sessions[1].LastSeen == "" {
			t.Fatalf("sessions: %+v", list.Sessions)
		}
		s.do("DELETE", "/api/me/sessions/phone", laptop, nil).want(204)
		if f := ws.next(wire.TError); f.Code != parley.CodeUnauthenticated {
			t.Fatalf("signed-out device's socket got %+v", f)
		}
		s.do("GET", "/api/convs", phone, nil).want(401, parley.CodeUnauthenticated)
		s.do("DELETE", "/api/me/sessions/phone", laptop, nil).want(404, parley.CodeNotFound)
		s.do("GET", "/api/me/sessions", laptop, nil).want(200).decode(&list)
		if len(list.Sessions) != 1 || list.Sessions[0].DeviceID != "d1" {
			t.Errorf("sessions after sign-out: %+v", list.Sessions)
		}
	})
}
