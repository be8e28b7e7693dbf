package middleware_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// ---- fixtures: a real SQLite store, real tokens, real configuration ----

func openStore(tb testing.TB) *sqlite.DB {
	tb.Helper()
	return openStoreAt(tb, filepath.Join(tb.TempDir(), "p.db"))
}

func openStoreAt(tb testing.TB, path string) *sqlite.DB {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), path, parley.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func createUser(tb testing.TB, s *sqlite.DB, id string, role parley.Role) {
	tb.Helper()
	if _, err := s.CreateUser(context.Background(), parley.NewUser{ID: id, Password: "password-" + id, Role: role}); err != nil {
		tb.Fatalf("CreateUser(%s): %v", id, err)
	}
}

// login returns a real token of user on (device, install).
func login(tb testing.TB, s *sqlite.DB, user, device, install string) string {
	tb.Helper()
	sess, err := s.Login(context.Background(), parley.LoginRequest{Login: user, Password: "password-" + user, DeviceID: device, InstallID: install})
	if err != nil {
		tb.Fatalf("Login(%s): %v", user, err)
	}
	return sess.Token
}

func parseConfig(tb testing.TB, yaml string) *config.Config {
	tb.Helper()
	c, warns, err := config.Parse([]byte(yaml))
	if err != nil {
		tb.Fatalf("config.Parse(%q): %v", yaml, err)
	}
	for _, w := range warns {
		tb.Logf("config warning: %s", w)
	}
	return c
}

// fixture is a store with three users and their tokens.
type fixture struct {
	store *sqlite.DB
	ident *middleware.Identifier
	ana   string // role user
	bob   string // role user
	root  string // role admin
	stale string // ana's token of an install her device replaced
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	createUser(t, s, "bob", parley.RoleUser)
	createUser(t, s, "root", parley.RoleAdmin)
	f := &fixture{store: s, ident: middleware.NewIdentifier(s.Authenticate, middleware.IdentifierOptions{})}
	f.stale = login(t, s, "ana", "phone", "install-1")
	f.ana = login(t, s, "ana", "phone", "install-2")
	f.bob = login(t, s, "bob", "laptop", "install-1")
	f.root = login(t, s, "root", "laptop", "install-1")
	return f
}

// chain returns a chain over cfg with a fresh in-memory limiter on a fixed
// clock (so Retry-After and RateLimit are the same on every run).
func (f *fixture) chain(cfg *config.Config, rec middleware.Recorder) *middleware.Chain {
	lim := ratelimit.NewMemory(ratelimit.MemoryOptions{Now: newClock().Now})
	return &middleware.Chain{
		Identifier: f.ident,
		Limiter:    func() ratelimit.Store { return lim },
		Config:     func() *config.Config { return cfg },
		Metrics:    rec,
		Log:        slog.New(slog.DiscardHandler),
	}
}

// ---- a real server whose handler records what reached it ----

type server struct {
	url    string
	client *http.Client
	ran    atomic.Int64 // handler runs
	reads  atomic.Int64 // Read calls on request bodies, by the chain or the handler
}

