package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/secretkey"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/web"
	"github.com/parleychat/parley/wire"
)

// The end-to-end tests run the real program as child processes: the test
// binary re-executes itself with PARLEY_E2E_CHILD=1 and then runs main, so
// a child is killed with a real SIGKILL and built with the same flags
// (-race included) as the test.
func TestMain(m *testing.M) {
	if os.Getenv("PARLEY_E2E_CHILD") == "1" {
		if tag := os.Getenv(webReleaseEnv); tag != "" {
			newSite = func() (*web.Site, error) { return releaseSite(tag) }
		}
		main()
		return
	}
	// Every process the tests start (gateways, tools, bench's gateways)
	// gets the same key, as the gateways of one deployment must.
	os.Setenv("PARLEY_SECRET_KEY_FILE", testKeyFile())
	before, err := strayFiles()
	go watchdog(testHangLimit)
	code := m.Run()
	if err == nil && code == 0 {
		code = checkNoStrayFiles(before)
	}
	if keyDir != "" {
		os.RemoveAll(keyDir)
	}
	os.Exit(code)
}

// keyDir holds testKeyFile; removed when the tests end.
var keyDir string

// testKeyFile is the secret key file of every server and tool the tests
// start without naming one: the gateways of one database need the same key
// (docs/operations.md#secret-key), and the tests' databases are served by
// many gateways, one after the other or at once.
var testKeyFile = sync.OnceValue(func() string {
	if state := os.Getenv("PARLEY_BENCH_STATE"); state != "" {
		// A kept benchmark set-up keeps its key: the next run's gateways
		// must open the secrets the first run's sealed.
		path := filepath.Join(state, "secret.key")
		if _, err := os.Stat(path); err == nil {
			return path
		}
		if err := os.MkdirAll(state, 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(path, secretkey.Generate(), 0o600); err != nil {
			panic(err)
		}
		return path
	}
	dir, err := os.MkdirTemp("", "parley-test-key")
	if err != nil {
		panic(err)
	}
	keyDir = dir
	path := filepath.Join(dir, "secret.key")
	if err := os.WriteFile(path, secretkey.Generate(), 0o600); err != nil {
		panic(err)
	}
	return path
})

// testSealer is the Sealer of testKeyFile, for stores the tests open
// beside the servers.
func testSealer(t testing.TB) parley.Sealer {
	t.Helper()
	r, _, err := secretkey.Load(testKeyFile())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// strayFiles lists the files in the work tree that git does not track,
// ignored ones included. A test that starts a server without a temporary
// --data-dir writes parley-data/ (and a signing key) into the package
// directory; comparing this list before and after the run catches it.
func strayFiles() (map[string]bool, error) {
	out, err := exec.Command("git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", "../..").Output()
	if err != nil {
		return nil, err // not a git checkout: nothing to compare
	}
	files := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "?? ") || strings.HasPrefix(line, "!! ") {
			files[line[3:]] = true
		}
	}
	return files, nil
}

// checkNoStrayFiles returns 1, naming them, when the run left new files in
// the work tree: tests write only under t.TempDir().
func checkNoStrayFiles(before map[string]bool) int {
	after, err := strayFiles()
	if err != nil {
		return 0
	}
	var stray []string
	for f := range after {
		if !before[f] {
			stray = append(stray, f)
		}
	}
	if len(stray) == 0 {
		return 0
	}
	sort.Strings(stray)
	fmt.Fprintf(os.Stderr, "FAIL: the test run left files in the work tree (tests write only under t.TempDir()):\n  %s\n", strings.Join(stray, "\n  "))
	return 1
}

// proc is one `parley serve` process.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	http string // http://127.0.0.1:PORT
	ws   string // ws://127.0.0.1:PORT/ws
	// admin is the --admin-addr listener, http://127.0.0.1:PORT ("" when
	// none); its line is printed before the main one.
	admin string
	done  chan struct{}
	err   error // from Wait, once done is closed

	mu  sync.Mutex
	log bytes.Buffer // stderr
}

// serve starts `parley serve` on a free port with the given store and extra
// environment (PARLEY_FAULTS=…), and waits until it is healthy.
func serve(t testing.TB, db, dataDir string, env ...string) *proc {
	t.Helper()
	return serveEnv(t, env, "--db", db, "--data-dir", dataDir)
}

