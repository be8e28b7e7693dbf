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
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/export"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/thumb"
	"github.com/parleychat/parley/upload"
	"github.com/parleychat/parley/web"
	"github.com/parleychat/parley/webpush"
	"github.com/redis/go-redis/v9"
)

type serveFlags struct {
	storeFlags
	addr         string
	demo         bool
	origins      string
	hintMembers  int
	queue        int
	sendBudget   int
	userSockets  int
	backstop     time.Duration
	pushLinger   time.Duration
	presenceTTL  time.Duration
	ping         time.Duration
	reauth       time.Duration
	drainTimeout time.Duration
	drainWindow  time.Duration
	bodyTimeout  time.Duration
	secureCookie bool
	logFormat    string
	configPath   string
	exportDir    string
	files        fileFlags
	exportJobs   int
	exportLease  time.Duration
	tokens       tokenFlags
	retention    retentionFlags
	collect      collectFlags // the file collector (collect.go)
	push         pushFlags    // the Web Push worker (push.go)
	stdout       io.Writer    // where --demo says what it created
	adminAddr    string       // --admin-addr: /metrics and /debug/pprof (observe.go)
	bus          string       // --bus (bus.go)
	heapFloorMiB int          // --heap-floor (heapfloor.go)
}

// runServe is `parley serve`: parse, build, run, drain. Everything it
// builds that needs closing is closed in reverse order of construction
// (server.close); the drain, bounded by --drain-timeout, comes first.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f, err := parseServe(args, getenv, stdout)
	if err != nil {
		return err
	}
	s := &server{f: f, stdout: stdout}
	defer s.close()
	api, err := s.build(ctx, getenv, stderr)
	if err == nil {
		err = s.run(ctx, api)
	}
	if errors.Is(err, errStopped) {
		return nil
	}
	return err
}

// errStopped ends serve without an error before it served: the signal
// came while the store was being opened.
var errStopped = errors.New("stopped before the store opened")

// parseServe reads serve's flags (and their PARLEY_* variables) and checks
// them.
func parseServe(args []string, getenv func(string) string, stdout io.Writer) (*serveFlags, error) {
	f := &serveFlags{stdout: stdout}
	fs := f.flagSet()
	if err := parseFlags(fs, args, getenv); err != nil {
		return nil, err
	}
	if err := f.check(fs); err != nil {
		return nil, err
	}
	if f.exportDir == "" {
		f.exportDir = filepath.Join(f.dataDir, "exports")
	}
	if f.files.dir == "" {
		f.files.dir = filepath.Join(f.dataDir, "files")
	}
	return f, nil
}

func (f *serveFlags) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.storeFlags.register(fs)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	fs.BoolVar(&f.demo, "demo", false, "create demo users ana (admin), ben, cy (password parley-demo) and group c-team when missing; only with a loopback --addr")
	fs.StringVar(&f.origins, "origins", "", "comma-separated browser origins (https://app.example.com, or host patterns like *.example.com) allowed to open /ws and make state-changing API requests besides the server's own")
	fs.IntVar(&f.hintMembers, "hint-members", 1000, "conversations with more members get hints instead of event pushes")
	fs.IntVar(&f.queue, "send-queue", 0, "deprecated and ignored: the send queue is bounded in bytes (--send-budget)")
	fs.IntVar(&f.sendBudget, "send-budget", gateway.DefaultSendBudget, "bytes queued per socket: over it the socket's requests wait and its pushes become hints, then close it")
	fs.IntVar(&f.userSockets, "user-sockets", gateway.DefaultMaxUserSockets, "open WebSocket connections per user on this gateway; more are refused with 429 RATE_LIMITED")
	fs.DurationVar(&f.backstop, "backstop", 5*time.Second, "how often the heads of watched conversations are polled")
	fs.DurationVar(&f.pushLinger, "push-linger", gateway.DefaultLinger, "how long a push may wait for sends being committed to the same conversations, to leave in one write with them (0: never)")
	fs.DurationVar(&f.presenceTTL, "presence-ttl", parley.DefaultPresenceTTL, "how long a gateway's presence leases last unless renewed: a gateway that dies leaves its users online for about this long")
	fs.DurationVar(&f.ping, "ping", 30*time.Second, "WebSocket keepalive interval")
	fs.DurationVar(&f.reauth, "reauth", time.Minute, "how often open sockets' tokens are checked again (logged out, disabled)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", DefaultDrainTimeout, "how long SIGTERM waits for requests and sockets to finish, after the drain window")
	fs.DurationVar(&f.drainWindow, "drain-window", DefaultDrainWindow, "after SIGTERM, how long the server keeps listening with /readyz and new upgrades answered 503 (so a load balancer sees it not ready, not a refused connection) before it stops accepting; a second signal ends it early")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", middleware.DefaultBodyTimeout, "how long a request body may take to arrive before the request is answered 408 and its connection closed (WebSockets and downloads are not bounded by it)")
	fs.BoolVar(&f.secureCookie, "secure-cookie", false, "name the session cookie __Host-parley_session and mark it Secure (the server is reached over TLS, e.g. behind a TLS-terminating proxy)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.configPath, "config", "", "policy file (YAML, hot-reloaded: rate limits, access modes, permissions, timeouts); empty: the documented defaults")
	fs.StringVar(&f.exportDir, "export-dir", "", "where export shards and artifacts are written, shared by every gateway of a cluster: required with a PostgreSQL store; empty (SQLite only): DATA-DIR/exports")
	f.files.register(fs)
	fs.IntVar(&f.exportJobs, "export-workers", 2, "export jobs this process runs at once (0: run none here)")
	fs.DurationVar(&f.exportLease, "export-lease", 30*time.Second, "how long an export job stays claimed by a worker that stopped renewing it (a crashed one) before another takes it over")
	f.tokens.register(fs)
	f.retention.register(fs)
	f.collect.register(fs)
	f.push.register(fs)
	fs.StringVar(&f.bus, "bus", "", busHelp)
	fs.StringVar(&f.adminAddr, "admin-addr", "", "operators' listener for /metrics and /debug/pprof/ (port 0 picks a free port); when set, /metrics leaves the main listener; empty: /metrics on the main listener, no profiler")
	fs.IntVar(&f.heapFloorMiB, "heap-floor", DefaultHeapFloorMiB, "MiB: while the live heap is smaller, the garbage collector waits for the heap to reach this size (fewer collections under load for at most this much memory; 0: the runtime's GOGC pacing alone)")
	return fs
}

