package parley_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

func pushKeys(t testing.TB) (string, string) {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(auth)
}

func TestCheckPushSubscription(t *testing.T) {
	dh, auth := pushKeys(t)
	for _, tc := range []struct {
		name string
		s    parley.NewPushSubscription
		ok   bool
	}{
		{"browser", parley.NewPushSubscription{"https://fcm.googleapis.com/fcm/send/abc:def", dh, auth}, true},
		{"padded keys", parley.NewPushSubscription{"https://push.example.com/x", dh + "=", auth + "=="}, true},
		{"http (policy decides)", parley.NewPushSubscription{"http://127.0.0.1:8080/x", dh, auth}, true},
		{"no scheme", parley.NewPushSubscription{"push.example.com/x", dh, auth}, false},
		{"javascript", parley.NewPushSubscription{"javascript:alert(1)", dh, auth}, false},
		{"no host", parley.NewPushSubscription{"https:///x", dh, auth}, false},
		{"user info", parley.NewPushSubscription{"https://a:b@push.example.com/x", dh, auth}, false},
		{"fragment", parley.NewPushSubscription{"https://push.example.com/x#y", dh, auth}, false},
		{"space", parley.NewPushSubscription{"https://push.example.com/x y", dh, auth}, false},
		{"long", parley.NewPushSubscription{"https://push.example.com/" + strings.Repeat("a", parley.MaxPushEndpoint), dh, auth}, false},
		{"compressed point", parley.NewPushSubscription{"https://push.example.com/x", "A" + dh[1:44], auth}, false},
		{"17-byte auth", parley.NewPushSubscription{"https://push.example.com/x", dh, auth + "AA"}, false},
		{"std base64", parley.NewPushSubscription{"https://push.example.com/x", strings.NewReplacer("-", "+", "_", "/").Replace(dh) + "+/", auth}, false},
	} {
		got, err := parley.CheckPushSubscription(tc.s)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
			continue
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("%s: code %s", tc.name, parley.ErrorCode(err))
		}
		if tc.ok && (got.P256DH != dh || got.Auth != auth) {
			t.Errorf("%s: keys not canonical: %q %q", tc.name, got.P256DH, got.Auth)
		}
	}
}

// FuzzCheckPushSubscription: whatever a client sends, an accepted
// subscription has an http(s) endpoint with a host within the bound and
// canonical keys of the right sizes, and checking it again changes nothing.
func FuzzCheckPushSubscription(f *testing.F) {
	dh, auth := pushKeys(f)
	for _, ep := range []string{"https://fcm.googleapis.com/fcm/send/x", "http://127.0.0.1:1/p", "https://[::1]/", "https://%41/", "https://a@b/", "//x"} {
		f.Add(ep, dh, auth)
	}
	f.Add("https://x/", dh+"==", "AAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, endpoint, p256dh, auth string) {
		got, err := parley.CheckPushSubscription(parley.NewPushSubscription{Endpoint: endpoint, P256DH: p256dh, Auth: auth})
		if err != nil {
			if parley.ErrorCode(err) != parley.CodeInvalidArgument {
				t.Fatalf("code %s", parley.ErrorCode(err))
			}
			return
		}
		u, perr := url.Parse(got.Endpoint)
		if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil || len(got.Endpoint) > parley.MaxPushEndpoint {
			t.Fatalf("accepted endpoint %q", got.Endpoint)
		}
		k, _ := base64.RawURLEncoding.DecodeString(got.P256DH)
		a, _ := base64.RawURLEncoding.DecodeString(got.Auth)
		if len(k) != 65 || len(a) != 16 {
			t.Fatalf("keys of %d and %d bytes", len(k), len(a))
		}
		if again, err := parley.CheckPushSubscription(got); err != nil || again != got {
			t.Fatalf("not idempotent: %+v, %v", again, err)
		}
	})
}