// withExportDir adds the --export-dir and --files-dir a PostgreSQL server
// needs when args name none: DATA-DIR/exports and DATA-DIR/files (the
// SQLite defaults, which the tests read), or a temporary directory.
func withExportDir(t testing.TB, args []string) []string {
	pg, dir := false, ""
	has := map[string]bool{}
	for i, a := range args {
		switch {
		case a == "--export-dir" || a == "--files-dir":
			has[a] = true
		case a == "--db" && i+1 < len(args):
			pg = strings.HasPrefix(args[i+1], "postgres")
		case a == "--data-dir" && i+1 < len(args):
			dir = args[i+1]
		}
	}
	if !pg || has["--export-dir"] && has["--files-dir"] {
		return args
	}
	if dir == "" {
		dir = t.TempDir()
	}
	args = slices.Clone(args)
	if !has["--export-dir"] {
		args = append(args, "--export-dir", filepath.Join(dir, "exports"))
	}
	if !has["--files-dir"] {
		args = append(args, "--files-dir", filepath.Join(dir, "files"))
	}
	return args
}

// serveArgs starts `parley serve` with extra arguments.
func serveArgs(t testing.TB, args ...string) *proc {
	t.Helper()
	return serveEnv(t, nil, args...)
}

// serverBin is the binary serveEnv runs as parley serve: this test binary,
// or another build of this package's tests, named by PARLEY_BENCH_SERVER
// or set by a benchmark comparing builds for a round.
var serverBin = cmp.Or(os.Getenv("PARLEY_BENCH_SERVER"), os.Args[0])

func serveEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	track(t)
	if !slices.Contains(args, "--data-dir") {
		// Never the default ./parley-data: that is the package directory.
		args = append(args, "--data-dir", t.TempDir())
	}
	if !slices.Contains(args, "--secret-key-file") && !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PARLEY_SECRET_KEY_FILE=") }) {
		args = append(args, "--secret-key-file", testKeyFile())
	}
	args = withExportDir(t, args)
	if !slices.Contains(args, "--config") && !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PARLEY_CONFIG=") }) {
		// Tests hammer routes: every rate limit off, said explicitly.
		// A test of the built-in limits passes --config "".
		path := filepath.Join(t.TempDir(), "parley.yaml")
		if err := os.WriteFile(path, []byte("rate_limits: {}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	cmd := exec.Command(serverBin, append([]string{"serve", "--addr", "127.0.0.1:0", "--backstop", "200ms", "--drain-timeout", "10s"}, args...)...)
	cmd.Dir = t.TempDir() // a relative default path lands there, not in the tree
	cmd.Env = append(os.Environ(), append([]string{"PARLEY_E2E_CHILD=1", "PARLEY_FAULTS="}, env...)...)
	p := &proc{t: t, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.log.Write(b)
	})
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("server log:\n%s", p.stderr())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "admin listening on "); ok {
				p.admin = a // before the main line: read once addr is sent
			}
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		p.http = a
		p.ws = "ws" + strings.TrimPrefix(a, "http") + "/ws"
	case <-p.done:
		t.Fatalf("parley serve exited: %v\n%s", p.err, p.stderr())
	case <-time.After(60 * time.Second):
		t.Fatalf("parley serve did not print its address\n%s", p.stderr())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.http + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// kill SIGKILLs the process (if still running) and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// waitLog waits until the process has written want to its stderr.
func (p *proc) waitLog(want string, d time.Duration) {
	p.t.Helper()
	for deadline := time.Now().Add(d); !strings.Contains(p.stderr(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("the server did not log %q within %v\n%s", want, d, p.stderr())
		}
	}
}

// waitExit waits for the process to end by itself.
func (p *proc) waitExit(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.t.Fatalf("process still running after %v\n%s", d, p.stderr())
		return nil
	}
}

// killedBySIGKILL reports whether the process died of SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// backend is a store the server processes share.
type backend struct {
	name string
	db   string // --db
	dir  string // --data-dir
}

// backends returns SQLite and, when PARLEY_TEST_POSTGRES is set,
// PostgreSQL; fn runs once per backend as a parallel subtest.
func backends(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		fn(t, backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, backend{name: "postgres", db: pgtest.DSN(t), dir: t.TempDir()})
	})
}