// check refuses flag values serve cannot run with, before anything opens.
func (f *serveFlags) check(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if f.heapFloorMiB < 0 || f.heapFloorMiB > 1<<20 {
		return usagef("--heap-floor %d: want 0 to 1048576 MiB", f.heapFloorMiB)
	}
	if err := f.tokens.check(); err != nil {
		return err
	}
	if err := f.retention.check(); err != nil {
		return err
	}
	if err := f.collect.check(); err != nil {
		return err
	}
	if f.exportJobs < 0 {
		return usagef("--export-workers %d: want 0 or more", f.exportJobs)
	}
	if f.push.delay < 0 || f.push.delay > time.Hour {
		return usagef("--push-delay %s: want 0 to 1h", f.push.delay)
	}
	if f.drainWindow < 0 {
		return usagef("--drain-window %s: want 0 or more", f.drainWindow)
	}
	if f.bodyTimeout <= 0 {
		return usagef("--body-timeout %s: want more than 0", f.bodyTimeout)
	}
	if f.exportLease < 100*time.Millisecond {
		return usagef("--export-lease %s: want at least 100ms", f.exportLease)
	}
	if err := requireSharedExportDir(fs, f.dsn()); err != nil {
		return err
	}
	if err := f.files.check(fs, f.dsn()); err != nil {
		return err
	}
	if f.sendBudget < 4096 {
		return usagef("--send-budget %d: want at least 4096 bytes", f.sendBudget)
	}
	if f.userSockets < 1 {
		return usagef("--user-sockets %d: want at least 1", f.userSockets)
	}
	if f.demo && !loopbackAddr(f.addr) {
		return usagef("--demo creates accounts with a published password: it runs only on a loopback --addr (127.0.0.1:PORT, [::1]:PORT, localhost:PORT), not %q", f.addr)
	}
	return nil
}

// loopbackAddr reports whether the listen address addr (HOST:PORT) can be
// reached only from this host: a loopback IP, or "localhost". An empty
// host listens on every interface; any other name could resolve anywhere.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// server is what serve builds, in the order of its fields.
type server struct {
	f       *serveFlags
	stdout  io.Writer
	closers []func() // of what is built so far, run last first by close

	log   *slog.Logger
	m     *metrics.Metrics
	cfg   *config.Watcher
	kind  string // of the store: sqlite or postgres
	store parley.Store

	ln       net.Listener
	front    *swapHandler // the starting answers, then the API
	srv      *http.Server
	serveErr chan error // srv.Serve's result, once serving
	serving  bool

	origins  []string
	limiters *limiters
	ident    *middleware.Identifier
	hub      *gateway.Hub
	keys     *keys
	worker   *export.Worker
	blobs    parley.BlobStore // the files' bytes (nil: no file routes, no collector)
	uploads  *upload.Handler
	thumbs   *thumb.Jobs // nil without a blob store
	pusher   *webpush.Worker

	stopBackground func() // ends the goroutines of background, waits for them
	background     sync.WaitGroup
}

