package webpush_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/webpush"
)

func newKey(t *testing.T) *webpush.Key {
	t.Helper()
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := webpush.ParseKey(priv.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// browser is a subscription's private half.
type browser struct {
	priv *ecdh.PrivateKey
	auth []byte
}

func newBrowser(t *testing.T) browser {
	t.Helper()
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return browser{priv, auth}
}

func (b browser) message(endpoint, payload string) webpush.Message {
	return webpush.Message{Endpoint: endpoint, P256DH: b.priv.PublicKey().Bytes(), Auth: b.auth, Payload: []byte(payload),
		Topic: webpush.Topic("c-team"), TTL: time.Hour}
}

// TestSendDelivers posts to a receiver the allow list names: the request
// carries a VAPID token for the receiver's origin signed by the key, the
// RFC 8030 headers, and a body the subscription's key opens.
func TestSendDelivers(t *testing.T) {
	key, b := newKey(t), newBrowser(t)
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		origin := "http://" + r.Host
		k, sub, err := webpush.VerifyAuthorization(r.Header.Get("Authorization"), origin, time.Now())
		if err != nil || k != key.Public() || sub != "mailto:ops@example.com" {
			t.Errorf("vapid: key %q sub %q err %v", k, sub, err)
		}
		for h, want := range map[string]string{"Content-Encoding": "aes128gcm", "TTL": "3600", "Urgency": "normal", "Topic": webpush.Topic("c-team")} {
			if v := r.Header.Get(h); v != want {
				t.Errorf("%s: %q, want %q", h, v, want)
			}
		}
		plain, err := webpush.Decrypt(body, b.priv, b.auth)
		if err != nil {
			t.Errorf("decrypt: %v", err)
		}
		got.Store(string(plain))
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	s := webpush.NewSender(key, 5*time.Second)
	s.Allow = func() []string { return []string{"http://127.0.0.1:"} }
	s.Subject = func() string { return "mailto:ops@example.com" }
	res, _, err := s.Send(t.Context(), b.message(srv.URL+"/push/abc", `{"conv":"c-team","seq":7}`))
	if res != webpush.Delivered || err != nil {
		t.Fatalf("Send = %v, %v; want Delivered", res, err)
	}
	if got.Load() != `{"conv":"c-team","seq":7}` {
		t.Errorf("the receiver read %q", got.Load())
	}
}

// TestSendRefusesInternal: without the allow list, an endpoint on this
// machine is refused when the connection is made (by address and by a name
// that resolves to it), and an http endpoint before any connection.
func TestSendRefusesInternal(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	s := webpush.NewSender(newKey(t), 5*time.Second)
	b := newBrowser(t)
	for _, endpoint := range []string{srv.URL + "/p", "https://localhost" + port + "/p", "https://[::1]" + port + "/p"} {
		res, _, err := s.Send(t.Context(), b.message(endpoint, "{}"))
		if res != webpush.Failed || !errors.Is(err, webpush.ErrRefusedAddress) {
			t.Errorf("%s: %v, %v; want Failed with ErrRefusedAddress", endpoint, res, err)
		}
	}
	res, _, err := s.Send(t.Context(), b.message(strings.Replace(srv.URL, "https:", "http:", 1), "{}"))
	if res != webpush.Failed || err == nil {
		t.Errorf("http endpoint: %v, %v; want Failed", res, err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the internal server was reached %d times", n)
	}
}

// TestSendOutcomes maps the push service's answers, and follows no
// redirect.
func TestSendOutcomes(t *testing.T) {
	var redirected atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/target":
			redirected.Add(1)
		case "/302":
			http.Redirect(w, r, "/target", http.StatusFound)
		default:
			code := map[string]int{"/201": 201, "/404": 404, "/410": 410, "/429": 429, "/500": 500, "/503": 503, "/400": 400, "/403": 403, "/413": 413}[r.URL.Path]
			if code == 429 {
				w.Header().Set("Retry-After", "7")
			}
			w.WriteHeader(code)
		}
	}))
	t.Cleanup(srv.Close)
	s := webpush.NewSender(newKey(t), 5*time.Second)
	s.Allow = func() []string { return []string{srv.URL + "/"} }
	b := newBrowser(t)
	for path, want := range map[string]webpush.Result{
		"/201": webpush.Delivered, "/404": webpush.Gone, "/410": webpush.Gone, "/429": webpush.Retry, "/500": webpush.Retry,
		"/503": webpush.Retry, "/400": webpush.Failed, "/403": webpush.Failed, "/413": webpush.Failed, "/302": webpush.Failed,
	} {
		res, after, _ := s.Send(t.Context(), b.message(srv.URL+path, "{}"))
		if res != want {
			t.Errorf("%s: %v, want %v", path, res, want)
		}
		if path == "/429" && after != 7*time.Second {
			t.Errorf("429: retry after %v, want 7s", after)
		}
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("a redirect was followed %d times", n)
	}
	// A closed port is a network error: retried.
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	s.Allow = func() []string { return []string{url} }
	if res, _, _ := s.Send(t.Context(), b.message(url+"/x", "{}")); res != webpush.Retry {
		t.Errorf("closed port: %v, want Retry", res)
	}
}

func TestPublicAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "1.1.1.1": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "100.64.0.1": false, "100.127.255.254": false, "0.0.0.0": false, "::": false,
		"224.0.0.1": false, "255.255.255.255": false, "fc00::1": false, "fd12:3456::1": false, "fe80::1": false,
		"ff02::1": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "64:ff9b::a00:1": false,
		"2002:a00:1::": false, "0.1.2.3": false, "198.18.0.1": false, "fe80::1%eth0": false,
	} {
		if got := webpush.PublicAddress(netip.MustParseAddr(addr)); got != want {
			t.Errorf("PublicAddress(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestTopic(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	a, b := webpush.Topic("c-team"), webpush.Topic("c-other")
	if !re.MatchString(a) || !re.MatchString(webpush.Topic(strings.Repeat("x", 64))) {
		t.Errorf("topic %q is not 1-32 base64url characters", a)
	}
	if a == b || a != webpush.Topic("c-team") {
		t.Errorf("topics of two conversations: %q, %q", a, b)
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		allowed  bool
		ok       bool
	}{
		{"https://push.example.com/send/abc", false, true},
		{"https://push.example.com:8443/send/abc", false, true},
		{"http://push.example.com/send/abc", false, false},
		{"http://127.0.0.1:9000/p", true, true},
		{"ftp://push.example.com/x", true, false},
		{"https://user:pw@push.example.com/x", false, false},
		{"https://push.example.com/x#frag", false, false},
		{"https:///x", false, false},
		{"/relative", false, false},
		{"https://push.example.com:99999/x", false, false},
		{"https://push.example.com/ x", false, false},
		{"https://push.example.com/" + strings.Repeat("a", webpush.MaxEndpoint), false, false},
		{"", false, false},
	} {
		_, err := webpush.ParseEndpoint(tc.endpoint, tc.allowed)
		if (err == nil) != tc.ok {
			t.Errorf("ParseEndpoint(%q, %v): %v, want ok %v", tc.endpoint, tc.allowed, err, tc.ok)
		}
	}
}

// FuzzParseEndpoint: whatever a client sends, an accepted endpoint is an
// https (or allowed http) URL with a host and printable ASCII, within the
// bound, and its origin is the scheme and host.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"https://fcm.googleapis.com/fcm/send/x", "http://127.0.0.1:1/p", "https://[::1]:443/", "https://a@b/", "javascript:alert(1)", "https://%zz/"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, endpoint string, allowed bool) {
		u, err := webpush.ParseEndpoint(endpoint, allowed)
		if err != nil {
			return
		}
		if len(endpoint) > webpush.MaxEndpoint || u.Host == "" || u.User != nil {
			t.Fatalf("accepted %q", endpoint)
		}
		if u.Scheme != "https" && !(allowed && u.Scheme == "http") {
			t.Fatalf("accepted scheme %q", u.Scheme)
		}
		o := webpush.Origin(u)
		if _, err := url.Parse(o); err != nil || !strings.HasPrefix(o, u.Scheme+"://") {
			t.Fatalf("origin %q of %q", o, endpoint)
		}
	})
}