// serve registers every policy on a ServeMux, each behind c and in front of
// the probe handler, and serves it on 127.0.0.1:0. The probe reads the
// whole body and answers the status in ?status= (default 200).
func serve(t *testing.T, c *middleware.Chain, policies ...middleware.Policy) *server {
	t.Helper()
	s := &server{}
	mux := http.NewServeMux()
	for _, p := range policies {
		mux.Handle(p.Pattern, c.Wrap(p, http.HandlerFunc(s.probe)))
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &countingBody{ReadCloser: r.Body, reads: &s.reads}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	s.url, s.client = ts.URL, ts.Client()
	return s
}

func (s *server) probe(w http.ResponseWriter, r *http.Request) {
	s.ran.Add(1)
	io.Copy(io.Discard, r.Body)
	status := http.StatusOK
	if v := r.URL.Query().Get("status"); v != "" {
		status, _ = strconv.Atoi(v)
	}
	w.Header().Set("X-Subject", middleware.Subject(parley.CallerFromContext(r.Context())))
	w.WriteHeader(status)
	fmt.Fprintln(w, "handled")
}

type countingBody struct {
	io.ReadCloser
	reads *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return b.ReadCloser.Read(p)
}

type request struct {
	method string // default POST
	path   string
	token  string // bearer token
	cookie string // session cookie
	xff    string
	body   string // default "{}"
}

type response struct {
	status   int
	header   http.Header
	problem  wire.Problem // when the body is a problem
	dump     []byte       // the whole response as received, without Date and X-Request-Id
	ran      bool         // the handler ran
	bodyRead bool         // someone read the request body
}

func (s *server) do(t *testing.T, rq request) response {
	t.Helper()
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.body == "" {
		rq.body = "{}"
	}
	req, err := http.NewRequest(rq.method, s.url+rq.path, strings.NewReader(rq.body))
	if err != nil {
		t.Fatal(err)
	}
	if rq.token != "" {
		req.Header.Set("Authorization", "Bearer "+rq.token)
	}
	if rq.cookie != "" {
		req.AddCookie(&http.Cookie{Name: wire.SessionCookie, Value: rq.cookie})
	}
	if rq.xff != "" {
		req.Header.Set("X-Forwarded-For", rq.xff)
	}
	ran, reads := s.ran.Load(), s.reads.Load()
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	defer resp.Body.Close()
	resp.Header.Del("Date")
	resp.Header.Del(middleware.RequestIDHeader) // a fresh id per request
	dump, err := httputil.DumpResponse(resp, true)
	if err != nil {
		t.Fatal(err)
	}
	got := response{
		status:   resp.StatusCode,
		header:   resp.Header,
		dump:     dump,
		ran:      s.ran.Load() > ran,
		bodyRead: s.reads.Load() > reads,
	}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.NewDecoder(resp.Body).Decode(&got.problem); err != nil {
			t.Fatalf("problem body: %v", err)
		}
	}
	return got
}

// checkRefused asserts a refusal the chain wrote before the handler ran
// and before anyone read the body.
func checkRefused(t *testing.T, got response, status int, code parley.Code) {
	t.Helper()
	if got.status != status || got.problem.Code != code {
		t.Errorf("got %d %s (%q), want %d %s", got.status, got.problem.Code, got.problem.Detail, status, code)
	}
	if got.ran {
		t.Errorf("the handler ran for a %d", got.status)
	}
	if got.bodyRead {
		t.Errorf("the request body was read before the %d", got.status)
	}
}

// ---- (a) rate limiting ----

const limitConfig = `
trusted_proxies: [127.0.0.1, "::1"]
rate_limits:
  send:  {limit: 1, window: 1m}
  login: {limit: 1, window: 1m}
permissions:
  admin: [admin]
`

var (
	sendPolicy  = middleware.Policy{Pattern: "POST /api/convs/{id}/messages", Bucket: "send", Access: middleware.Identified, Activity: []int{http.StatusCreated}}
	loginPolicy = middleware.Policy{Pattern: "POST /api/login", Bucket: "login", Access: middleware.Public}
)

func TestRateLimitRejects(t *testing.T) {
	f := newFixture(t)
	srv := serve(t, f.chain(parseConfig(t, limitConfig), nil), sendPolicy)
	send := request{path: "/api/convs/c1/messages", token: f.ana, body: `{"text":"hi"}`}

	first := srv.do(t, send)
	if first.status != http.StatusOK || !first.ran || !first.bodyRead {
		t.Fatalf("first request: %d, ran %v, body read %v", first.status, first.ran, first.bodyRead)
	}
	second := srv.do(t, send)
	checkRefused(t, second, http.StatusTooManyRequests, parley.CodeRateLimited)

	headers := []struct {
		resp response
		name string
		want string
	}{
		{first, "RateLimit-Policy", `"send";q=1;w=60`},
		{first, "RateLimit", `"send";r=0;t=60`},
		{first, "Retry-After", ""},
		{second, "RateLimit-Policy", `"send";q=1;w=60`},
		{second, "RateLimit", `"send";r=0;t=60`},
		{second, "Retry-After", "60"},
	}
	for _, h := range headers {
		if got := h.resp.header.Get(h.name); got != h.want {
			t.Errorf("%d: %s = %q, want %q", h.resp.status, h.name, got, h.want)
		}
	}
}