// store opens the backend's store from the test process, as an operator
// tool would next to the running server.
func (b backend) store(t testing.TB) parley.Store {
	t.Helper()
	var s parley.Store
	var err error
	if b.name == "sqlite" {
		s, err = sqlite.Open(context.Background(), strings.TrimPrefix(b.db, "sqlite:"), parley.Options{Secrets: testSealer(t)})
	} else {
		s, err = postgres.Open(context.Background(), b.db, parley.Options{Secrets: testSealer(t)})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// seed creates ana and ben, their group g1, and a token per device named.
func seed(t *testing.T, s parley.Store, devices ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	for _, u := range []string{"ana", "ben"} {
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateConversation(ctx, parley.Principal{User: "ana"}, parley.NewConversation{ID: "g1", Kind: parley.KindGroup, Title: "g1", Members: []string{"ana", "ben"}}); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, d := range devices { // "ana/phone"
		u, dev, _ := strings.Cut(d, "/")
		sess, err := s.Login(ctx, parley.LoginRequest{Login: u, Password: "password-" + u, DeviceID: dev, InstallID: "i1"})
		if err != nil {
			t.Fatal(err)
		}
		tokens[d] = sess.Token
	}
	return tokens
}

// messages returns the bodies of g1's messages as ben sees them, in order.
func messages(t *testing.T, s parley.Store) []string {
	t.Helper()
	return convBodies(t, s, "ben", "g1")
}

// convBodies returns the bodies of conv's messages as user sees them, in
// order, read page by page from the store.
func convBodies(t *testing.T, s parley.Store, user, conv string) []string {
	t.Helper()
	var bodies []string
	var after int64
	for {
		page, err := s.Sync(context.Background(), parley.Principal{User: user}, parley.SyncRequest{Conv: conv, After: after, Limit: parley.MaxPage})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			if ev.Kind == parley.EventMessage {
				bodies = append(bodies, ev.Body)
			}
		}
		after = page.NextAfter
		if !page.HasMore {
			return bodies
		}
	}
}

func count(bodies []string, body string) int {
	n := 0
	for _, b := range bodies {
		if b == body {
			n++
		}
	}
	return n
}

// recorder is a client.Handler that keeps every event it is given.
type recorder struct {
	client.NopHandler
	mu        sync.Mutex
	events    map[string][]wire.Event
	signal    chan struct{}
	connected chan struct{} // a value per convs list, i.e. per (re)connect
}

func newRecorder() *recorder {
	return &recorder{events: map[string][]wire.Event{}, signal: make(chan struct{}, 1), connected: make(chan struct{}, 100)}
}

func (r *recorder) Convs([]wire.Conv) {
	select {
	case r.connected <- struct{}{}:
	default:
	}
}

// waitConnected waits for the client's next (re)connect.
func (r *recorder) waitConnected(t *testing.T) {
	t.Helper()
	select {
	case <-r.connected:
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not connect")
	}
}

func (r *recorder) Events(conv string, _ int64, evs []wire.Event) {
	r.mu.Lock()
	r.events[conv] = append(r.events[conv], evs...)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// bodies returns the message bodies received for conv.
func (r *recorder) bodies(conv string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events[conv] {
		if ev.Kind == "message" {
			out = append(out, ev.Body)
		}
	}
	return out
}

// waitFor waits until cond holds on what r received.
func (r *recorder) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-r.signal:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// dial opens a client on its own outbox file and runs it until stop is
// called or the test ends.
func dial(t *testing.T, outbox, token string, h client.Handler, urls ...string) (c *client.Client, stop func()) {
	t.Helper()
	c, err := client.Open(context.Background(), client.Options{
		URLs: urls, Token: token, Outbox: outbox, Handler: h,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond,
		RequestTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			c.Close()
		})
	}
	t.Cleanup(stop)
	return c, stop
}

// do sends one raw request and waits for its reply.
func do(t *testing.T, c *client.Client, req wire.Request) (wire.Frame, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Do(ctx, req)
}

func sendReq(cmid, body string) wire.Request {
	return wire.Request{T: wire.TSend, Conv: "g1", CMID: cmid, Body: body}
}

// TestCrash: the server process is SIGKILLed at a fault point during a
// send — before the store's write, with the write done and uncommitted, or
// after the commit — restarted, and the client resends: exactly one row,
// and only the resend after a commit answers dup=true.
func TestCrash(t *testing.T) {
	tests := []struct {
		name  string
		fault string
		dup   bool
	}{
		{"crash_before_insert", "store.before_insert=crash", false},
		{"crash_before_commit", "store.before_commit=crash", false},
		{"crash_after_commit", "api.after_send_commit=crash", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backends(t, func(t *testing.T, b backend) {
				s := b.store(t)
				tok := seed(t, s, "ana/phone")["ana/phone"]
				outbox := filepath.Join(t.TempDir(), "ana.outbox")

				p := serve(t, b.db, b.dir, "PARLEY_FAULTS="+tt.fault)
				c, stop := dial(t, outbox, tok, nil, p.ws)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				it, err := c.Enqueue(ctx, "g1", "crash test")
				if err != nil {
					t.Fatal(err)
				}
				if err := p.waitExit(20 * time.Second); !killedBySIGKILL(err) {
					t.Fatalf("server ended with %v, want death by SIGKILL at the fault point", err)
				}
				if n := count(messages(t, s), "crash test"); n != 0 && !tt.dup {
					t.Fatalf("%d rows after a crash before commit, want 0", n)
				}

				// A new server (no faults) on the same store; a new client
				// process on the same outbox resends the pending item.
				stop()
				p2 := serve(t, b.db, b.dir)
				c2, _ := dial(t, outbox, tok, nil, p2.ws)
				got, err := c2.Wait(ctx, it.CMID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Code != "" || got.Dup != tt.dup || got.Seq != 3 {
					t.Fatalf("resend outcome %+v, want seq 3 dup=%v", got, tt.dup)
				}
				if n := count(messages(t, s), "crash test"); n != 1 {
					t.Fatalf("%d rows, want exactly 1", n)
				}
			})
		})
	}
}

// TestCrashInBatch: group commit under a crash at each store fault point.
// The first send is held at the other point (delay) so three more sends,
// from three other devices, queue behind it and form the next batch; the
// server dies in that batch: before its write, or after its inserts and
// before its commit. After the restart the first send is committed,
// nothing of the crashed batch is, and every resend lands exactly once.
func TestCrashInBatch(t *testing.T) {
	tests := []struct{ name, faults string }{
		{"before_insert", "store.before_commit=delay:800ms@1,store.before_insert=crash@2"},
		{"before_commit", "store.before_insert=delay:800ms@1,store.before_commit=crash@2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			crashInBatch(t, tt.faults)
		})
	}
}

func crashInBatch(t *testing.T, faults string) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		devs := []string{"ana/phone", "ana/tablet", "ben/phone", "ben/tablet"}
		toks := seed(t, s, devs...)
		p := serve(t, b.db, b.dir, "PARLEY_FAULTS="+faults)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		outboxes := make([]string, len(devs))
		stops := make([]func(), len(devs))
		cmids := make([]string, len(devs))
		clients := make([]*client.Client, len(devs))
		for i, d := range devs {
			outboxes[i] = filepath.Join(t.TempDir(), strings.ReplaceAll(d, "/", "-")+".outbox")
			clients[i], stops[i] = dial(t, outboxes[i], toks[d], nil, p.ws)
		}
		it, err := clients[0].Enqueue(ctx, "g1", "batch m0")
		if err != nil {
			t.Fatal(err)
		}
		cmids[0] = it.CMID
		held, _, _ := strings.Cut(faults, "=") // the point m0's batch waits at
		p.waitLog("fault: "+held+": delay", 10*time.Second)
		for i := 1; i < len(devs); i++ {
			it, err := clients[i].Enqueue(ctx, "g1", fmt.Sprintf("batch m%d", i))
			if err != nil {
				t.Fatal(err)
			}
			cmids[i] = it.CMID
		}
		if err := p.waitExit(20 * time.Second); !killedBySIGKILL(err) {
			t.Fatalf("server ended with %v, want death by SIGKILL at the fault point", err)
		}
		if got := messages(t, s); fmt.Sprint(got) != "[batch m0]" {
			t.Fatalf("messages after the crash: %q, want only the first batch's [batch m0]", got)
		}

		for _, stop := range stops {
			stop()
		}
		p2 := serve(t, b.db, b.dir)
		for i, d := range devs {
			c, _ := dial(t, outboxes[i], toks[d], nil, p2.ws)
			got, err := c.Wait(ctx, cmids[i])
			if err != nil {
				t.Fatal(err)
			}
			// m0 committed before the crash: its reply came then, or
			// (lost in the crash) its resend answers dup. The others
			// land new now.
			if got.Code != "" || (got.Dup && i != 0) || (i == 0) != (got.Seq == 3) {
				t.Errorf("outcome of m%d: %+v, want m0 at seq 3, the others new", i, got)
			}
		}
		got := messages(t, s)
		for i := range devs {
			if n := count(got, fmt.Sprintf("batch m%d", i)); n != 1 {
				t.Errorf("batch m%d stored %d times, want once (log %q)", i, n, got)
			}
		}
	})
}