// newSite loads the browser app the server hosts: the one embedded in the
// binary (tests of a new release swap in a changed copy).
var newSite = web.New

// build makes the server, each step from what the steps before it made,
// up to the API it is to serve. A store that PostgreSQL cannot open yet is
// waited for while the server already listens (awaitStore).
func (s *server) build(ctx context.Context, getenv func(string) string, stderr io.Writer) (http.Handler, error) {
	// The browser app is part of the binary: a broken one (an import
	// cycle, a missing module) stops the start here, not a user's page.
	site, err := newSite()
	if err != nil {
		return nil, err
	}
	if s.log, err = newServeLog(s.f, getenv, stderr); err != nil {
		return nil, err
	}
	s.f.storeFlags.log, s.f.storeFlags.createKey = s.log, true
	s.onClose(processHeapFloor.start(uint64(s.f.heapFloorMiB) << 20))
	s.m = metrics.New(metrics.Options{Log: s.log})
	if s.cfg, err = newConfigWatcher(s.f.configPath, s.log, s.m); err != nil {
		return nil, err
	}
	if err := s.openStore(ctx); err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	if s.store == nil {
		if err := s.awaitStore(ctx); err != nil {
			return nil, err
		}
	}
	registerSendMetrics(s.m, s.store)
	s.f.collect.registerMetrics(s.m)
	s.store = instrument(s.m, s.store)
	if err := s.newHub(); err != nil {
		return nil, err
	}
	// The blobs first: the export worker reads the files' bytes.
	if s.blobs, err = s.f.files.openBlobs(ctx, getenv); err != nil {
		return nil, err
	}
	if err := s.newExports(); err != nil {
		return nil, err
	}
	s.thumbs = newThumbs(s.blobs, s.log, s.m)
	return s.newAPI(site)
}

// onClose has close call fn, before what was built earlier is closed.
func (s *server) onClose(fn func()) { s.closers = append(s.closers, fn) }

// close closes what build made, in reverse order of construction.
func (s *server) close() {
	for _, fn := range slices.Backward(s.closers) {
		fn()
	}
}

// newServeLog makes serve's log (--log-format) and arms the fault points
// PARLEY_FAULTS names.
func newServeLog(f *serveFlags, getenv func(string) string, stderr io.Writer) (*slog.Logger, error) {
	var handler slog.Handler
	switch f.logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		return nil, usagef("--log-format %q: want text or json", f.logFormat)
	}
	log := slog.New(handler)
	if f.queue != 0 {
		log.Warn("--send-queue is ignored: the send queue is bounded in bytes by --send-budget")
	}
	if f.demo {
		log.Warn("--demo: demo accounts ana, ben and cy have the published password "+demoPassword+"; for a laptop only, never for real users", "addr", f.addr)
	}
	if spec := getenv("PARLEY_FAULTS"); spec != "" {
		if err := fault.Arm(spec); err != nil {
			return nil, usagef("PARLEY_FAULTS: %v", err)
		}
		log.Warn("fault points armed (lab setting)", "faults", spec)
	}
	return log, nil
}

