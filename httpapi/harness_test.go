package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/export"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// backends runs fn on SQLite and, when PARLEY_TEST_POSTGRES is set, on
// PostgreSQL (skipped with instructions otherwise), as parallel subtests.
// Every open is a fresh, empty database.
func backends(t *testing.T, fn func(t *testing.T, open func(t *testing.T, o parley.Options) parley.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, func(t *testing.T, o parley.Options) parley.Store {
			t.Helper()
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.Server(t) // skips without PARLEY_TEST_POSTGRES
		fn(t, func(t *testing.T, o parley.Options) parley.Store {
			t.Helper()
			s, err := postgres.Open(context.Background(), pgtest.DSN(t), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// server is the HTTP API with a real gateway, configuration watcher and
// metrics, on a real listener.
type server struct {
	t       testing.TB
	URL     string
	store   parley.Store
	hub     *gateway.Hub
	metrics *metrics.Metrics
	cfgPath string
	logs    *syncBuffer

	exportDir  string
	keys       *export.Keyring
	runExports func() // starts the export worker (once)
	// sweepExports runs one janitor sweep now (expiry and file deletion)
	// instead of waiting for the worker's next.
	sweepExports func()

	builtinLimits bool // the configuration keeps the built-in rate limits
}

type serverOptions struct {
	// config is the configuration file text ("" = "{}"). Unless it names
	// rate_limits, or builtinLimits is set, "rate_limits: {}" is added:
	// tests hammer routes, and the built-in limits have tests of their own.
	config        string
	builtinLimits bool
	hook          func(string) // metrics hook (panic injection)
	now           func() time.Time
	reauth        time.Duration // how often open sockets' tokens are checked again (0: the default)

	// Login protections (nil, 0: the defaults).
	hashes       *httpapi.PasswordGate
	hashWait     time.Duration
	loginBackoff *ratelimit.Backoff
	// onAccount sees every account notice the hub gets (its own and the
	// bus's).
	onAccount func(user string)
	// jsonLog writes the log as JSON lines (slog.JSONHandler), as
	// --log-format json does.
	jsonLog bool
	// onPublish sees every notice the HTTP API publishes, before the hub.
	onPublish func(parley.Notice)
	// blobs holds the files' bytes (app.Options.Blobs; nil: none, and
	// the file routes answer UNAVAILABLE).
	blobs parley.BlobStore
	// recallWindow and demo are Deps.RecallWindow and Deps.Demo.
	recallWindow time.Duration
	demo         *httpapi.DemoAccounts
}

// testSigningKey is the export link key of test servers.
var testSigningKey = map[string][]byte{"t1": []byte("test-signing-key-0123456789abcdef")}

func start(t testing.TB, store parley.Store, o serverOptions) *server {
	t.Helper()
	s := &server{t: t, store: store, logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{AddSource: false}))
	if o.jsonLog {
		log = slog.New(slog.NewJSONHandler(s.logs, nil))
	}
	s.cfgPath = filepath.Join(t.TempDir(), "parley.yaml")
	s.builtinLimits = o.builtinLimits
	if err := os.WriteFile(s.cfgPath, []byte(s.configText(o.config)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.metrics = metrics.New(metrics.Options{Log: log, Hook: o.hook})
	cfg, err := config.NewWatcher(s.cfgPath, config.WatcherOptions{Log: log, OnReload: s.metrics.ConfigReload, Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ident := middleware.NewIdentifier(store.Authenticate, middleware.IdentifierOptions{})
	limits := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	s.hub = gateway.New(gateway.Options{
		Store: store, Bus: inmem.NewBus(), Log: log, Metrics: s.metrics, Config: cfg.Current,
		OnAccount: func(u string) {
			ident.ForgetUser(u)
			if o.onAccount != nil {
				o.onAccount(u)
			}
		},
		Reauth: o.reauth,
		Limit: func(ctx context.Context, bucket, user string) (bool, time.Duration) {
			d, _ := middleware.Limit(ctx, limits, cfg.Current(), bucket, user)
			return d.Allowed, d.RetryAfter
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.hub.Run(ctx) })
	wg.Go(func() { cfg.Run(ctx) })
	s.exportDir = filepath.Join(t.TempDir(), "exports")
	keys, err := export.NewKeyring(testSigningKey, "t1")
	if err != nil {
		t.Fatal(err)
	}
	s.keys = keys
	now := o.now
	if now == nil {
		now = time.Now
	}
	worker := export.NewWorker(export.Options{
		Store: store, Dir: s.exportDir, Log: log, Config: cfg.Current, Poll: 20 * time.Millisecond,
	})
	var once sync.Once
	s.runExports = func() { once.Do(func() { wg.Go(func() { worker.Run(ctx) }) }) }
	s.sweepExports = func() { worker.Sweep(ctx) }
	publish := s.hub.Publish
	if o.onPublish != nil {
		publish = func(n parley.Notice) {
			o.onPublish(n)
			s.hub.Publish(n)
		}
	}
	uc := app.New(app.Options{
		Store: store, Publish: publish, Revoke: s.hub, KickExports: worker.Kick, Metrics: s.metrics, Log: log,
		Config: cfg.Current, Blobs: o.blobs,
	})
	h := httpapi.NewHandler(httpapi.Deps{
		App: uc, Store: store, Gateway: s.hub, Log: log, Config: cfg.Current, Identifier: ident,
		Limiter: func() ratelimit.Store { return limits },
		Metrics: s.metrics, Draining: s.hub.Draining, Now: o.now,
		ExportLink: func(job, user string, exp time.Time) string { return keys.Link(job, user, exp) },
		Hashes:     o.hashes, HashWait: o.hashWait, LoginBackoff: o.loginBackoff,
		RecallWindow: o.recallWindow, Demo: o.demo,
		Download: &export.Download{
			Store: store, Dir: s.exportDir, Log: log, Metrics: s.metrics,
			Keys: func() *export.Keyring { return keys }, Now: now,
		},
	})
	srv := httptest.NewServer(h)
	s.URL = srv.URL
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		wg.Wait()
	})
	return s
}

// configText is text as the test server's file: explicitly unlimited
// ("rate_limits: {}") unless text names rate_limits or the server keeps
// the built-in limits.
func (s *server) configText(text string) string {
	if strings.TrimSpace(text) == "" || strings.TrimSpace(text) == "{}" {
		text = ""
	}
	if s.builtinLimits || strings.Contains(text, "rate_limits") {
		if text == "" {
			return "{}\n"
		}
		return text
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text + "rate_limits: {}\n"
}

// writeConfig replaces the configuration file the way an editor does:
// a temporary file renamed over it.
func (s *server) writeConfig(text string) {
	s.t.Helper()
	tmp := s.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(s.configText(text)), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.cfgPath); err != nil {
		s.t.Fatal(err)
	}
}

// user creates an account and logs it in on device "d1", returning its
// token.
func (s *server) user(id string, role parley.Role) string {
	s.t.Helper()
	if _, err := s.store.CreateUser(context.Background(), parley.NewUser{ID: id, Password: "password-" + id, Role: role}); err != nil && parley.ErrorCode(err) != parley.CodeAlreadyExists {
		s.t.Fatal(err)
	}
	return s.login(id, "d1", "i1")
}

func (s *server) login(id, device, install string) string {
	s.t.Helper()
	r := s.do("POST", "/api/login", "", map[string]string{"login": id, "password": "password-" + id, "device_id": device, "install_id": install})
	r.want(200)
	var b struct{ Token string }
	r.decode(&b)
	return b.Token
}

// reply is one HTTP answer.
type reply struct {
	t      testing.TB
	what   string
	status int
	header http.Header
	body   []byte
}

// do sends a request; body is JSON-encoded unless it is a string (sent
// as is). hdr are extra header name/value pairs.
func (s *server) do(method, path, token string, body any, hdr ...string) reply {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json") // hdr may replace it
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if http.CanonicalHeaderKey(hdr[i]) == "Content-Type" {
			req.Header.Del("Content-Type")
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{t: s.t, what: method + " " + path, status: resp.StatusCode, header: resp.Header, body: b}
}

// want checks the status (and, for an error, that the body is a problem
// with code).
func (r reply) want(status int, code ...parley.Code) reply {
	r.t.Helper()
	if r.status != status {
		r.t.Fatalf("%s: status %d, want %d; body %s", r.what, r.status, status, r.body)
	}
	if len(code) > 0 {
		p := r.problem()
		if p.Code != code[0] {
			r.t.Fatalf("%s: code %s, want %s; body %s", r.what, p.Code, code[0], r.body)
		}
	}
	return r
}

func (r reply) problem() wire.Problem {
	r.t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		r.t.Fatalf("%s: Content-Type %q, want application/problem+json; body %s", r.what, ct, r.body)
	}
	var p wire.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		r.t.Fatalf("%s: problem body %s: %v", r.what, r.body, err)
	}
	if p.Status != r.status {
		r.t.Errorf("%s: problem status %d, response %d", r.what, p.Status, r.status)
	}
	return p
}

func (r reply) decode(v any) {
	r.t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		r.t.Fatalf("%s: body %s: %v", r.what, r.body, err)
	}
}

// frame decodes the body as a frame (every success body is its frame
// without t and rid).
func (r reply) frame() wire.Frame {
	r.t.Helper()
	var f wire.Frame
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		r.t.Fatalf("%s: body %s is not a frame: %v", r.what, r.body, err)
	}
	if f.T != "" || f.RID != nil {
		r.t.Errorf("%s: body carries t or rid: %s", r.what, r.body)
	}
	return f
}

// head returns a conversation's head from the store (for "nothing
// changed" checks).
func (s *server) head(conv string) int64 {
	s.t.Helper()
	c, err := s.store.Conversation(context.Background(), conv)
	if err != nil {
		s.t.Fatal(err)
	}
	return c.Head
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// eventually polls cond until it holds or 5 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r reply) String() string { return string(r.body) }

// metricValue is the value of one series of /metrics (name with its
// labels, as exposed), 0 when it is absent.
func metricValue(t *testing.T, s *server, series string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(s.scrape(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}