func TestRateLimitSubjects(t *testing.T) {
	f := newFixture(t)
	srv := serve(t, f.chain(parseConfig(t, limitConfig), nil), sendPolicy, loginPolicy)
	const sendPath, loginPath = "/api/convs/c1/messages", "/api/login"

	steps := []struct {
		name    string
		path    string
		token   string
		xff     string
		status  int
		subject string // X-Subject when the handler ran
	}{
		{"ana", sendPath, f.ana, "198.51.100.1", 200, "ana"},
		{"bob has his own budget", sendPath, f.bob, "198.51.100.1", 200, "bob"},
		{"ana from another address shares hers", sendPath, f.ana, "198.51.100.2", 429, ""},
		{"bob from another address", sendPath, f.bob, "198.51.100.3", 429, ""},
		{"anonymous 198.51.100.1", loginPath, "", "198.51.100.1", 200, "ip:198.51.100.1"},
		{"anonymous 198.51.100.2 has its own budget", loginPath, "", "198.51.100.2", 200, "ip:198.51.100.2"},
		{"anonymous 198.51.100.1 again", loginPath, "", "198.51.100.1", 429, ""},
		{"a spoofed first hop buys no budget", loginPath, "", "203.0.113.66, 198.51.100.2", 429, ""},
		{"a bad token is anonymous", loginPath, "not-a-token", "198.51.100.9", 200, "ip:198.51.100.9"},
		{"another bad token, same address", loginPath, "another-bad-token", "198.51.100.9", 429, ""},
		{"ana's budget is per bucket", loginPath, f.ana, "198.51.100.1", 200, "ana"},
		// IPv6: one /64 is one subject, whatever its interface ids.
		{"anonymous 2001:db8:1:2::7", loginPath, "", "2001:db8:1:2::7", 200, "ip:2001:db8:1:2::/64"},
		{"another address of the same /64", loginPath, "", "2001:db8:1:2:ffff:ffff:ffff:fffe", 429, ""},
		{"the neighbouring /64 has its own budget", loginPath, "", "2001:db8:1:3::7", 200, "ip:2001:db8:1:3::/64"},
		{"an IPv4-mapped address is IPv4", loginPath, "", "::ffff:198.51.100.77", 200, "ip:198.51.100.77"},
	}
	for _, st := range steps {
		got := srv.do(t, request{path: st.path, token: st.token, xff: st.xff})
		if got.status != st.status {
			t.Errorf("%s: status %d (%s), want %d", st.name, got.status, got.problem.Code, st.status)
			continue
		}
		if got.ran != (st.status == 200) {
			t.Errorf("%s: handler ran = %v", st.name, got.ran)
		}
		if s := got.header.Get("X-Subject"); s != st.subject {
			t.Errorf("%s: subject %q, want %q", st.name, s, st.subject)
		}
	}
}

// The limiter runs before authentication: an anonymous caller hammering an
// identified route is limited by address and gets 429 once over it.
func TestRateLimitBeforeAuthentication(t *testing.T) {
	f := newFixture(t)
	srv := serve(t, f.chain(parseConfig(t, limitConfig), nil), sendPolicy)
	rq := request{path: "/api/convs/c1/messages", xff: "198.51.100.50", body: "garbage"}
	checkRefused(t, srv.do(t, rq), http.StatusUnauthorized, parley.CodeUnauthenticated)
	checkRefused(t, srv.do(t, rq), http.StatusTooManyRequests, parley.CodeRateLimited)
}

