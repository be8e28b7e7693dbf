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

// TestLogin: client.Login against the real HTTP API returns a token the
// store accepts, and a refused login as the *parley.Error of its problem.
func TestLogin(t *testing.T) {
	s := newStore(t)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Deps{App: app.New(app.Options{Store: s}), Store: s}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name string
		r    parley.LoginRequest
		code parley.Code
	}{
		{"ok", parley.LoginRequest{Login: "ana", Password: "password-ana", DeviceID: "d1", InstallID: "i1"}, ""},
		{"wrong password", parley.LoginRequest{Login: "ana", Password: "nope", DeviceID: "d1", InstallID: "i1"}, parley.CodeUnauthenticated},
		{"unknown user", parley.LoginRequest{Login: "zed", Password: "password-zed", DeviceID: "d1", InstallID: "i1"}, parley.CodeUnauthenticated},
		{"no device", parley.LoginRequest{Login: "ana", Password: "password-ana", InstallID: "i1"}, parley.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := client.Login(ctxT(t), nil, srv.URL+"/", tt.r)
			if got := parley.ErrorCode(err); got != tt.code {
				t.Fatalf("code %q (%v), want %q", got, err, tt.code)
			}
			if tt.code != "" {
				return
			}
			p, err := s.Authenticate(context.Background(), tok)
			if err != nil || p.User != "ana" || p.DeviceID != "d1" {
				t.Fatalf("token authenticates as %+v, %v", p, err)
			}
		})
	}
	if _, err := client.Login(ctxT(t), nil, "http://127.0.0.1:1", parley.LoginRequest{Login: "ana"}); err == nil || parley.ErrorCode(err) != parley.CodeUnavailable {
		t.Fatalf("unreachable server: %v, want an error without a protocol code", err)
	}
}