// wantReplay resends req, whose first attempt committed as seq 3, and
// wants the original seq with dup=true and the body stored once.
func wantReplay(t *testing.T, c *client.Client, s parley.Store, req wire.Request) {
	t.Helper()
	f, err := do(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	if *f.Seq != 3 || !*f.Dup {
		t.Fatalf("retry = seq %d dup %v, want seq 3 dup true", *f.Seq, *f.Dup)
	}
	if n := count(messages(t, s), req.Body); n != 1 {
		t.Fatalf("%q stored %d times, want once", req.Body, n)
	}
}

// TestLostReplyRetry: the reply to a committed send never reaches the
// client (it gave up waiting); the resend with the same cmid gets the
// original seq with dup=true, and there is one row.
func TestLostReplyRetry(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		tok := seed(t, s, "ana/phone")["ana/phone"]
		p := serve(t, b.db, b.dir, "PARLEY_FAULTS=api.after_send_commit=delay:1500ms@1")
		c, _ := dial(t, filepath.Join(t.TempDir(), "ana.outbox"), tok, nil, p.ws)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Do(ctx, sendReq("lost-1", "lost reply"))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first send: %v, want no reply in time", err)
		}
		time.Sleep(1500 * time.Millisecond)
		wantReplay(t, c, s, sendReq("lost-1", "lost reply"))
	})
}