// ---- (b) authentication before the body ----

func TestAuthenticateBeforeBody(t *testing.T) {
	f := newFixture(t)
	p := middleware.Policy{Pattern: "POST /api/convs", Access: middleware.Identified}
	srv := serve(t, f.chain(parseConfig(t, "{}"), nil), p)
	garbage := "\x00\xff{not json at all" + strings.Repeat("\xfe", 4096)

	tests := []struct {
		name   string
		rq     request
		status int
		code   parley.Code
	}{
		{"no token", request{}, 401, parley.CodeUnauthenticated},
		{"unknown token", request{token: "unknown-token"}, 401, parley.CodeUnauthenticated},
		{"unknown cookie", request{cookie: "unknown-token"}, 401, parley.CodeUnauthenticated},
		{"token too long", request{token: strings.Repeat("t", 300)}, 401, parley.CodeUnauthenticated},
		{"stale install", request{token: f.stale}, 401, parley.CodeStaleInstall},
		{"bearer", request{token: f.ana}, 200, ""},
		{"cookie", request{cookie: f.bob}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rq := tt.rq
			rq.path, rq.body = "/api/convs", garbage
			got := srv.do(t, rq)
			if tt.status != 200 {
				checkRefused(t, got, tt.status, tt.code)
				if h := got.header.Get("WWW-Authenticate"); h == "" {
					t.Error("401 without WWW-Authenticate")
				}
				return
			}
			if got.status != 200 || !got.ran || !got.bodyRead {
				t.Errorf("got %d (%s), ran %v, body read %v; want the handler to run", got.status, got.problem.Code, got.ran, got.bodyRead)
			}
		})
	}
}

// ---- (c) permissions and (d) feature gates ----

func TestPermitted(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name   string
		config string
		rule   string
		token  string
		status int
		code   parley.Code
	}{
		{"user is denied", "permissions: {admin: [admin]}", "admin", f.ana, 403, parley.CodePermissionDenied},
		{"admin passes", "permissions: {admin: [admin]}", "admin", f.root, 200, ""},
		{"anonymous needs a token first", "permissions: {admin: [admin]}", "admin", "", 401, parley.CodeUnauthenticated},
		{"stale install", "permissions: {admin: [admin]}", "admin", f.stale, 401, parley.CodeStaleInstall},
		{"missing rule denies the admin", "permissions: {admin: [admin]}", "audit", f.root, 403, parley.CodePermissionDenied},
		{"missing rule denies a user", "permissions: {admin: [admin]}", "audit", f.ana, 403, parley.CodePermissionDenied},
		{"bad rule denies everyone", "permissions: {admin: everyone}", "admin", f.root, 403, parley.CodePermissionDenied},
		{"unknown role denies everyone", "permissions: {admin: [admin, root]}", "admin", f.root, 403, parley.CodePermissionDenied},
		{"rule for users", "permissions: {audit: [user, admin]}", "audit", f.ana, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := middleware.Policy{Pattern: "POST /api/admin/x", Access: middleware.Permitted, Rule: tt.rule}
			srv := serve(t, f.chain(parseConfig(t, tt.config), nil), p)
			got := srv.do(t, request{path: "/api/admin/x", token: tt.token, body: "garbage"})
			if tt.status == 200 {
				if got.status != 200 || !got.ran {
					t.Errorf("got %d (%s %q), want the handler to run", got.status, got.problem.Code, got.problem.Detail)
				}
				return
			}
			checkRefused(t, got, tt.status, tt.code)
			if tt.status == 403 && got.problem.Detail != "Access denied" {
				t.Errorf("403 detail %q, want exactly %q", got.problem.Detail, "Access denied")
			}
		})
	}
}

