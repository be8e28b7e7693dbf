package client_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"net/http/httptest"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/httpapi"
)

// TestPush: the client's push calls against the real HTTP API.
func TestPush(t *testing.T) {
	s := newStore(t)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Deps{App: app.New(app.Options{Store: s}), Store: s}))
	t.Cleanup(srv.Close)
	tok, err := client.Login(ctxT(t), nil, srv.URL, parley.LoginRequest{Login: "ben", Password: "password-ben", DeviceID: "d1", InstallID: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	ben := &client.Account{Server: srv.URL, Token: tok}
	key, err := ben.PushKey(ctxT(t))
	if raw, _ := base64.RawURLEncoding.DecodeString(key); err != nil || len(raw) != 65 {
		t.Fatalf("PushKey: %q %v", key, err)
	}
	k, _ := ecdh.P256().GenerateKey(rand.Reader)
	auth := make([]byte, 16)
	rand.Read(auth)
	var sub client.PushSubscription
	sub.Endpoint = "https://push.example.com/send/1"
	sub.Keys.P256DH = base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes())
	sub.Keys.Auth = base64.RawURLEncoding.EncodeToString(auth)
	id, err := ben.Subscribe(ctxT(t), sub)
	if again, err2 := ben.Subscribe(ctxT(t), sub); err != nil || err2 != nil || id == "" || again != id {
		t.Fatalf("Subscribe: %q %v, again %q %v", id, err, again, err2)
	}
	sub.Endpoint = "http://push.example.com/send/2"
	if _, err := ben.Subscribe(ctxT(t), sub); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("http endpoint: %v, want INVALID_ARGUMENT", err)
	}
	if err := ben.Unsubscribe(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if err := ben.Unsubscribe(ctxT(t), id); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Errorf("again: %v, want NOT_FOUND", err)
	}
	if got, err := ben.SetPushLevel(ctxT(t), "g1", "none"); err != nil || got != (client.PushSetting{Conv: "g1", Level: "none"}) {
		t.Errorf("SetPushLevel: %+v %v", got, err)
	}
	if list, err := ben.PushSettings(ctxT(t)); err != nil || len(list) != 1 || list[0].Level != "none" {
		t.Errorf("PushSettings: %+v %v", list, err)
	}
	if _, err := ben.SetPushLevel(ctxT(t), "g9", "none"); parley.ErrorCode(err) != parley.CodeNotMember {
		t.Errorf("not a member: %v, want NOT_MEMBER", err)
	}
}
