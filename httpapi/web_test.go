package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/web"
	"github.com/parleychat/parley/wire"
)

// webServer is the API with the embedded browser app (or none, when app
// is nil), on a real listener over a fresh SQLite store with users ana
// (admin) and ben.
func webServer(t *testing.T, site http.Handler, mutate ...func(*httpapi.Deps)) (*httptest.Server, parley.Store) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, u := range []parley.NewUser{{ID: "ana", Password: "password-ana", Role: parley.RoleAdmin}, {ID: "ben", Password: "password-ben"}} {
		if _, err := s.CreateUser(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	d := httpapi.Deps{
		App: app.New(app.Options{Store: s}), Store: s, Gateway: http.NotFoundHandler(), Web: site,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, m := range mutate {
		m(&d)
	}
	srv := httptest.NewServer(httpapi.NewHandler(d))
	t.Cleanup(srv.Close)
	return srv, s
}

func embeddedSite(t *testing.T) *web.Site {
	t.Helper()
	site, err := web.New()
	if err != nil {
		t.Fatal(err)
	}
	return site
}

const acceptHTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// TestHosting: the routing rules of the app (docs/protocol.md). Hashed assets
// are immutable; a navigation (GET, Accept text/html, no extension) to any
// path no route owns gets the shell, no-store; an unknown asset, an API
// path, a path with an extension, a request that is no navigation: 404
// problem+json; a wrong method on a known path: 405 problem+json.
func TestHosting(t *testing.T) {
	site := embeddedSite(t)
	srv, _ := webServer(t, site)
	appJS, _ := site.Path("app.js")
	appCSS, _ := site.Path("app.css")
	const shell, asset, problem = "shell", "asset", "problem"
	for _, tc := range []struct {
		name, method, path, accept string
		status                     int
		want                       string
	}{
		{"root", "GET", "/", acceptHTML, 200, shell},
		{"root HEAD", "HEAD", "/", acceptHTML, 200, shell},
		{"root for curl", "GET", "/", "*/*", 200, shell},
		{"root for text/*", "GET", "/", "text/*", 200, shell},
		{"root, HTML refused by weight", "GET", "/", "text/html;q=0, application/json", 404, problem},
		{"root, anything refused by weight", "GET", "/", "*/*;q=0", 404, problem},
		{"root, a malformed range beside */*", "GET", "/", "text/;;, */*", 200, shell},
		{"unknown API path for curl", "GET", "/api/nope", "*/*", 404, problem},
		{"exports path for curl", "GET", "/exports/", "*/*", 404, problem},
		{"sign-in", "GET", "/signin", acceptHTML, 200, shell},
		{"conversation", "GET", "/c/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", acceptHTML, 200, shell},
		{"unknown navigation path", "GET", "/no/such/page", acceptHTML, 200, shell},
		{"trailing slash", "GET", "/admin/users/", acceptHTML, 200, shell},
		{"query string", "GET", "/c/x?v=1", acceptHTML, 200, shell},
		{"hashed module", "GET", appJS, "*/*", 200, asset},
		{"hashed style", "GET", appCSS, "text/css,*/*;q=0.1", 200, asset},
		{"unknown asset", "GET", "/assets/app.0123456789ab.js", "*/*", 404, problem},
		{"unhashed asset", "GET", "/assets/app.js", "*/*", 404, problem},
		{"asset navigated to", "GET", "/assets/nope.js", acceptHTML, 404, problem},
		{"asset directory", "GET", "/assets/", acceptHTML, 404, problem},
		{"unknown API path navigated to", "GET", "/api/nope", acceptHTML, 404, problem},
		{"unknown API path", "GET", "/api/nope", "application/json", 404, problem},
		{"exports path navigated to", "GET", "/exports/", acceptHTML, 404, problem},
		{"export page", "GET", "/exports", acceptHTML, 200, shell},
		{"export page, not a navigation", "GET", "/exports", "application/json", 405, problem},
		{"conversation id with a dot", "GET", "/c/release.2026", acceptHTML, 200, shell},
		{"conversation id with a word after a dot", "GET", "/c/team.alpha", acceptHTML, 200, shell},
		{"path with an extension", "GET", "/favicon.ico", acceptHTML, 404, problem},
		{"file at a deeper path", "GET", "/c/app.JS", acceptHTML, 404, problem},
		{"manifest", "GET", "/manifest.webmanifest", acceptHTML, 404, problem},
		{"path with an extension, for curl", "GET", "/robots.txt", "*/*", 404, problem},
		{"JSON only", "GET", "/c/x", "application/json, text/plain", 404, problem},
		{"not a navigation", "GET", "/c/x", "application/json", 404, problem},
		{"no Accept", "GET", "/c/x", "", 404, problem},
		{"metrics elsewhere", "GET", "/metrics", acceptHTML, 404, problem},
		{"socket path", "GET", "/ws/x", acceptHTML, 404, problem},
		{"POST to a page", "POST", "/c/x", acceptHTML, 404, problem},
		{"POST to the root", "POST", "/", acceptHTML, 404, problem},
		{"POST to an asset", "POST", appJS, "*/*", 405, problem},
		{"POST to healthz", "POST", "/healthz", "*/*", 405, problem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			h := resp.Header
			switch tc.want {
			case shell:
				if h.Get("Content-Type") != "text/html; charset=utf-8" || h.Get("Cache-Control") != "no-store" ||
					h.Get("Content-Security-Policy") != web.ContentSecurityPolicy || h.Get("Referrer-Policy") != "no-referrer" ||
					h.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("shell headers %v", h)
				}
				if tc.method == "GET" && string(body) != string(site.Shell()) {
					t.Errorf("not the shell:\n%s", body)
				}
			case asset:
				if h.Get("Cache-Control") != web.AssetCacheControl || h.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("asset headers %v", h)
				}
				if strings.HasSuffix(tc.path, ".js") && h.Get("Content-Type") != "text/javascript; charset=utf-8" {
					t.Errorf("module Content-Type %q", h.Get("Content-Type"))
				}
			case problem:
				var p wire.Problem
				if h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" {
					t.Errorf("problem headers %v", h)
				}
				if err := json.Unmarshal(body, &p); err != nil || p.Status != tc.status {
					t.Errorf("problem body %s: %v", body, err)
				}
				if tc.status == 404 && p.Code != parley.CodeNotFound {
					t.Errorf("code %s, want NOT_FOUND", p.Code)
				}
			}
		})
	}
}