// TestUnavailableAfterCommit: the commit is done but the client is told
// UNAVAILABLE; a retry with the same key gets the original seq.
func TestUnavailableAfterCommit(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		tok := seed(t, s, "ana/phone")["ana/phone"]
		p := serve(t, b.db, b.dir, "PARLEY_FAULTS=api.after_send_commit=unavailable@1")
		c, _ := dial(t, filepath.Join(t.TempDir(), "ana.outbox"), tok, nil, p.ws)
		_, err := do(t, c, sendReq("u-1", "unavailable"))
		if parley.ErrorCode(err) != parley.CodeUnavailable || client.IsTerminal(err) {
			t.Fatalf("first send: %v, want retryable UNAVAILABLE", err)
		}
		wantReplay(t, c, s, sendReq("u-1", "unavailable"))
		// Through the outbox the retry is automatic.
		it, err := c.Enqueue(context.Background(), "g1", "second")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if got, err := c.Wait(ctx, it.CMID); err != nil || got.Seq != 4 || got.Dup {
			t.Fatalf("outbox send: %+v, %v", got, err)
		}
		if bodies := messages(t, s); count(bodies, "unavailable") != 1 || count(bodies, "second") != 1 {
			t.Fatalf("rows %q, want each message once", bodies)
		}
	})
}

