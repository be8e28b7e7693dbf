package client_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/httpapi"
)

// TestAccount: the client's account calls against the real HTTP API: a
// display name set, read back and seen by another user; sessions listed
// and one signed out; a password change that keeps this token and ends the
// other device's; refusals as *parley.Error with their codes.
func TestAccount(t *testing.T) {
	s := newStore(t)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Deps{App: app.New(app.Options{Store: s}), Store: s}))
	t.Cleanup(srv.Close)
	login := func(user, device string) *client.Account {
		t.Helper()
		tok, err := client.Login(ctxT(t), nil, srv.URL, parley.LoginRequest{Login: user, Password: "password-" + user, DeviceID: device, InstallID: "i1"})
		if err != nil {
			t.Fatal(err)
		}
		return &client.Account{Server: srv.URL, Token: tok}
	}
	ana, anaPhone, anaTablet, ben := login("ana", "laptop"), login("ana", "phone"), login("ana", "tablet"), login("ben", "d1")

	me, err := ana.SetDisplayName(ctxT(t), " Ana Lima ")
	if err != nil || me.User != "ana" || me.Name != "Ana Lima" || me.DisplayName != "Ana Lima" || me.Device != "laptop" {
		t.Fatalf("SetDisplayName: %+v %v", me, err)
	}
	if _, err := ana.SetDisplayName(ctxT(t), "a\nb"); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("a name with a newline: %v, want INVALID_ARGUMENT", err)
	}
	if u, err := ben.User(ctxT(t), "ana"); err != nil || u.Name() != "Ana Lima" {
		t.Errorf("ben looks ana up: %+v %v", u, err)
	}
	if u, err := ben.User(ctxT(t), "ben"); err != nil || u.Name() != "ben" {
		t.Errorf("a user without a display name: %+v %v, want the id as name", u, err)
	}
	if _, err := ben.User(ctxT(t), "ghost"); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Errorf("unknown user: %v, want NOT_FOUND", err)
	}

	list, err := ana.Sessions(ctxT(t))
	if err != nil || len(list) != 3 || list[0].DeviceID != "laptop" || !list[0].Current || list[1].Current || list[1].CreatedAt.IsZero() {
		t.Fatalf("sessions: %+v %v", list, err)
	}
	if err := ana.SignOut(ctxT(t), "tablet"); err != nil {
		t.Fatal(err)
	}
	if err := ana.SignOut(ctxT(t), "tablet"); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Errorf("signing out a signed-out device: %v, want NOT_FOUND", err)
	}
	if _, err := anaTablet.Me(ctxT(t)); parley.ErrorCode(err) != parley.CodeUnauthenticated {
		t.Errorf("signed-out device: %v, want UNAUTHENTICATED", err)
	}

	if err := ana.ChangePassword(ctxT(t), "wrong one", "a much newer password"); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("wrong current password: %v, want INVALID_ARGUMENT", err)
	}
	if err := ana.ChangePassword(ctxT(t), "password-ana", "a much newer password"); err != nil {
		t.Fatal(err)
	}
	if _, err := anaPhone.Me(ctxT(t)); parley.ErrorCode(err) != parley.CodeUnauthenticated {
		t.Errorf("other device after the change: %v, want UNAUTHENTICATED", err)
	}
	if me, err := ana.Me(ctxT(t)); err != nil || me.Name != "Ana Lima" {
		t.Errorf("this device after the change: %+v %v", me, err)
	}
	if _, err := s.Login(context.Background(), parley.LoginRequest{Login: "ana", Password: "a much newer password", DeviceID: "x", InstallID: "i1"}); err != nil {
		t.Errorf("login with the new password: %v", err)
	}
}