func TestFeatureGate(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name   string
		config string
		status int
	}{
		{"CLOSED", "access: {webhooks: {mode: CLOSED}}", 403},
		{"mode missing: OPEN", "access: {webhooks: {}}", 200},
		{"feature missing: OPEN", "access: {exports: {mode: CLOSED}}", 200},
		{"no access key: OPEN", "{}", 200},
		{"OPEN", "access: {webhooks: {mode: OPEN}}", 200},
		{"unknown mode: CLOSED", "access: {webhooks: {mode: SOMETIMES}}", 403},
		{"TEST_WINDOW without a window: outside", "access: {webhooks: {mode: TEST_WINDOW}}", 403},
		{"access not a mapping: CLOSED", "access: [webhooks]", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseConfig(t, tt.config)
			p := middleware.Policy{Pattern: "POST /hooks/{id}", Access: middleware.Public, Feature: "webhooks"}
			admin := middleware.Policy{Pattern: "POST /api/admin/hooks", Access: middleware.Permitted, Rule: "admin", Feature: "webhooks"}
			srv := serve(t, f.chain(cfg, nil), p, admin)
			for _, rq := range []request{
				{path: "/hooks/h1", body: "garbage"},
				{path: "/api/admin/hooks", token: f.root, body: "garbage"},
			} {
				got := srv.do(t, rq)
				if tt.status == 200 {
					if got.status != 200 || !got.ran {
						t.Errorf("%s: got %d (%s), want the handler to run", rq.path, got.status, got.problem.Code)
					}
					continue
				}
				checkRefused(t, got, 403, parley.CodePermissionDenied)
				if got.problem.Detail != middleware.AccessDenied {
					t.Errorf("%s: 403 detail %q, want %q", rq.path, got.problem.Detail, middleware.AccessDenied)
				}
			}
		})
	}
}

// ---- (e) limits that are off ----

func TestRateLimitOff(t *testing.T) {
	f := newFixture(t)
	tests := []struct{ name, config string }{
		{"every limit off", "rate_limits: {}"},
		{"empty section", "rate_limits:"},
		{"zero", "rate_limits: {send: {limit: 0, window: 1m}}"},
		{"negative", "rate_limits: {send: {limit: -1, window: 1m}}"},
		{"not a number", `rate_limits: {send: {limit: "1", window: 1m}}`},
		{"no limit", "rate_limits: {send: {window: 1m}}"},
		{"negative window", "rate_limits: {send: {limit: 1, window: -1m}}"},
		{"not a mapping", "rate_limits: {send: 1}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, f.chain(parseConfig(t, tt.config), nil), sendPolicy)
			for i := range 5 {
				got := srv.do(t, request{path: "/api/convs/c1/messages", token: f.ana})
				if got.status != 200 || !got.ran {
					t.Fatalf("request %d: %d (%s)", i, got.status, got.problem.Code)
				}
				for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
					if v := got.header.Get(h); v != "" {
						t.Errorf("request %d: %s: %q with the limit off", i, h, v)
					}
				}
			}
		})
	}
}

// ---- (f) metrics never change a result ----

// panicRecorder panics in every method, counting how often it was asked.
type panicRecorder struct{ requests, activity, limited, refused atomic.Int64 }

func (r *panicRecorder) Request(string, string, int, time.Duration) {
	r.requests.Add(1)
	panic("recorder: Request")
}

func (r *panicRecorder) Activity(string) {
	r.activity.Add(1)
	panic("recorder: Activity")
}

func (r *panicRecorder) RateLimited(string, string) {
	r.limited.Add(1)
	panic("recorder: RateLimited")
}

func (r *panicRecorder) Refused(string, int) {
	r.refused.Add(1)
	panic("recorder: Refused")
}