// TestPublisherDiedAfterCommit: the publish of a committed send is lost
// (bus.publish=drop, as if the publisher died after commit); the backstop
// poll of watched heads still pushes it, on the same gateway and, on
// PostgreSQL, on another one.
func TestPublisherDiedAfterCommit(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		tok := seed(t, s, "ana/phone", "ben/phone", "ben/laptop")
		p := serve(t, b.db, b.dir, "PARLEY_FAULTS=bus.publish=drop")
		watchers := map[string]string{"same gateway": p.ws}
		if b.name == "postgres" {
			watchers["other gateway"] = serve(t, b.db, b.dir).ws
		}
		recs := map[string]*recorder{}
		devices := []string{"ben/phone", "ben/laptop"}
		i := 0
		for name, url := range watchers {
			r := newRecorder()
			dial(t, filepath.Join(t.TempDir(), "ben.outbox"), tok[devices[i]], r, url)
			r.waitConnected(t)
			recs[name] = r
			i++
		}
		ana, _ := dial(t, filepath.Join(t.TempDir(), "ana.outbox"), tok["ana/phone"], nil, p.ws)
		if _, err := do(t, ana, sendReq("p-1", "unpublished")); err != nil {
			t.Fatal(err)
		}
		for name, r := range recs {
			r.waitFor(t, 10*time.Second, name+" push", func() bool { return count(r.bodies("g1"), "unpublished") == 1 })
		}
	})
}

// TestGracefulDrain: SIGTERM while a client sends: the server says goaway,
// answers what it accepted, and exits 0; every send that got its reply is
// stored, and the rest land exactly once on the next server.
func TestGracefulDrain(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		tok := seed(t, s, "ana/phone")["ana/phone"]
		outbox := filepath.Join(t.TempDir(), "ana.outbox")
		p := serve(t, b.db, b.dir)
		c, stop := dial(t, outbox, tok, nil, p.ws)
		const n = 60
		ctx := context.Background()
		var items []client.Item
		for i := range n {
			it, err := c.Enqueue(ctx, "g1", "drain-"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			items = append(items, it)
		}
		// Let some land, then drain mid-stream.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := c.Wait(wctx, items[5].CMID); err != nil {
			t.Fatal(err)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.waitExit(30 * time.Second); err != nil {
			t.Fatalf("drained server exited with %v, want status 0", err)
		}
		stop()
		// Every item that ended before the drain is stored.
		done, err := outcomes(outbox, tok)
		if err != nil {
			t.Fatal(err)
		}
		stored := messages(t, s)
		for _, it := range done {
			if it.Code != "" || count(stored, it.Body) != 1 {
				t.Fatalf("item %q ended %+v but is stored %d times", it.Body, it, count(stored, it.Body))
			}
		}
		// The rest land on the next server, exactly once each.
		p2 := serve(t, b.db, b.dir)
		c2, _ := dial(t, outbox, tok, nil, p2.ws)
		for _, it := range items {
			if got, err := c2.Wait(wctx, it.CMID); err != nil || got.Code != "" {
				t.Fatalf("item %q: %+v, %v", it.Body, got, err)
			}
		}
		stored = messages(t, s)
		for _, it := range items {
			if count(stored, it.Body) != 1 {
				t.Fatalf("%q stored %d times", it.Body, count(stored, it.Body))
			}
		}
		if len(stored) != n {
			t.Fatalf("%d messages stored, want %d", len(stored), n)
		}
	})
}

// outcomes reads the ended items of a client's outbox (the client must be
// stopped).
func outcomes(outbox, token string) ([]client.Item, error) {
	c, err := client.Open(context.Background(), client.Options{Outbox: outbox, Token: token})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Outcomes(context.Background())
}

// TestMultiGateway: two `parley serve` on one PostgreSQL. Pushes cross from
// one to the other; when one is killed its clients reconnect to the other
// and their pending sends land exactly once.
//
// It runs on each bus that joins gateways: LISTEN/NOTIFY (the default on
// PostgreSQL) and NATS (--bus nats://, when PARLEY_TEST_NATS names a
// server).
func TestMultiGateway(t *testing.T) {
	// No backstop poll: pushes across gateways come over the bus only.
	t.Run("listen_notify", func(t *testing.T) { testMultiGateway(t, "PARLEY_BACKSTOP=1h") })
	t.Run("nats", func(t *testing.T) {
		url := os.Getenv("PARLEY_TEST_NATS")
		if url == "" {
			t.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222): the NATS bus is not tested")
		}
		testMultiGateway(t, "PARLEY_BACKSTOP=1h", "PARLEY_BUS="+url)
	})
}

