package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/export"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/ratelimit"
	"github.com/redis/go-redis/v9"
)

type serveFlags struct {
	storeFlags
	addr         string
	demo         bool
	origins      string
	hintMembers  int
	queue        int
	backstop     time.Duration
	ping         time.Duration
	reauth       time.Duration
	drainTimeout time.Duration
	secureCookie bool
	logFormat    string
	configPath   string
	exportDir    string
	exportJobs   int
	exportLease  time.Duration
	tokens       tokenFlags
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.storeFlags.register(fs)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	fs.BoolVar(&f.demo, "demo", false, "create demo users ana (admin), ben, cy (password parley-demo) and group c-team when missing")
	fs.StringVar(&f.origins, "origins", "", "comma-separated browser origins allowed to open /ws besides the server's own host")
	fs.IntVar(&f.hintMembers, "hint-members", 1000, "conversations with more members get hints instead of event pushes")
	fs.IntVar(&f.queue, "send-queue", 256, "frames queued per socket before a slow client is disconnected")
	fs.DurationVar(&f.backstop, "backstop", 5*time.Second, "how often the heads of watched conversations are polled")
	fs.DurationVar(&f.ping, "ping", 30*time.Second, "WebSocket keepalive interval")
	fs.DurationVar(&f.reauth, "reauth", time.Minute, "how often open sockets' tokens are checked again (logged out, disabled)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 15*time.Second, "how long SIGTERM waits for requests and sockets to finish")
	fs.BoolVar(&f.secureCookie, "secure-cookie", false, "mark the session cookie Secure (serving over TLS)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.configPath, "config", "", "policy file (YAML, hot-reloaded: rate limits, access modes, permissions, timeouts); empty: the documented defaults")
	fs.StringVar(&f.exportDir, "export-dir", "", "where export shards and artifacts are written (shared by every gateway of a cluster); default DATA-DIR/exports")
	fs.IntVar(&f.exportJobs, "export-workers", 2, "export jobs this process runs at once (0: run none here)")
	fs.DurationVar(&f.exportLease, "export-lease", 30*time.Second, "how long an export job stays claimed by a worker that stopped renewing it (a crashed one) before another takes it over")
	f.tokens.register(fs)
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if err := f.tokens.check(); err != nil {
		return err
	}
	if f.exportJobs < 0 {
		return usagef("--export-workers %d: want 0 or more", f.exportJobs)
	}
	if f.exportLease < 100*time.Millisecond {
		return usagef("--export-lease %s: want at least 100ms", f.exportLease)
	}
	if f.exportDir == "" {
		f.exportDir = filepath.Join(f.dataDir, "exports")
	}
	var handler slog.Handler
	switch f.logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		return usagef("--log-format %q: want text or json", f.logFormat)
	}
	log := slog.New(handler)
	if spec := getenv("PARLEY_FAULTS"); spec != "" {
		if err := fault.Arm(spec); err != nil {
			return usagef("PARLEY_FAULTS: %v", err)
		}
		log.Warn("fault points armed (lab setting)", "faults", spec)
	}

	m := metrics.New(metrics.Options{Log: log})
	var cfg *config.Watcher
	cfg, err := config.NewWatcher(f.configPath, config.WatcherOptions{Log: log, OnReload: func(ok bool) {
		m.ConfigReload(ok)
		if ok {
			warnUnusedBuckets(log, cfg.Current())
		}
	}})
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	warnUnusedBuckets(log, cfg.Current())

	store, kind, err := f.open(ctx, f.tokens.options(parley.Options{}))
	if err != nil {
		return err
	}
	defer store.Close()
	if f.demo {
		if err := seedDemo(ctx, store); err != nil {
			return fmt.Errorf("demo data: %w", err)
		}
	}

	var bus parley.Bus = inmem.NewBus()
	if kind == "postgres" {
		if bus, err = postgres.NewBus(f.dsn(), postgres.BusOptions{Logger: log}); err != nil {
			return err
		}
	}
	var origins []string
	for _, o := range strings.Split(f.origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	limiters := newLimiters(log)
	defer limiters.Close()
	limiter := func() ratelimit.Store { return limiters.For(cfg.Current()) }
	ident := middleware.NewIdentifier(store.Authenticate, middleware.IdentifierOptions{})
	hub := gateway.New(gateway.Options{
		Store: store, Bus: bus, Log: log,
		HintMembers: f.hintMembers, QueueSize: f.queue, Backstop: f.backstop,
		PingEvery: f.ping, Reauth: f.reauth, OriginPatterns: origins,
		SendLimit: func(ctx context.Context, user string) (bool, time.Duration) {
			d, err := middleware.Limit(ctx, limiter(), cfg.Current(), middleware.BucketSend, user)
			if err != nil {
				log.Warn("rate limit store failed; allowing", "bucket", middleware.BucketSend, "err", err)
			}
			return d.Allowed, d.RetryAfter
		},
		OnAccount: ident.ForgetUser,
		Metrics:   m,
		Timeout:   func() time.Duration { return cfg.Current().StoreTimeout() },
	})
	registerHubMetrics(m, hub)
	keys, err := newKeys(f.dataDir, log)
	if err != nil {
		return err
	}
	worker := export.NewWorker(export.Options{
		Store: store, Dir: f.exportDir, Log: log, Config: cfg.Current, Workers: f.exportJobs, Lease: f.exportLease,
	})
	download := &export.Download{
		Store: store, Dir: f.exportDir, Log: log, Metrics: m,
		Keys: func() *export.Keyring { return keys.For(cfg.Current()) },
	}
	api := httpapi.NewHandler(httpapi.Deps{
		ExportLink: func(job, user string, exp time.Time) string {
			return keys.For(cfg.Current()).Link(job, user, exp)
		},
		KickExports: worker.Kick, Download: download,
		Store: store, Gateway: hub, Log: log, Config: cfg.Current, Identifier: ident, Limiter: limiter,
		Metrics: m, Publish: hub.Publish, Draining: hub.Draining, Revoke: hub.RevokeToken,
		RevokeUser: hub.RevokeUser, SecureCookie: f.secureCookie,
	})

	// Bind before serving, so a taken port fails here, synchronously.
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	hubCtx, stopHub := context.WithCancel(context.Background())
	defer stopHub()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := hub.Run(hubCtx); err != nil {
			log.Error("gateway stopped", "err", err)
		}
	})
	wg.Go(func() {
		if err := cfg.Run(hubCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("configuration watcher stopped", "err", err)
		}
	})
	wg.Go(func() { sweepTokens(hubCtx, store, f.tokens.sweep, sweepBatch, sweepBatches, log) })
	if f.exportJobs > 0 {
		wg.Go(func() {
			if err := worker.Run(hubCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("export worker stopped", "err", err)
			}
		})
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	log.Info("parley serving", "addr", ln.Addr().String(), "store", kind)

	select {
	case err := <-serveErr:
		stopHub()
		wg.Wait()
		return err
	case <-ctx.Done():
	}

	// Graceful drain: goaway to every socket once accepted requests are
	// answered, stop accepting, finish in-flight HTTP requests, close the
	// sockets after their queues are written, then stop the fan-out and
	// the store (in reverse order of construction).
	log.Info("draining")
	dctx, cancel := context.WithTimeout(context.Background(), f.drainTimeout)
	defer cancel()
	hub.Drain()
	shutdownErr := srv.Shutdown(dctx)
	if err := hub.Shutdown(dctx); err != nil {
		log.Warn("sockets still open at the drain deadline", "err", err)
	}
	stopHub()
	wg.Wait()
	if shutdownErr != nil && !errors.Is(shutdownErr, context.DeadlineExceeded) {
		return shutdownErr
	}
	log.Info("stopped")
	return nil
}

// keys hands out the export link keyring the configuration asks for:
// export.signing_keys with export.signing_key, or, when none is configured,
// the key of the data directory (one node, or nodes sharing that directory).
// A keyring is built once per configuration.
type keys struct {
	log   *slog.Logger
	local *export.Keyring
	mu    sync.Mutex
	cfg   *config.Config
	ring  *export.Keyring
}

func newKeys(dataDir string, log *slog.Logger) (*keys, error) {
	k, id, err := export.LocalKey(dataDir)
	if err != nil {
		return nil, fmt.Errorf("export signing key: %w", err)
	}
	local, err := export.NewKeyring(k, id)
	if err != nil {
		return nil, err
	}
	return &keys{log: log, local: local}, nil
}

func (k *keys) For(cfg *config.Config) *export.Keyring {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cfg == k.cfg {
		return k.ring
	}
	k.cfg, k.ring = cfg, k.local
	if ring, current := cfg.SigningKeys(); current != "" {
		r, err := export.NewKeyring(ring, current)
		if err != nil {
			k.log.Warn("export.signing_keys unusable; signing with the data directory's key", "err", err)
		} else {
			k.ring = r
		}
	}
	return k.ring
}

// seedDemo creates the demo users and group when they are missing.
func seedDemo(ctx context.Context, store parley.Store) error {
	users := []parley.NewUser{
		{ID: "ana", Password: "parley-demo", Role: parley.RoleAdmin},
		{ID: "ben", Password: "parley-demo"},
		{ID: "cy", Password: "parley-demo"},
	}
	for _, u := range users {
		if _, err := store.CreateUser(ctx, u); err != nil && parley.ErrorCode(err) != parley.CodeAlreadyExists {
			return err
		}
	}
	ana := parley.Principal{User: "ana", Role: parley.RoleAdmin}
	_, err := store.CreateConversation(ctx, ana, parley.NewConversation{
		ID: "c-team", Kind: parley.KindGroup, Title: "C team", Members: []string{"ana", "ben", "cy"},
	})
	if err != nil && parley.ErrorCode(err) != parley.CodeAlreadyExists {
		return err
	}
	return nil
}

// registerHubMetrics exposes the gateway's counters on /metrics.
func registerHubMetrics(m *metrics.Metrics, hub *gateway.Hub) {
	st := hub.Stats()
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return float64(st.Conns.Load()) })
	for _, c := range []struct {
		name, help string
		v          interface{ Load() int64 }
	}{
		{"parley_ws_pushed_total", "Event frames queued to sockets.", &st.Pushed},
		{"parley_ws_hinted_total", "Hint frames queued to sockets (large groups, slow readers).", &st.Hinted},
		{"parley_ws_kicked_total", "Sockets closed because their send queue was full.", &st.Kicked},
		{"parley_ws_resyncs_total", "Resync frames sent after a bus loss.", &st.Resyncs},
		{"parley_ws_backstops_total", "Conversations the backstop poll found behind.", &st.Backstops},
		{"parley_ws_revoked_total", "Sockets closed because their token stopped working.", &st.Revoked},
	} {
		m.CounterFunc(c.name, c.help, func() float64 { return float64(c.v.Load()) })
	}
}