// newConfigWatcher loads the policy file (--config); its reloads are
// counted in m and its unused rate-limit buckets warned of.
func newConfigWatcher(path string, log *slog.Logger, m *metrics.Metrics) (*config.Watcher, error) {
	var cfg *config.Watcher
	cfg, err := config.NewWatcher(path, config.WatcherOptions{Log: log, OnReload: func(ok bool) {
		m.ConfigReload(ok)
		if ok {
			warnUnusedBuckets(log, cfg.Current())
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	warnUnusedBuckets(log, cfg.Current())
	m.GaugeFunc("parley_config_warnings", "Values of the configuration in force that resolved to their safe side (see the log).",
		func() float64 { return float64(cfg.Current().Warnings()) })
	return cfg, nil
}

// openStore opens the store --db names. SQLite is a file of this host: a
// store that does not open is a fault to report at once. PostgreSQL may be
// down while the gateway starts: then s.store stays nil, and the server
// listens at once and waits for it (awaitStore).
func (s *server) openStore(ctx context.Context) error {
	kind, err := storeKind(s.f.dsn())
	if err != nil {
		return err
	}
	if err := checkBus(s.f.bus, kind); err != nil {
		return err
	}
	s.kind = kind
	var store parley.Store
	if kind == "sqlite" {
		store, err = s.f.openSeeded(ctx)
	} else {
		store, err = s.f.firstAttempt(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil: // SIGTERM before it listened
			return errStopped
		case postgres.Unreachable(err):
			s.log.Warn("store unreachable; listening while it is retried", "err", err)
			return nil
		}
	}
	if err != nil {
		return err
	}
	s.store = store
	s.onClose(func() { store.Close() })
	return nil
}

// listen binds the listeners before serving, so a taken port fails here,
// synchronously, and makes the server that will serve the main one.
func (s *server) listen() error {
	ln, err := net.Listen("tcp", s.f.addr)
	if err != nil {
		return err
	}
	admin, err := startAdmin(s.f.adminAddr, s.m, s.stdout, s.log)
	if err != nil {
		ln.Close()
		return err
	}
	s.onClose(admin.Close)
	s.ln, s.front, s.serveErr = ln, &swapHandler{}, make(chan error, 1)
	// Headers must arrive within ReadHeaderTimeout, bodies within
	// --body-timeout (a per-request deadline: http.Server.ReadTimeout would
	// also cut hijacked WebSockets). No WriteTimeout: a large export
	// download takes as long as the client needs; sockets have their own
	// write deadlines.
	s.srv = &http.Server{
		Handler:           middleware.BodyDeadline(func() time.Duration { return s.f.bodyTimeout })(s.front),
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.onClose(func() { s.srv.Close() }) // on the error paths; after a drain it is a no-op
	return nil
}

// startServing serves the listener with whatever handler s.front holds.
func (s *server) startServing() {
	s.serving = true
	go func() { s.serveErr <- s.srv.Serve(s.ln) }()
	fmt.Fprintf(s.stdout, "listening on http://%s\n", s.ln.Addr())
}

// awaitStore serves the starting answers (/healthz 200, everything else,
// readiness included, 503 UNAVAILABLE) while the store is retried, until
// it opens or a signal stops the server (errStopped).
func (s *server) awaitStore(ctx context.Context) error {
	s.front.set(httpapi.NewStarting())
	s.startServing()
	s.log.Info("parley listening; waiting for the store", "addr", s.ln.Addr().String(), "store", s.kind)
	store, err := openWhenReachable(ctx, s.log, s.f.openSeeded)
	if err != nil {
		if ctx.Err() != nil { // SIGTERM while the database was down
			sctx, cancel := context.WithTimeout(context.Background(), s.f.drainTimeout)
			defer cancel()
			s.srv.Shutdown(sctx)
			s.log.Info("stopped before the store opened")
			return errStopped
		}
		return err
	}
	s.store = store
	s.onClose(func() { store.Close() })
	return nil
}

// newHub makes the bus, the rate limiters, the identifier and the gateway
// on them.
func (s *server) newHub() error {
	bus, err := newBus(s.f.bus, s.kind, s.f.dsn(), s.log)
	if err != nil {
		return err
	}
	for _, o := range strings.Split(s.f.origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			s.origins = append(s.origins, o)
		}
	}
	s.limiters = newLimiters(s.log)
	s.onClose(s.limiters.Close)
	s.ident = middleware.NewIdentifier(s.store.Authenticate, middleware.IdentifierOptions{})
	f := s.f
	s.hub = gateway.New(gateway.Options{
		Store: s.store, Bus: bus, Log: s.log,
		HintMembers: f.hintMembers, SendBudget: f.sendBudget, MaxUserSockets: f.userSockets, Backstop: f.backstop, Linger: lingerOption(f.pushLinger),
		PingEvery: f.ping, Reauth: f.reauth, OriginPatterns: s.origins, SecureCookie: f.secureCookie, PresenceTTL: f.presenceTTL,
		Limit:     s.limitFrame,
		OnAccount: s.ident.ForgetUser,
		Metrics:   s.m,
		Timeout:   s.storeTimeout,
		Config:    s.cfg.Current,
	})
	registerHubMetrics(s.m, s.hub)
	return nil
}

// limiter is the rate-limit store the configuration in force selects.
func (s *server) limiter() ratelimit.Store { return s.limiters.For(s.cfg.Current()) }

// limitFrame is the gateway's rate limit of a socket's frames; a failing
// limiter store allows.
func (s *server) limitFrame(ctx context.Context, bucket, user string) (bool, time.Duration) {
	d, err := middleware.Limit(ctx, s.limiter(), s.cfg.Current(), bucket, user)
	if err != nil {
		s.log.Warn("rate limit store failed; allowing", "bucket", bucket, "err", err)
	}
	return d.Allowed, d.RetryAfter
}

// storeTimeout bounds a store call (timeouts.store).
func (s *server) storeTimeout() time.Duration { return s.cfg.Current().StoreTimeout() }

// newExports makes the export link keys and the export worker.
func (s *server) newExports() error {
	keys, err := newKeys(s.f.dataDir, s.store, s.storeTimeout, s.log)
	if err != nil {
		return err
	}
	s.keys = keys
	s.worker = export.NewWorker(export.Options{
		Store: s.store, Dir: s.f.exportDir, Log: s.log, Config: s.cfg.Current, Workers: s.f.exportJobs, Lease: s.f.exportLease,
		Attempt: s.m.ExportAttempt, Blobs: s.blobs,
	})
	registerExportMetrics(s.m, s.worker, s.store)
	return nil
}

// newAPI makes the use cases (app) and the HTTP API on everything built
// before them.
func (s *server) newAPI(site *web.Site) (http.Handler, error) {
	download := &export.Download{
		Store: s.store, Dir: s.f.exportDir, Log: s.log, Metrics: s.m,
		Keys:    func() *export.Keyring { return s.keys.For(s.cfg.Current()) },
		Timeout: s.storeTimeout,
	}
	hub := s.hub
	var uc *app.Service
	s.pusher = newPusher(s.f.push, s.store, func(ctx context.Context) (*webpush.Key, error) { return uc.VAPIDKey(ctx) },
		s.cfg.Current, s.log, s.m)
	uc = app.New(app.Options{
		Store: s.store, Publish: hub.Publish, Revoke: hub, KickExports: s.worker.Kick, Metrics: s.m, Log: s.log,
		Config: s.cfg.Current, Blobs: s.blobs, OnFileReady: s.thumbnail, OnSent: s.pusher.Notify,
	})
	uploads, err := upload.New(upload.Options{
		Service: uc, Dir: s.f.files.stagingDir(), IdleTimeout: s.f.bodyTimeout, StoreTimeout: s.storeTimeout, Log: s.log,
		MaxFileSize: func() int64 { return s.cfg.Current().MaxFileSize() },
	})
	if err != nil {
		return nil, err
	}
	s.uploads = uploads
	registerUploadMetrics(s.m, uploads)
	return httpapi.NewHandler(httpapi.Deps{
		App:        uc,
		ExportLink: s.exportLink,
		Download:   download,
		Store:      s.store, Gateway: hub, Log: s.log, Config: s.cfg.Current, Identifier: s.ident, Limiter: s.limiter,
		Metrics: s.m, Draining: hub.Draining, SecureCookie: s.f.secureCookie, Origins: s.origins,
		MetricsElsewhere: s.f.adminAddr != "",
		Web:              site,
		Uploads:          uploads,
		Demo:             s.demoAccounts(),
	}), nil
}

// demoAccounts names the --demo accounts for the sign-in page; nil
// without --demo.
func (s *server) demoAccounts() *httpapi.DemoAccounts {
	if !s.f.demo {
		return nil
	}
	return &httpapi.DemoAccounts{Users: []string{"ana", "ben", "cy"}, Password: demoPassword}
}

// exportLink signs a download link of job for user, valid until exp; ""
// while the store's key cannot be read.
func (s *server) exportLink(job, user string, exp time.Time) string {
	if ring := s.keys.For(s.cfg.Current()); ring != nil {
		return ring.Link(job, user, exp)
	}
	return "" // the store's key could not be read: no link this time
}

// startBackground starts the goroutines the server owns: the gateway, the
// configuration watcher, the token sweeper, the retention worker, the
// export workers, the build of the search indexes not built yet, the
// file collector and the Web Push worker. stopBackground (or close) ends them and waits for them.
func (s *server) startBackground() {
	ctx, stop := context.WithCancel(context.Background())
	s.stopBackground = func() {
		stop()
		s.background.Wait()
	}
	s.onClose(s.stopBackground)
	s.background.Go(func() {
		if err := s.hub.Run(ctx); err != nil {
			s.log.Error("gateway stopped", "err", err)
		}
	})
	s.background.Go(func() {
		if err := s.cfg.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("configuration watcher stopped", "err", err)
		}
	})
	s.background.Go(func() { sweepTokens(ctx, s.store, s.f.tokens.sweep, sweepBatch, sweepBatches, s.log) })
	s.background.Go(func() { s.f.retention.run(ctx, s.store, s.cfg.Current().StoreTimeout, s.log, s.m) })
	if s.f.exportJobs > 0 {
		s.background.Go(func() {
			if err := s.worker.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("export worker stopped", "err", err)
			}
		})
	}
	s.background.Go(func() { buildPendingSearch(ctx, s.store, s.log) })
	s.background.Go(func() { s.uploads.Run(ctx, uploadSweepEvery) })
	s.background.Go(func() { s.f.collect.run(ctx, s.collector(), s.log) })
	s.background.Go(func() { s.pusher.Run(ctx) })
	if s.thumbs != nil {
		s.background.Go(func() {
			if err := s.thumbs.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("thumbnail jobs stopped", "err", err)
			}
		})
	}
}

// thumbnail asks for the thumbnail of a file that became ready, or whose
// thumbnail was asked for and is missing (a job dropped from a full queue,
// a server stopped before it ran): the jobs make it once, in the
// background.
func (s *server) thumbnail(f parley.File) {
	if s.thumbs != nil {
		s.thumbs.Enqueue(f)
	}
}

// collector is the use cases the file collector runs (nil without a
// blob store).
func (s *server) collector() *app.Service {
	if s.blobs == nil {
		return nil
	}
	return app.New(app.Options{Store: s.store, Blobs: s.blobs, Config: s.cfg.Current, Log: s.log})
}

// run starts the background goroutines and serves api until the listener
// fails or ctx ends (SIGINT, SIGTERM), then drains.
func (s *server) run(ctx context.Context, api http.Handler) error {
	s.startBackground()
	s.front.set(api)
	if !s.serving {
		s.startServing()
	}
	s.log.Info("parley serving", "addr", s.ln.Addr().String(), "store", s.kind)
	select {
	case err := <-s.serveErr:
		s.stopBackground()
		return err
	case <-ctx.Done():
	}
	return s.drain()
}

// drain stops the server gracefully, first the drain window: goaway to
// every socket once accepted requests are answered, while the listener
// stays open: /readyz and new upgrades answer 503 UNAVAILABLE with
// Retry-After (a load balancer sees a gateway that is not ready, never a
// refused connection) and other requests are still served, each on a
// connection closed after its response. A second signal ends the window
// early. Then, within --drain-timeout: stop accepting, finish in-flight
// HTTP requests, close the sockets after their queues are written, and
// stop the fan-out and the other background goroutines; close then closes
// the rest (rate limiters, listeners, store) in reverse order of
// construction.
func (s *server) drain() error {
	s.log.Info("draining", "window", s.f.drainWindow.String(), "timeout", s.f.drainTimeout.String())
	s.hub.Drain()
	s.srv.SetKeepAlivesEnabled(false)
	waitDrainWindow(s.log, s.f.drainWindow, s.serveErr)
	ctx, cancel := context.WithTimeout(context.Background(), s.f.drainTimeout)
	defer cancel()
	shutdownErr := s.srv.Shutdown(ctx)
	if err := s.hub.Shutdown(ctx); err != nil {
		s.log.Warn("sockets still open at the drain deadline", "err", err)
	}
	s.stopBackground()
	if shutdownErr != nil && !errors.Is(shutdownErr, context.DeadlineExceeded) {
		return shutdownErr
	}
	s.log.Info("stopped")
	return nil
}

// DefaultDrainWindow is how long a draining server keeps its listener open
// (--drain-window): long enough for a load balancer checking /readyz every
// few seconds to take it out of rotation.
const DefaultDrainWindow = 5 * time.Second

// DefaultDrainTimeout is how long, after the drain window, in-flight
// requests and sockets get to finish (--drain-timeout). A service manager's
// stop timeout must exceed the two together (docs/parley.service).
const DefaultDrainTimeout = 15 * time.Second

// waitDrainWindow returns when the drain window d has passed, at a second
// SIGINT or SIGTERM (the first one started the drain), or when the listener
// failed (logged; the drain goes on).
func waitDrainWindow(log *slog.Logger, d time.Duration, serveErr <-chan error) {
	if d <= 0 {
		return
	}
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	window := time.NewTimer(d)
	defer window.Stop()
	select {
	case <-window.C:
	case sig := <-again:
		log.Info("drain window ended early", "signal", sig.String())
	case err := <-serveErr:
		log.Warn("listener stopped during the drain window", "err", err)
	}
}

// requireSharedExportDir refuses a PostgreSQL store without an explicit
// --export-dir (flag or PARLEY_EXPORT_DIR). Gateways on one database share
// export jobs: whichever runs a job writes its file, whichever gets the
// download serves it, so they must all see one directory. The default,
// DATA-DIR/exports, is private to each gateway, and a link would then be
// 410 on every gateway but one; only the operator knows the shared path.
func requireSharedExportDir(fs *flag.FlagSet, dsn string) error {
	if kind, err := storeKind(dsn); err != nil || kind != "postgres" {
		return nil // SQLite is one node; a bad --db is reported when opened
	}
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "export-dir" })
	if set {
		return nil
	}
	return usagef("serve: a PostgreSQL store needs --export-dir (or PARLEY_EXPORT_DIR): a directory every gateway of the deployment shares (NFS or another shared volume; with one gateway, any local directory), because export files are written by the gateway that runs the job and downloaded from any gateway")
}

