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
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/export"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/web"
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
	ping         time.Duration
	reauth       time.Duration
	drainTimeout time.Duration
	drainWindow  time.Duration
	bodyTimeout  time.Duration
	secureCookie bool
	logFormat    string
	configPath   string
	exportDir    string
	exportJobs   int
	exportLease  time.Duration
	tokens       tokenFlags
	retention    retentionFlags
	stdout       io.Writer // where --demo says what it created
	adminAddr    string    // --admin-addr: /metrics and /debug/pprof (observe.go)
	bus          string    // --bus (bus.go)
	heapFloorMiB int       // --heap-floor (heapfloor.go)
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := serveFlags{stdout: stdout}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.storeFlags.register(fs)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	fs.BoolVar(&f.demo, "demo", false, "create demo users ana (admin), ben, cy (password parley-demo) and group c-team when missing")
	fs.StringVar(&f.origins, "origins", "", "comma-separated browser origins (https://app.example.com, or host patterns like *.example.com) allowed to open /ws and make state-changing API requests besides the server's own")
	fs.IntVar(&f.hintMembers, "hint-members", 1000, "conversations with more members get hints instead of event pushes")
	fs.IntVar(&f.queue, "send-queue", 0, "deprecated and ignored: the send queue is bounded in bytes (--send-budget)")
	fs.IntVar(&f.sendBudget, "send-budget", gateway.DefaultSendBudget, "bytes queued per socket: over it the socket's requests wait and its pushes become hints, then close it")
	fs.IntVar(&f.userSockets, "user-sockets", gateway.DefaultMaxUserSockets, "open WebSocket connections per user on this gateway; more are refused with 429 RATE_LIMITED")
	fs.DurationVar(&f.backstop, "backstop", 5*time.Second, "how often the heads of watched conversations are polled")
	fs.DurationVar(&f.pushLinger, "push-linger", gateway.DefaultLinger, "how long a push may wait for sends being committed to the same conversations, to leave in one write with them (0: never)")
	fs.DurationVar(&f.ping, "ping", 30*time.Second, "WebSocket keepalive interval")
	fs.DurationVar(&f.reauth, "reauth", time.Minute, "how often open sockets' tokens are checked again (logged out, disabled)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", DefaultDrainTimeout, "how long SIGTERM waits for requests and sockets to finish, after the drain window")
	fs.DurationVar(&f.drainWindow, "drain-window", DefaultDrainWindow, "after SIGTERM, how long the server keeps listening with /readyz and new upgrades answered 503 (so a load balancer sees it not ready, not a refused connection) before it stops accepting; a second signal ends it early")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", middleware.DefaultBodyTimeout, "how long a request body may take to arrive before the request is answered 408 and its connection closed (WebSockets and downloads are not bounded by it)")
	fs.BoolVar(&f.secureCookie, "secure-cookie", false, "name the session cookie __Host-parley_session and mark it Secure (the server is reached over TLS, e.g. behind a TLS-terminating proxy)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.configPath, "config", "", "policy file (YAML, hot-reloaded: rate limits, access modes, permissions, timeouts); empty: the documented defaults")
	fs.StringVar(&f.exportDir, "export-dir", "", "where export shards and artifacts are written, shared by every gateway of a cluster: required with a PostgreSQL store; empty (SQLite only): DATA-DIR/exports")
	fs.IntVar(&f.exportJobs, "export-workers", 2, "export jobs this process runs at once (0: run none here)")
	fs.DurationVar(&f.exportLease, "export-lease", 30*time.Second, "how long an export job stays claimed by a worker that stopped renewing it (a crashed one) before another takes it over")
	f.tokens.register(fs)
	f.retention.register(fs)
	fs.StringVar(&f.bus, "bus", "", busHelp)
	fs.StringVar(&f.adminAddr, "admin-addr", "", "operators' listener for /metrics and /debug/pprof/ (port 0 picks a free port); when set, /metrics leaves the main listener; empty: /metrics on the main listener, no profiler")
	fs.IntVar(&f.heapFloorMiB, "heap-floor", DefaultHeapFloorMiB, "MiB: while the live heap is smaller, the garbage collector waits for the heap to reach this size (fewer collections under load for at most this much memory; 0: the runtime's GOGC pacing alone)")
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
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
	if f.exportJobs < 0 {
		return usagef("--export-workers %d: want 0 or more", f.exportJobs)
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
	if f.sendBudget < 4096 {
		return usagef("--send-budget %d: want at least 4096 bytes", f.sendBudget)
	}
	if f.userSockets < 1 {
		return usagef("--user-sockets %d: want at least 1", f.userSockets)
	}
	if f.exportDir == "" {
		f.exportDir = filepath.Join(f.dataDir, "exports")
	}
	// The browser app is part of the binary: a broken one (an import
	// cycle, a missing module) stops the start here, not a user's page.
	site, err := web.New()
	if err != nil {
		return err
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
	if f.queue != 0 {
		log.Warn("--send-queue is ignored: the send queue is bounded in bytes by --send-budget")
	}
	if spec := getenv("PARLEY_FAULTS"); spec != "" {
		if err := fault.Arm(spec); err != nil {
			return usagef("PARLEY_FAULTS: %v", err)
		}
		log.Warn("fault points armed (lab setting)", "faults", spec)
	}

	defer processHeapFloor.start(uint64(f.heapFloorMiB) << 20)()
	m := metrics.New(metrics.Options{Log: log})
	var cfg *config.Watcher
	cfg, err = config.NewWatcher(f.configPath, config.WatcherOptions{Log: log, OnReload: func(ok bool) {
		m.ConfigReload(ok)
		if ok {
			warnUnusedBuckets(log, cfg.Current())
		}
	}})
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	warnUnusedBuckets(log, cfg.Current())

	kind, err := storeKind(f.dsn())
	if err != nil {
		return err
	}
	if err := checkBus(f.bus, kind); err != nil {
		return err
	}
	// SQLite is a file of this host: a store that does not open is a
	// fault to report at once. PostgreSQL may be down while the gateway
	// starts: then the server listens at once and waits for it below.
	var store parley.Store
	if kind == "sqlite" {
		store, err = f.openSeeded(ctx)
	} else {
		store, err = f.firstAttempt(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil: // SIGTERM before it listened
			return nil
		case postgres.Unreachable(err):
			log.Warn("store unreachable; listening while it is retried", "err", err)
			store, err = nil, nil
		}
	}
	if err != nil {
		return err
	}
	if store != nil {
		defer store.Close()
	}

	// Bind before serving, so a taken port fails here, synchronously.
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	admin, err := startAdmin(f.adminAddr, m, stdout, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer admin.Close()
	front := &swapHandler{}
	// Headers must arrive within ReadHeaderTimeout, bodies within
	// --body-timeout (a per-request deadline: http.Server.ReadTimeout would
	// also cut hijacked WebSockets). No WriteTimeout: a large export
	// download takes as long as the client needs; sockets have their own
	// write deadlines.
	srv := &http.Server{
		Handler:           middleware.BodyDeadline(func() time.Duration { return f.bodyTimeout })(front),
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	defer srv.Close() // on the error paths below; after a drain it is a no-op
	serveErr := make(chan error, 1)
	serving := false
	startServing := func() {
		serving = true
		go func() { serveErr <- srv.Serve(ln) }()
		fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	}
	if store == nil {
		// Until the store opens: /healthz 200, everything else 503
		// UNAVAILABLE (readiness included).
		front.set(httpapi.NewStarting())
		startServing()
		log.Info("parley listening; waiting for the store", "addr", ln.Addr().String(), "store", kind)
		store, err = openWhenReachable(ctx, log, f.openSeeded)
		if err != nil {
			if ctx.Err() != nil { // SIGTERM while the database was down
				sctx, cancel := context.WithTimeout(context.Background(), f.drainTimeout)
				defer cancel()
				srv.Shutdown(sctx)
				log.Info("stopped before the store opened")
				return nil
			}
			return err
		}
		defer store.Close()
	}

	registerSendMetrics(m, store)
	store = instrument(m, store)
	bus, err := newBus(f.bus, kind, f.dsn(), log)
	if err != nil {
		return err
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
		HintMembers: f.hintMembers, SendBudget: f.sendBudget, MaxUserSockets: f.userSockets, Backstop: f.backstop, Linger: lingerOption(f.pushLinger),
		PingEvery: f.ping, Reauth: f.reauth, OriginPatterns: origins, SecureCookie: f.secureCookie,
		Limit: func(ctx context.Context, bucket, user string) (bool, time.Duration) {
			d, err := middleware.Limit(ctx, limiter(), cfg.Current(), bucket, user)
			if err != nil {
				log.Warn("rate limit store failed; allowing", "bucket", bucket, "err", err)
			}
			return d.Allowed, d.RetryAfter
		},
		OnAccount: ident.ForgetUser,
		Metrics:   m,
		Timeout:   func() time.Duration { return cfg.Current().StoreTimeout() },
	})
	registerHubMetrics(m, hub)
	keys, err := newKeys(f.dataDir, store, func() time.Duration { return cfg.Current().StoreTimeout() }, log)
	if err != nil {
		return err
	}
	worker := export.NewWorker(export.Options{
		Store: store, Dir: f.exportDir, Log: log, Config: cfg.Current, Workers: f.exportJobs, Lease: f.exportLease,
		Attempt: m.ExportAttempt,
	})
	registerExportMetrics(m, worker, store)
	download := &export.Download{
		Store: store, Dir: f.exportDir, Log: log, Metrics: m,
		Keys:    func() *export.Keyring { return keys.For(cfg.Current()) },
		Timeout: func() time.Duration { return cfg.Current().StoreTimeout() },
	}
	api := httpapi.NewHandler(httpapi.Deps{
		ExportLink: func(job, user string, exp time.Time) string {
			if ring := keys.For(cfg.Current()); ring != nil {
				return ring.Link(job, user, exp)
			}
			return "" // the store's key could not be read: no link this time
		},
		KickExports: worker.Kick, Download: download,
		Store: store, Gateway: hub, Log: log, Config: cfg.Current, Identifier: ident, Limiter: limiter,
		Metrics: m, Publish: hub.Publish, Draining: hub.Draining, Revoke: hub.RevokeToken,
		RevokeUser: hub.RevokeUser, SecureCookie: f.secureCookie, Origins: origins,
		MetricsElsewhere: f.adminAddr != "",
		Web:              site,
	})

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
	wg.Go(func() { f.retention.run(hubCtx, store, cfg.Current().StoreTimeout, log, m) })
	if f.exportJobs > 0 {
		wg.Go(func() {
			if err := worker.Run(hubCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("export worker stopped", "err", err)
			}
		})
	}
	front.set(api)
	if !serving {
		startServing()
	}
	log.Info("parley serving", "addr", ln.Addr().String(), "store", kind)

	select {
	case err := <-serveErr:
		stopHub()
		wg.Wait()
		return err
	case <-ctx.Done():
	}

	// Graceful drain, first the drain window: goaway to every socket once
	// accepted requests are answered, while the listener stays open:
	// /readyz and new upgrades answer 503 UNAVAILABLE with Retry-After (a
	// load balancer sees a gateway that is not ready, never a refused
	// connection) and other requests are still served, each on a
	// connection closed after its response. A second signal ends the
	// window early. Then, within --drain-timeout: stop accepting, finish
	// in-flight HTTP requests, close the sockets after their queues are
	// written, and stop the fan-out and the store (in reverse order of
	// construction).
	log.Info("draining", "window", f.drainWindow.String(), "timeout", f.drainTimeout.String())
	hub.Drain()
	srv.SetKeepAlivesEnabled(false)
	waitDrainWindow(log, f.drainWindow, serveErr)
	dctx, cancel := context.WithTimeout(context.Background(), f.drainTimeout)
	defer cancel()
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

// The demo data of serve --demo (SPEC §8).
const (
	demoPassword = "parley-demo"
	demoGroup    = "c-team"
)

// seedDemo creates the demo users and group when they are missing and
// returns one line per item saying whether it was created now. It looks
// before it writes: an insert that fails on a duplicate key is an ERROR in
// PostgreSQL's log, and a restart with --demo must log none. (Two gateways
// starting at once may both find an item missing; the loser's
// ALREADY_EXISTS is taken as "already there".)
func seedDemo(ctx context.Context, store parley.Store) ([]string, error) {
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
// stores batch concurrent sends (parley.SendQueue).
func registerSendMetrics(m *metrics.Metrics, store parley.Store) {
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