// limiters hands out the rate-limit store the configuration asks for: the
// local one, or, with the shared_rate_limit switch on and a Redis URL, one
// Redis store per URL (kept across reloads). A Redis URL that does not
// parse falls back to the local store, the old flow.
type limiters struct {
	log   *slog.Logger
	local *ratelimit.Memory
	mu    sync.Mutex
	redis map[string]*ratelimit.Redis
	conns []io.Closer
}

func newLimiters(log *slog.Logger) *limiters {
	redis.SetLogger(redisLog{log})
	return &limiters{log: log, local: ratelimit.NewMemory(ratelimit.MemoryOptions{}), redis: map[string]*ratelimit.Redis{}}
}

func (l *limiters) For(cfg *config.Config) ratelimit.Store {
	url := cfg.RedisURL()
	if url == "" || !cfg.Switch("shared_rate_limit") {
		return l.local
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.redis[url]; ok {
		return r
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		l.log.Warn("rate_limit_store.redis does not parse; limiting per instance", "err", err)
		return l.local
	}
	opt.ContextTimeoutEnabled = true // honour the per-call deadline
	client := redis.NewClient(opt)
	l.conns = append(l.conns, client)
	r := ratelimit.NewRedis(client, ratelimit.RedisOptions{}) // middleware.Limit bounds each call by timeouts.redis
	l.redis[url] = r
	return r
}

func (l *limiters) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// redisLog routes go-redis's own messages (reconnects, pool errors) to the
// server's structured log instead of bare stderr lines.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("redis: " + fmt.Sprintf(format, v...))
}

// warnUnusedBuckets logs the rate_limits keys no route uses: a typo there
// would otherwise leave a limit silently off.
func warnUnusedBuckets(log *slog.Logger, c *config.Config) {
	for _, b := range c.RateLimitBuckets() {
		if !slices.Contains(middleware.Buckets, b) {
			log.Warn("config: rate_limits."+b+" is used by no route: ignored", "buckets", strings.Join(middleware.Buckets, ","))
		}
	}
}