// TestHostingWithoutApp: with no Web handler every such path is a 404
// problem, never a panic or text/plain.
func TestHostingWithoutApp(t *testing.T) {
	srv, _ := webServer(t, nil)
	for _, p := range []string{"/", "/c/x", "/assets/app.0123456789ab.js", "/assets/"} {
		req, _ := http.NewRequest("GET", srv.URL+p, nil)
		req.Header.Set("Accept", acceptHTML)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s, want a 404 problem", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// login signs user in through the API and returns the login response.
func login(t *testing.T, base, user, password string) *http.Response {
	t.Helper()
	resp, err := http.Post(base+"/api/login", "application/json",
		strings.NewReader(`{"login":"`+user+`","password":"`+password+`","device_id":"laptop","install_id":"i1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login %s: %d", user, resp.StatusCode)
	}
	return resp
}

// TestMe: GET /api/me names the signed-in user and device, by the session
// cookie (how a browser asks) or a bearer token; 401 without either.
func TestMe(t *testing.T) {
	srv, _ := webServer(t, nil)
	cookies := login(t, srv.URL, "ana", "password-ana").Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login cookies %v", cookies)
	}
	type me struct {
		User   struct{ ID, Login, Name, Role string }
		Device string
	}
	get := func(auth func(*http.Request)) (int, me, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/api/me", nil)
		auth(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m me
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m, resp.Header.Get("Cache-Control")
	}
	status, got, cc := get(func(r *http.Request) { r.AddCookie(cookies[0]) })
	if status != 200 || got.User.ID != "ana" || got.User.Login != "ana" || got.User.Name != "ana" || got.User.Role != "admin" || got.Device != "laptop" || cc != "no-store" {
		t.Fatalf("GET /api/me by cookie: %d %+v %q", status, got, cc)
	}
	status, got, _ = get(func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+cookies[0].Value) })
	if status != 200 || got.User.ID != "ana" {
		t.Fatalf("GET /api/me by bearer token: %d %+v", status, got)
	}
	benCookie := login(t, srv.URL, "ben", "password-ben").Cookies()[0]
	status, got, _ = get(func(r *http.Request) { r.AddCookie(benCookie) })
	if status != 200 || got.User.ID != "ben" || got.User.Role != "user" {
		t.Fatalf("GET /api/me as ben: %d %+v", status, got)
	}
	if status, _, _ := get(func(*http.Request) {}); status != http.StatusUnauthorized {
		t.Fatalf("GET /api/me signed out: %d, want 401", status)
	}
	if status, _, _ := get(func(r *http.Request) { r.AddCookie(&http.Cookie{Name: wire.SessionCookie, Value: "stale"}) }); status != http.StatusUnauthorized {
		t.Fatalf("GET /api/me with a stale cookie: %d, want 401", status)
	}
}

// postAs sends a JSON POST with a session cookie and extra headers
// (name, value pairs) and returns the status and body.
func postAs(t *testing.T, url string, cookie *http.Cookie, contentType, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// convCount is how many conversations user sees.
func convCount(t *testing.T, s parley.Store, user string) int {
	t.Helper()
	page, err := s.Convs(context.Background(), parley.Principal{User: user, Role: parley.RoleUser, DeviceID: "d"}, parley.ConvsRequest{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Convs)
}

// TestCrossOrigin: every state-changing route refuses a request a page of
// another origin made with the user's cookie (403, nothing changes); the
// server's own pages, origins listed in --origins and clients that are no
// browser (no Origin, no Sec-Fetch-Site) pass.
func TestCrossOrigin(t *testing.T) {
	srv, store := webServer(t, nil, func(d *httpapi.Deps) {
		d.Origins = []string{"https://app.example.com", "*.trusted.example"}
	})
	cookie := login(t, srv.URL, "ana", "password-ana").Cookies()[0]
	const body = `{"kind":"group","id":"g-%s","title":"t","members":["ben"]}`
	for i, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, 403},
		{"same-site sibling", []string{"Sec-Fetch-Site", "same-site", "Origin", "https://sub.example.com"}, 403},
		{"old browser, foreign Origin", []string{"Origin", "https://evil.example"}, 403},
		{"Origin null", []string{"Origin", "null", "Sec-Fetch-Site", "cross-site"}, 403},
		{"same origin", []string{"Sec-Fetch-Site", "same-origin", "Origin", srv.URL}, 201},
		{"same origin, old browser", []string{"Origin", srv.URL}, 201},
		{"listed origin", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://app.example.com"}, 201},
		{"listed pattern", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://chat.trusted.example"}, 201},
		{"listed origin, other scheme", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://app.example.com"}, 403},
		{"no browser", nil, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := convCount(t, store, "ana")
			status, b := postAs(t, srv.URL+"/api/convs", cookie, "application/json", fmt.Sprintf(body, strconv.Itoa(i)), tc.hdr...)
			if status != tc.status {
				t.Fatalf("POST /api/convs: %d %s, want %d", status, b, tc.status)
			}
			want := before
			if status == 201 {
				want++
			} else if !strings.Contains(b, `"code":"PERMISSION_DENIED"`) {
				t.Errorf("refusal body %s", b)
			}
			if got := convCount(t, store, "ana"); got != want {
				t.Errorf("conversations: %d, want %d", got, want)
			}
		})
	}
	// Login and logout are state-changing too: a cross-site login is
	// refused before the password is checked; a cross-site logout leaves
	// the session working.
	status, _ := postAs(t, srv.URL+"/api/login", nil, "application/json", `{"login":"ben","password":"password-ben","device_id":"d","install_id":"i"}`, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	if status != 403 {
		t.Errorf("cross-site login: %d, want 403", status)
	}
	if status, _ = postAs(t, srv.URL+"/api/logout", cookie, "", "", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); status != 403 {
		t.Errorf("cross-site logout: %d, want 403", status)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/api/me", nil)
	req.AddCookie(cookie)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("session after a refused logout: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A cross-site GET (a link) is no state change: it is served.
	req, _ = http.NewRequest("GET", srv.URL+"/api/me", nil)
	req.AddCookie(cookie)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("cross-site GET: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestJSONContentType: a state-changing request whose body is not labelled
// application/json is 415 problem+json before anything is read or stored
// (text/plain, form-encoded and multipart are what a page may send
// cross-origin without a preflight).
func TestJSONContentType(t *testing.T) {
	srv, store := webServer(t, nil)
	cookie := login(t, srv.URL, "ana", "password-ana").Cookies()[0]
	const conv = `{"kind":"group","id":"g1","title":"t","members":["ben"]}`
	for _, tc := range []struct {
		contentType string
		status      int
	}{
		{"text/plain", 415},
		{"text/plain;charset=UTF-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
		{"", 415},
		{"application/json-seq", 415},
		{"not a media type", 415},
		{"application/json; charset=utf-8", 201},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			before := convCount(t, store, "ana")
			status, b := postAs(t, srv.URL+"/api/convs", cookie, tc.contentType, conv)
			if status != tc.status {
				t.Fatalf("%d %s, want %d", status, b, tc.status)
			}
			if status == 415 {
				var p wire.Problem
				if err := json.Unmarshal([]byte(b), &p); err != nil || p.Status != 415 || p.Code != parley.CodeInvalidArgument {
					t.Errorf("415 body %s", b)
				}
				if got := convCount(t, store, "ana"); got != before {
					t.Errorf("a refused request stored a conversation")
				}
			}
		})
	}
	// A send with a text/plain body stores no message.
	status, b := postAs(t, srv.URL+"/api/convs/g1/messages", cookie, "text/plain", `{"body":"hi"}`, "Idempotency-Key", "k1")
	if status != 415 {
		t.Fatalf("text/plain send: %d %s", status, b)
	}
	page, err := store.Sync(context.Background(), parley.Principal{User: "ana", Role: parley.RoleAdmin, DeviceID: "laptop"}, parley.SyncRequest{Conv: "g1", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events {
		if e.Kind == parley.EventMessage {
			t.Fatalf("a refused send stored %+v", e)
		}
	}
	// A text/plain login is refused too (no password is checked).
	if status, _ := postAs(t, srv.URL+"/api/login", nil, "text/plain", `{"login":"ben","password":"password-ben","device_id":"d","install_id":"i"}`); status != 415 {
		t.Errorf("text/plain login: %d, want 415", status)
	}
	// A request without a body needs no Content-Type (logout).
	if status, b := postAs(t, srv.URL+"/api/logout", cookie, "", ""); status != 204 {
		t.Errorf("logout without a body: %d %s", status, b)
	}
}

// TestSessionCookie: over TLS or with SecureCookie the session cookie is
// __Host-parley_session, Secure; otherwise parley_session. Each server
// reads only the name it sets. A browser's login gets the cookie and no
// token in the body; the Go client and curl get both.
func TestSessionCookie(t *testing.T) {
	for _, tc := range []struct {
		name           string
		secure, tls    bool
		cookie, ignore string
	}{
		{"plain", false, false, wire.SessionCookie, wire.SecureSessionCookie},
		{"secure-cookie", true, false, wire.SecureSessionCookie, wire.SessionCookie},
		{"TLS", false, true, wire.SecureSessionCookie, wire.SessionCookie},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if _, err := s.CreateUser(context.Background(), parley.NewUser{ID: "ana", Password: "password-ana"}); err != nil {
				t.Fatal(err)
			}
			h := httpapi.NewHandler(httpapi.Deps{App: app.New(app.Options{Store: s}), Store: s, Gateway: http.NotFoundHandler(), SecureCookie: tc.secure, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			srv := httptest.NewUnstartedServer(h)
			if tc.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			client := srv.Client()
			loginAs := func(hdr ...string) (*http.Cookie, string) {
				req, _ := http.NewRequest("POST", srv.URL+"/api/login", strings.NewReader(`{"login":"ana","password":"password-ana","device_id":"d","install_id":"i"}`))
				req.Header.Set("Content-Type", "application/json")
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var got struct{ User, Token string }
				json.NewDecoder(resp.Body).Decode(&got)
				if resp.StatusCode != 200 || len(resp.Cookies()) != 1 {
					t.Fatalf("login: %d, cookies %v", resp.StatusCode, resp.Cookies())
				}
				return resp.Cookies()[0], got.Token
			}
			c, token := loginAs()
			if c.Name != tc.cookie || c.Secure != (tc.cookie == wire.SecureSessionCookie) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" {
				t.Fatalf("cookie %+v, want %s", c, tc.cookie)
			}
			if token == "" || token != c.Value {
				t.Fatalf("the Go client's login: token %q, cookie %q", token, c.Value)
			}
			for _, hdr := range [][]string{{"Sec-Fetch-Mode", "cors", "Sec-Fetch-Site", "same-origin"}, {"Origin", srv.URL}} {
				c, token := loginAs(hdr...)
				if token != "" || c.Value == "" {
					t.Errorf("browser login (%v): token %q in the body, cookie %q", hdr, token, c.Value)
				}
			}
			me := func(name string) int {
				req, _ := http.NewRequest("GET", srv.URL+"/api/me", nil)
				req.AddCookie(&http.Cookie{Name: name, Value: c.Value})
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := me(tc.cookie); got != 200 {
				t.Errorf("GET /api/me with %s: %d", tc.cookie, got)
			}
			if got := me(tc.ignore); got != 401 {
				t.Errorf("GET /api/me with %s: %d, want 401 (not the cookie in use)", tc.ignore, got)
			}
			// Logout clears the cookie in use.
			req, _ := http.NewRequest("POST", srv.URL+"/api/logout", nil)
			req.AddCookie(c)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if cs := resp.Cookies(); resp.StatusCode != 204 || len(cs) != 1 || cs[0].Name != tc.cookie || cs[0].MaxAge >= 0 {
				t.Errorf("logout: %d, cookies %+v", resp.StatusCode, cs)
			}
		})
	}
}

// TestNosniff: every response, API and errors included, forbids MIME
// sniffing.
func TestNosniff(t *testing.T) {
	srv, _ := webServer(t, embeddedSite(t))
	for _, p := range []string{"/healthz", "/api/me", "/api/nope", "/", "/assets/x.js"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s (%d): X-Content-Type-Options %q", p, resp.StatusCode, got)
		}
	}
}

// TestHSTS: with SecureCookie (--secure-cookie: the server is reached over
// TLS) every response, an error or the app shell too, carries
// Strict-Transport-Security; without it none does (a plain-HTTP laptop
// server must not pin a browser to https).
func TestHSTS(t *testing.T) {
	s := openSQLite(t)
	for _, secure := range []bool{true, false} {
		h := httpapi.NewHandler(httpapi.Deps{App: app.New(app.Options{Store: s}), Store: s, Gateway: http.NotFoundHandler(), SecureCookie: secure, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		for _, path := range []string{"/healthz", "/api/me", "/api/nope", "/"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			got := rec.Header().Get("Strict-Transport-Security")
			want := ""
			if secure {
				want = httpapi.HSTSValue
			}
			if got != want {
				t.Errorf("secure %v, GET %s (%d): Strict-Transport-Security %q, want %q", secure, path, rec.Code, got, want)
			}
		}
	}
}

// TestAssetRanges: an asset honours ranges and preconditions as any file
// does, and its error answers are problems, not Go's text.
func TestAssetRanges(t *testing.T) {
	site := embeddedSite(t)
	srv, _ := webServer(t, site)
	appJS, _ := site.Path("app.js")
	for _, tc := range []struct {
		name, header, value string
		status              int
		problem             bool
	}{
		{"a range inside", "Range", "bytes=0-9", 206, false},
		{"a range past the end", "Range", "bytes=99999999-", 416, true},
		{"a range that is no range", "Range", "bytes=abc", 200, false},
		{"If-Match another hash", "If-Match", `"000000000000"`, 412, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+appJS, nil)
			req.Header.Set(tc.header, tc.value)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			isProblem := resp.Header.Get("Content-Type") == "application/problem+json"
			if isProblem != tc.problem {
				t.Fatalf("Content-Type %q: %s", resp.Header.Get("Content-Type"), body)
			}
			var p wire.Problem
			if tc.problem && (json.Unmarshal(body, &p) != nil || p.Status != tc.status || p.Code != parley.CodeInvalidArgument) {
				t.Errorf("problem %s", body)
			}
			if tc.status == 416 && resp.Header.Get("Content-Range") == "" {
				t.Error("416 without Content-Range")
			}
		})
	}
}