// swapHandler serves the handler set last: the starting answers until the
// store is open, then the API.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// ReadHeaderTimeout is how long a client may take to send a request's
// headers (on a new connection, or the next request on a kept-alive one).
const ReadHeaderTimeout = 10 * time.Second

// keys hands out the export link keyring the configuration asks for:
// export.signing_keys with export.signing_key when configured; otherwise
// the key the store keeps (export.StoreKeyring), which every gateway on the
// database shares, so a link one hands out works on all of them with no
// configuration. The data directory's key, which signed links before the
// store kept one, still verifies. A keyring is built once per
// configuration; the store key is read once, without any lock held, and
// while the store cannot be read there is no keyring (downloads answer
// 503, never a 403 for a link that is good).
type keys struct {
	log     *slog.Logger
	store   export.KeyStore
	timeout func() time.Duration
	local   map[string][]byte

	db atomic.Pointer[export.Keyring] // the store key's ring, once read

	mu   sync.Mutex
	cfg  *config.Config
	ring *export.Keyring // of cfg's signing_keys; nil: none or unusable
}

func newKeys(dataDir string, store export.KeyStore, timeout func() time.Duration, log *slog.Logger) (*keys, error) {
	local, _, err := export.LocalKey(dataDir)
	if err != nil {
		return nil, fmt.Errorf("export signing key: %w", err)
	}
	return &keys{log: log, store: store, timeout: timeout, local: local}, nil
}

