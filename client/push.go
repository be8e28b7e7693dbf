package client

import (
	"context"
	"net/http"
	"net/url"
)

// Web Push (docs/protocol.md, "Web Push"): the server's key, the
// subscriptions of this token's device, and the user's notification level
// per conversation. Refusals come back as *parley.Error, as for Account.

// PushSubscription is a browser's PushSubscription as the server takes
// it: the endpoint and its keys (base64url).
type PushSubscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256DH string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// PushSetting is the user's notification level in a conversation: "all"
// (the default), "mentions" or "none".
type PushSetting struct {
	Conv  string `json:"conv"`
	Level string `json:"level"`
}

// PushKey returns the server's VAPID public key (unpadded base64url), what
// a browser subscribes with as applicationServerKey.
func (a *Account) PushKey(ctx context.Context) (string, error) {
	var out struct {
		Key string `json:"key"`
	}
	err := a.do(ctx, http.MethodGet, "/api/push/key", nil, &out)
	return out.Key, err
}

// Subscribe binds a subscription to this token's device and returns its
// id (the same id when the endpoint was already this device's).
func (a *Account) Subscribe(ctx context.Context, s PushSubscription) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	err := a.do(ctx, http.MethodPost, "/api/push/subscriptions", s, &out)
	return out.ID, err
}

// Unsubscribe deletes one of the user's subscriptions (NOT_FOUND for an
// id that is not theirs).
func (a *Account) Unsubscribe(ctx context.Context, id string) error {
	return a.do(ctx, http.MethodDelete, "/api/push/subscriptions/"+url.PathEscape(id), nil, nil)
}

// PushSettings lists the user's levels that are not the default.
func (a *Account) PushSettings(ctx context.Context) ([]PushSetting, error) {
	var out struct {
		Settings []PushSetting `json:"settings"`
	}
	err := a.do(ctx, http.MethodGet, "/api/push/settings", nil, &out)
	return out.Settings, err
}

// SetPushLevel sets the user's level in conv ("all", "mentions" or
// "none"); the user needs to be a member (NOT_MEMBER).
func (a *Account) SetPushLevel(ctx context.Context, conv, level string) (PushSetting, error) {
	var out PushSetting
	err := a.do(ctx, http.MethodPut, "/api/push/settings/"+url.PathEscape(conv), map[string]string{"level": level}, &out)
	return out, err
}