func TestPanickingRecorder(t *testing.T) {
	f := newFixture(t)
	cfg := parseConfig(t, limitConfig)
	admin := middleware.Policy{Pattern: "GET /api/admin/config", Access: middleware.Permitted, Rule: "admin"}
	health := middleware.Policy{Pattern: "GET /healthz", Access: middleware.Public}
	scenario := []struct {
		rq     request
		status int
	}{
		{request{method: "GET", path: "/healthz"}, 200},
		{request{path: "/api/convs/c1/messages?status=201", token: f.ana}, 201},
		{request{path: "/api/convs/c1/messages?status=201", token: f.ana}, 429},
		{request{path: "/api/convs/c1/messages", body: "garbage"}, 401},
		{request{path: "/api/convs/c1/messages", token: f.stale, xff: "198.51.100.77"}, 401},
		{request{method: "GET", path: "/api/admin/config", token: f.bob}, 403},
		{request{method: "GET", path: "/api/admin/config", token: f.root}, 200},
		{request{method: "GET", path: "/api/admin/config", token: f.root, xff: "198.51.100.1"}, 200},
	}
	run := func(rec middleware.Recorder) [][]byte {
		srv := serve(t, f.chain(cfg, rec), sendPolicy, admin, health)
		var dumps [][]byte
		for i, st := range scenario {
			got := srv.do(t, st.rq)
			if got.status != st.status {
				t.Errorf("step %d (%T): status %d, want %d", i, rec, got.status, st.status)
			}
			dumps = append(dumps, got.dump)
		}
		return dumps
	}
	want := run(metrics.New(metrics.Options{}))
	pr := &panicRecorder{}
	got := run(pr)
	for i := range scenario {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("step %d: with a panicking recorder the response is\n%s\nwant\n%s", i, got[i], want[i])
		}
	}
	if pr.requests.Load() == 0 || pr.activity.Load() == 0 || pr.limited.Load() == 0 || pr.refused.Load() == 0 {
		t.Errorf("recorder calls: Request %d, Activity %d, RateLimited %d, Refused %d; want every method to have panicked",
			pr.requests.Load(), pr.activity.Load(), pr.limited.Load(), pr.refused.Load())
	}
}

// ---- (g) what the metrics count ----

// scrape fetches m's exposition over HTTP and returns the value of every
// series of name, keyed by its labels.
func scrape(t *testing.T, m *metrics.Metrics, name string) map[string]float64 {
	t.Helper()
	ts := httptest.NewServer(m.Handler())
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	series := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		series[strings.TrimPrefix(line[:i], name)] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return series
}

func TestMetricsCounts(t *testing.T) {
	f := newFixture(t)
	m := metrics.New(metrics.Options{})
	cfg := parseConfig(t, "rate_limits: {send: {limit: 3, window: 1m}}")
	read := middleware.Policy{Pattern: "GET /api/convs/{id}", Access: middleware.Identified}
	srv := serve(t, f.chain(cfg, m), sendPolicy, read)

	for _, st := range []struct {
		rq     request
		status int
	}{
		{request{path: "/api/convs/c-123/messages?status=201", token: f.ana}, 201}, // an action
		{request{path: "/api/convs/c-123/messages?status=200", token: f.ana}, 200}, // a replay: not an action
		{request{path: "/api/convs/c-777/messages?status=201", token: f.ana}, 201}, // an action
		{request{path: "/api/convs/c-123/messages?status=201", token: f.ana}, 429}, // limited: not an action
		{request{path: "/api/convs/c-123/messages?status=201", token: f.ana}, 429},
		{request{path: "/api/convs/c-123/messages"}, 401},                                // (the 401 is not over the limit: subject ip:127.0.0.1)
		{request{method: "GET", path: "/api/convs/c-456?status=201", token: f.ana}, 201}, // not on the allow-list
	} {
		if got := srv.do(t, st.rq); got.status != st.status {
			t.Fatalf("%s %s: %d, want %d", st.rq.method, st.rq.path, got.status, st.status)
		}
	}

	checks := []struct {
		name string
		want map[string]float64
	}{
		{metrics.NameActivity, map[string]float64{
			`{route="POST /api/convs/{id}/messages"}`: 2,
		}},
		{metrics.NameRequests, map[string]float64{
			`{code="201",method="POST",route="POST /api/convs/{id}/messages"}`: 2,
			`{code="200",method="POST",route="POST /api/convs/{id}/messages"}`: 1,
			`{code="201",method="GET",route="GET /api/convs/{id}"}`:            1,
		}},
		{metrics.NameRateLimited, map[string]float64{
			`{bucket="send",transport="http"}`: 2,
		}},
	}
	for _, c := range checks {
		got := scrape(t, m, c.name)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s:\n got  %v\n want %v", c.name, got, c.want)
		}
		for labels := range got {
			if strings.Contains(labels, "c-") {
				t.Errorf("%s has a raw path in its labels: %s", c.name, labels)
			}
		}
	}
}