func testMultiGateway(t *testing.T, env ...string) {
	b := backend{name: "postgres", db: pgtest.DSN(t), dir: t.TempDir()}
	s := b.store(t)
	tok := seed(t, s, "ana/phone", "ben/phone")
	a := serve(t, b.db, b.dir, env...)
	bsrv := serve(t, b.db, b.dir, env...)
	benRec := newRecorder()
	dial(t, filepath.Join(t.TempDir(), "ben.outbox"), tok["ben/phone"], benRec, bsrv.ws)
	benRec.waitConnected(t)
	anaRec := newRecorder()
	ana, _ := dial(t, filepath.Join(t.TempDir(), "ana.outbox"), tok["ana/phone"], anaRec, a.ws, bsrv.ws)
	anaRec.waitConnected(t)

	if _, err := do(t, ana, sendReq("x-1", "across")); err != nil {
		t.Fatal(err)
	}
	benRec.waitFor(t, 10*time.Second, "push from the other gateway", func() bool { return count(benRec.bodies("g1"), "across") == 1 })

	// Queue sends and kill ana's gateway under them.
	const n = 30
	ctx := context.Background()
	var items []client.Item
	for i := range n {
		it, err := ana.Enqueue(ctx, "g1", "multi-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
		if i == 3 {
			a.kill()
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, it := range items {
		got, err := ana.Wait(wctx, it.CMID)
		if err != nil || got.Code != "" {
			t.Fatalf("item %q: %+v, %v", it.Body, got, err)
		}
	}
	stored := messages(t, s)
	for _, it := range items {
		if count(stored, it.Body) != 1 {
			t.Fatalf("%q stored %d times", it.Body, count(stored, it.Body))
		}
	}
	// ben, on the surviving gateway, saw every message once, in order.
	benRec.waitFor(t, 20*time.Second, "every message at ben", func() bool { return len(benRec.bodies("g1")) == n+1 })
	got := benRec.bodies("g1")
	if !slices.Equal(got, stored) {
		t.Fatalf("ben saw %q, store has %q", got, stored)
	}
}

// TestHTTPCrash: the HTTP send path under the same crashes as the socket
// path. The server dies (SIGKILL) at the fault point while a POST is in
// flight, so the client gets no answer; a retry with the same
// Idempotency-Key on a restarted server tells it what happened: 201 when the
// first attempt never committed, 200 dup with the same seq when it did, and
// the message is stored once either way.
func TestHTTPCrash(t *testing.T) {
	tests := []struct {
		name   string
		fault  string
		status int
	}{
		{"crash_before_commit", "store.before_commit=crash", http.StatusCreated},
		{"crash_after_commit", "api.after_send_commit=crash", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backends(t, func(t *testing.T, b backend) {
				s := b.store(t)
				tok := seed(t, s, "ana/phone")["ana/phone"]
				post := func(base string) (*http.Response, error) {
					req, _ := http.NewRequest(http.MethodPost, base+"/api/convs/g1/messages", strings.NewReader(`{"body":"http crash"}`))
					req.Header.Set("Authorization", "Bearer "+tok)
					req.Header.Set("Idempotency-Key", `"http-crash-1"`)
					req.Header.Set("Content-Type", "application/json")
					return http.DefaultClient.Do(req)
				}
				p := serve(t, b.db, b.dir, "PARLEY_FAULTS="+tt.fault)
				if resp, err := post(p.http); err == nil {
					resp.Body.Close()
					t.Fatalf("the first POST was answered %d; the server should have died", resp.StatusCode)
				}
				if err := p.waitExit(20 * time.Second); !killedBySIGKILL(err) {
					t.Fatalf("server ended with %v, want death by SIGKILL at the fault point", err)
				}

				p2 := serve(t, b.db, b.dir)
				resp, err := post(p2.http)
				if err != nil {
					t.Fatal(err)
				}
				var f wire.Frame
				json.NewDecoder(resp.Body).Decode(&f)
				resp.Body.Close()
				if resp.StatusCode != tt.status || f.Seq == nil || *f.Seq != 3 || *f.Dup != (tt.status == http.StatusOK) {
					t.Fatalf("retry: %d %+v, want %d with seq 3", resp.StatusCode, f, tt.status)
				}
				if n := count(messages(t, s), "http crash"); n != 1 {
					t.Fatalf("%d rows, want exactly 1", n)
				}
			})
		})
	}
}