// For returns the keyring in force under cfg, or nil while there is none.
func (k *keys) For(cfg *config.Config) *export.Keyring {
	if r := k.configured(cfg); r != nil {
		return r
	}
	if r := k.db.Load(); r != nil {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout())
	defer cancel()
	r, err := export.StoreKeyring(ctx, k.store, k.local)
	if err != nil {
		k.log.Warn("export signing key: the store did not answer; downloads wait for it", "err", err)
		return nil
	}
	k.db.Store(r)
	return r
}

// configured returns the ring of cfg's export.signing_keys, nil when none
// is configured or it is unusable (warned once per configuration).
func (k *keys) configured(cfg *config.Config) *export.Keyring {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cfg == k.cfg {
		return k.ring
	}
	k.cfg, k.ring = cfg, nil
	if ring, current := cfg.SigningKeys(); current != "" {
		r, err := export.NewKeyring(ring, current)
		if err != nil {
			k.log.Warn("export.signing_keys unusable; signing with the store's key", "err", err)
		} else {
			k.ring = r
		}
	}
	return k.ring
}

// The demo data of serve --demo (docs/tour.md).
const (
	demoPassword = "parley-demo"
	demoGroup    = "c-team"
)

// demoStore is what seedDemo needs of the store.
type demoStore interface {
	User(ctx context.Context, login string) (parley.User, error)
	CreateUser(ctx context.Context, u parley.NewUser) (parley.User, error)
	Conversation(ctx context.Context, id string) (parley.Conversation, error)
	CreateConversation(ctx context.Context, p parley.Principal, c parley.NewConversation) (parley.Conversation, error)
}