// ---- (h) a failing rate-limit store fails open ----

// lockedBuffer is a log sink for server goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestRateLimitStoreFails(t *testing.T) {
	f := newFixture(t)
	// A real Redis store pointed at a port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	store := ratelimit.NewRedis(client, ratelimit.RedisOptions{Timeout: time.Second})

	var logs lockedBuffer
	cfg := parseConfig(t, limitConfig)
	c := &middleware.Chain{
		Identifier: f.ident,
		Limiter:    func() ratelimit.Store { return store },
		Config:     func() *config.Config { return cfg },
		Log:        slog.New(slog.NewTextHandler(&logs, nil)),
	}
	srv := serve(t, c, sendPolicy)
	for i := range 4 {
		got := srv.do(t, request{path: "/api/convs/c1/messages", token: f.ana})
		if got.status != 200 || !got.ran {
			t.Fatalf("request %d with the store down: %d (%s), want it allowed", i, got.status, got.problem.Code)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := got.header.Get(h); v != "" {
				t.Errorf("request %d: %s: %q from a store that could not decide", i, h, v)
			}
		}
	}
	if !strings.Contains(logs.String(), "rate limit store failed") {
		t.Errorf("the store failure was not logged; log:\n%s", logs.String())
	}
}

// ---- WebSocket upgrade through the chain ----

func TestWebSocketThroughChain(t *testing.T) {
	f := newFixture(t)
	m := metrics.New(metrics.Options{})
	cfg := parseConfig(t, "rate_limits: {ws: {limit: 10, window: 1m}}")
	p := middleware.Policy{Pattern: "GET /ws", Bucket: "ws", Access: middleware.Public, Activity: []int{http.StatusSwitchingProtocols}}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subjects := make(chan string, 1)
	mux := http.NewServeMux()
	mux.Handle(p.Pattern, f.chain(cfg, m).Wrap(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		subjects <- middleware.Subject(parley.CallerFromContext(r.Context()))
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		c.Write(ctx, typ, msg)
		c.Close(websocket.StatusNormalClosure, "")
	})))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)

	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + f.ana}},
	})
	if err != nil {
		t.Fatalf("Dial through the chain: %v", err)
	}
	defer c.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("RateLimit") == "" {
		t.Errorf("upgrade: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if s := <-subjects; s != "ana" {
		t.Errorf("caller %q, want ana", s)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "ping" {
		t.Fatalf("echo: %q, %v", msg, err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("close: %v", err)
	}

	// The handler returns after the close; then the chain records 101.
	want := `{code="101",method="GET",route="GET /ws"}`
	for {
		if got := scrape(t, m, metrics.NameRequests); got[want] == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never recorded %s: %v", metrics.NameRequests, want, scrape(t, m, metrics.NameRequests))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := scrape(t, m, metrics.NameActivity); got[`{route="GET /ws"}`] != 1 {
		t.Errorf("activity for the upgrade: %v, want 1", got)
	}
}
