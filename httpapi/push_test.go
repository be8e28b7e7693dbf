package httpapi_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

func browserKeys(t *testing.T) (p256dh, auth string) {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := make([]byte, 16)
	rand.Read(a)
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(a)
}

// TestPushRoutes: the key is one P-256 point for every call; a
// subscription binds to the caller's device (201, then 200 with the same
// id); bad input is INVALID_ARGUMENT and stores nothing (the same endpoint
// sent right after is still new); an http endpoint needs the allow list;
// only one's own subscription can be deleted; levels need a membership.
func TestPushRoutes(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "push:\n  allow_endpoints: [\"http://relay.example/\"]\n"})
		ana, ben := s.user("ana", parley.RoleUser), s.user("ben", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "title": "G", "members": []string{"ben"}}).want(201)

		var k1, k2 struct{ Key string }
		s.do("GET", "/api/push/key", ana, nil).want(200).decode(&k1)
		s.do("GET", "/api/push/key", ben, nil).want(200).decode(&k2)
		raw, err := base64.RawURLEncoding.DecodeString(k1.Key)
		if err != nil || len(raw) != 65 || raw[0] != 4 || k1 != k2 {
			t.Fatalf("keys %q and %q: want one uncompressed P-256 point", k1.Key, k2.Key)
		}
		s.do("GET", "/api/push/key", "", nil).want(401)

		dh, auth := browserKeys(t)
		sub := func(endpoint string) map[string]any {
			return map[string]any{"endpoint": endpoint, "expirationTime": nil, "keys": map[string]string{"p256dh": dh, "auth": auth}}
		}
		const ep = "https://push.example.com/send/abc"
		for name, body := range map[string]any{
			"not json":       "{",
			"no keys":        map[string]any{"endpoint": ep},
			"no endpoint":    map[string]any{"keys": map[string]string{"p256dh": dh, "auth": auth}},
			"unknown field":  map[string]any{"endpoint": ep, "keys": map[string]string{"p256dh": dh, "auth": auth}, "x": 1},
			"bad expiration": map[string]any{"endpoint": ep, "expirationTime": "soon", "keys": map[string]string{"p256dh": dh, "auth": auth}},
			"bad p256dh":     map[string]any{"endpoint": ep, "keys": map[string]string{"p256dh": dh[:30], "auth": auth}},
			"bad auth":       map[string]any{"endpoint": ep, "keys": map[string]string{"p256dh": dh, "auth": "short"}},
			"http":           sub(strings.Replace(ep, "https:", "http:", 1)),
			"http elsewhere": sub("http://relay.example.org/x"),
		} {
			if r := s.do("POST", "/api/push/subscriptions", ana, body); r.status != 400 || r.problem().Code != parley.CodeInvalidArgument {
				t.Errorf("%s: %d %s, want 400 INVALID_ARGUMENT", name, r.status, r)
			}
		}
		var first, again struct{ ID string }
		s.do("POST", "/api/push/subscriptions", ana, sub(ep)).want(201).decode(&first)
		s.do("POST", "/api/push/subscriptions", ana, sub(ep)).want(200).decode(&again)
		if first.ID == "" || again != first {
			t.Errorf("ids %q then %q, want one id", first.ID, again.ID)
		}
		s.do("POST", "/api/push/subscriptions", ana, sub("http://relay.example/x")).want(201)

		s.do("DELETE", "/api/push/subscriptions/"+first.ID, ben, nil).want(404, parley.CodeNotFound)
		s.do("DELETE", "/api/push/subscriptions/nope", ana, nil).want(400, parley.CodeInvalidArgument)
		s.do("DELETE", "/api/push/subscriptions/"+first.ID, ana, nil).want(204)
		s.do("DELETE", "/api/push/subscriptions/"+first.ID, ana, nil).want(404, parley.CodeNotFound)

		if r := s.do("GET", "/api/push/settings", ben, nil).want(200); r.String() != `{"settings":[]}`+"\n" {
			t.Errorf("no settings: %s", r)
		}
		if r := s.do("PUT", "/api/push/settings/g", ben, map[string]string{"level": "mentions"}).want(200); r.String() != `{"conv":"g","level":"mentions"}`+"\n" {
			t.Errorf("set: %s", r)
		}
		s.do("PUT", "/api/push/settings/g", ben, map[string]string{"level": "loud"}).want(400, parley.CodeInvalidArgument)
		s.do("PUT", "/api/push/settings/g", ben, map[string]string{}).want(400, parley.CodeInvalidArgument)
		s.do("PUT", "/api/push/settings/nowhere", ben, map[string]string{"level": "none"}).want(404, parley.CodeNotMember)
		if r := s.do("GET", "/api/push/settings", ben, nil).want(200); r.String() != `{"settings":[{"conv":"g","level":"mentions"}]}`+"\n" {
			t.Errorf("settings: %s", r)
		}
	})
}