// seedDemo creates the demo users and group when they are missing and
// returns one line per item saying whether it was created now. It looks
// before it writes: an insert that fails on a duplicate key is an ERROR in
// PostgreSQL's log, and a restart with --demo must log none. (Two gateways
// starting at once may both find an item missing; the loser's
// ALREADY_EXISTS is taken as "already there".)
func seedDemo(ctx context.Context, store demoStore) ([]string, error) {
	users := []parley.NewUser{
		{ID: "ana", Password: demoPassword, Role: parley.RoleAdmin},
		{ID: "ben", Password: demoPassword},
		{ID: "cy", Password: demoPassword},
	}
	var lines []string
	state := func(created bool) string {
		if created {
			return "created"
		}
		return "already there, left as it is"
	}
	for _, u := range users {
		created := false
		_, err := store.User(ctx, u.ID)
		if parley.ErrorCode(err) == parley.CodeNotFound {
			_, err = store.CreateUser(ctx, u)
			created = err == nil
			if parley.ErrorCode(err) == parley.CodeAlreadyExists {
				err = nil
			}
		}
		if err != nil {
			return nil, err
		}
		role := ""
		if u.Role == parley.RoleAdmin {
			role = ", admin"
		}
		lines = append(lines, fmt.Sprintf("demo: user %s (password %s%s): %s", u.ID, demoPassword, role, state(created)))
	}
	created := false
	_, err := store.Conversation(ctx, demoGroup)
	if parley.ErrorCode(err) == parley.CodeNotFound {
		ana := parley.Principal{User: "ana", Role: parley.RoleAdmin}
		_, err = store.CreateConversation(ctx, ana, parley.NewConversation{
			ID: demoGroup, Kind: parley.KindGroup, Title: "C team", Members: []string{"ana", "ben", "cy"},
		})
		created = err == nil
		if parley.ErrorCode(err) == parley.CodeAlreadyExists {
			err = nil
		}
	}
	if err != nil {
		return nil, err
	}
	lines = append(lines, fmt.Sprintf("demo: group %s \"C team\" of ana, ben, cy: %s", demoGroup, state(created)))
	return lines, nil
}

// demoWhere says where serve --demo keeps its data: the store (its
// password hidden) and the data directory, as absolute paths.
func (f *serveFlags) demoWhere() string {
	dsn := f.dsn()
	if file, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		if abs, err := filepath.Abs(file); err == nil {
			dsn = "sqlite:" + abs
		}
	}
	dir, err := filepath.Abs(f.dataDir)
	if err != nil {
		dir = f.dataDir
	}
	return fmt.Sprintf("demo: data in %s (store), %s (data directory)", redact(dsn), dir)
}

// registerSendMetrics exposes the store's group commit on /metrics: both
// stores batch concurrent sends (sendqueue.Queue).
func registerSendMetrics(m *metrics.Metrics, store any) {
	s, ok := store.(interface{ SendStats() (batches, sends int64) })
	if !ok {
		return
	}
	m.CounterFunc("parley_send_batches_total", "Group-commit batches of sends the store committed or failed (one transaction each).",
		func() float64 { b, _ := s.SendStats(); return float64(b) })
	m.CounterFunc("parley_send_batched_total", "Sends those batches held: divided by parley_send_batches_total, the mean batch size.",
		func() float64 { _, n := s.SendStats(); return float64(n) })
}

// registerHubMetrics exposes the gateway's counters on /metrics.
func registerHubMetrics(m *metrics.Metrics, hub *gateway.Hub) {
	st := hub.Stats()
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return float64(st.Conns.Load()) })
	m.GaugeFunc("parley_ws_queued_bytes", "Bytes queued to WebSocket connections, not yet written.", func() float64 { return float64(st.QueuedBytes.Load()) })
	for _, c := range []struct {
		name, help string
		v          interface{ Load() int64 }
	}{
		{"parley_ws_pushed_total", "Event frames queued to sockets.", &st.Pushed},
		{"parley_ws_hinted_total", "Hint frames queued to sockets (large groups, slow readers).", &st.Hinted},
		{"parley_ws_kicked_total", "Sockets closed because a push did not fit in their send budget.", &st.Kicked},
		{"parley_ws_backpressured_total", "Times a socket's requests stopped being read until its send queue drained.", &st.Backpressured},
		{"parley_ws_refused_total", "WebSocket upgrades refused by the per-user socket cap.", &st.Refused},
		{"parley_ws_resyncs_total", "Resync frames sent after a bus loss that polling the store could not cover.", &st.Resyncs},
		{"parley_ws_bus_recoveries_total", "Bus losses covered by polling the store, without resync.", &st.Recovered},
		{"parley_ws_backstops_total", "Conversations the backstop poll found behind.", &st.Backstops},
		{"parley_ws_revoked_total", "Sockets closed because their token stopped working.", &st.Revoked},
		{"parley_ws_carried_total", "Events pushed from the bus notice that carried them, without a store read.", &st.Carried},
		{"parley_ws_member_reads_total", "Fan-out reads of a conversation's membership (no audience kept for it yet, or it was lost).", &st.MemberReads},
		{"parley_ws_waves_total", "Waves of socket writers the fan-out released (pushes queued together, written together).", &st.Waves},
		{"parley_ws_waves_lingered_total", "Waves that waited for sends being committed to the same conversations (--push-linger).", &st.Lingered},
		{"parley_ws_socket_writes_total", "Batches of frames written to sockets, each in one write (pushed over this is frames per write).", &st.SocketWrites},
		{"parley_ws_roster_lost_total", "Kept audiences dropped because the events read could not be followed (a gap, a purge, a new epoch).", &st.RosterLost},
		{metrics.NameBusSent, "Notices this gateway handed to the bus.", &st.NoticesSent},
		{metrics.NameBusReceived, "Notices the bus delivered to this gateway (its own dropped on PostgreSQL and NATS).", &st.NoticesReceived},
	} {
		m.CounterFunc(c.name, c.help, func() float64 { return float64(c.v.Load()) })
	}
	for _, bucket := range gateway.FrameBuckets {
		m.InitRateLimited(bucket, "ws")
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
		if !slices.Contains(ratelimit.Buckets, b) {
			log.Warn("config: rate_limits."+b+" is used by no route: ignored", "buckets", strings.Join(ratelimit.Buckets, ","))
		}
	}
}

// lingerOption is --push-linger as gateway.Options.Linger, where 0 means
// the default: the flag's 0 (or less) means never.
func lingerOption(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
