package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/postgres"
)

// violations collects what a correct client must never see during an
// outage: a terminal answer to a request the server never judged.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.list = append(v.list, fmt.Sprintf(format, args...))
}

func (v *violations) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.list {
		t.Error(s)
	}
}

// httpSender posts to g1 over HTTP the way a client following
// docs/protocol.md does: each key is retried, with the same Idempotency-Key,
// after 503 or 429 (waiting Retry-After) or a transport error, until it is
// answered 2xx; any other answer is terminal and recorded as a violation.
type httpSender struct {
	base, token string
	bad         *violations
	unavailable atomic.Int64 // 503 answers seen
}

func (s *httpSender) sendUntilDone(ctx context.Context, key string) bool {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/convs/g1/messages", strings.NewReader(`{"body":"`+key+`"}`))
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", strconv.Quote(key))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		var p struct{ Code parley.Code }
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			return true
		case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
			if resp.StatusCode == http.StatusServiceUnavailable {
				s.unavailable.Add(1)
			}
			wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || wait < 1 {
				s.bad.add("HTTP %s: %d without a valid Retry-After (%q)", key, resp.StatusCode, resp.Header.Get("Retry-After"))
				wait = 1
			}
			sleepCtx(ctx, time.Duration(wait)*time.Second)
		default:
			s.bad.add("HTTP %s: terminal %d %s during the outage", key, resp.StatusCode, p.Code)
			return false
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// TestPostgresOutage: PostgreSQL stops at once (pg_ctl stop -m immediate)
// under a gateway while clients send over HTTP and over WebSocket (the Go
// client library and its outbox). While it is down no request gets a
// terminal answer — HTTP only 2xx, 503 or 429; no socket is refused or
// ended with a terminal code; the client library ends no item — and once
// it is back every item commits exactly once.
func TestPostgresOutage(t *testing.T) {
	pg := newCluster(t)
	pg.Start()
	ctx := context.Background()
	s, err := postgres.Open(ctx, pg.DSN, parley.Options{Secrets: testSealer(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tok := seed(t, s, "ana/phone", "ana/http1", "ben/http2")
	p := serveEnv(t, nil, "--db", pg.DSN, "--data-dir", t.TempDir(), "--reauth", "200ms")

	bad := &violations{}
	c, err := client.Open(ctx, client.Options{
		URLs: []string{p.ws}, Token: tok["ana/phone"], Outbox: filepath.Join(t.TempDir(), "ana.outbox"),
		BackoffBase: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond, RequestTimeout: 5 * time.Second,
		OnOutcome: func(it client.Item) {
			if it.Code != "" {
				bad.add("WS item %q ended with %s", it.Body, it.Code)
			}
		},
		OnDisconnect: func(_ string, err error) {
			if client.IsTerminal(err) {
				bad.add("WS connection ended with a terminal error: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(rctx) }()
	t.Cleanup(func() { stopRun(); <-runErr; c.Close() })

	// Senders run until stop; each finishes the key it holds.
	stop := make(chan struct{})
	sctx, cancelSenders := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSenders()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var keys []string // HTTP keys answered 2xx
	var items []client.Item
	senders := []*httpSender{
		{base: p.http, token: tok["ana/http1"], bad: bad},
		{base: p.http, token: tok["ben/http2"], bad: bad},
	}
	for i, hs := range senders {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("http%d-%d", i, n)
				if !hs.sendUntilDone(sctx, key) {
					return
				}
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
				sleepCtx(sctx, 30*time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			it, err := c.Enqueue(sctx, "g1", "ws-"+strconv.Itoa(n))
			if err != nil {
				bad.add("Enqueue: %v", err)
				return
			}
			mu.Lock()
			items = append(items, it)
			mu.Unlock()
		}
	})

	time.Sleep(time.Second) // traffic flows
	pg.Crash()
	// Longer than the identity cache keeps a lookup (5s): tokens are looked
	// up again while the store is down.
	time.Sleep(7 * time.Second)
	pg.Start()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	// Every WebSocket item ends, committed.
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for _, it := range items {
		got, err := c.Wait(wctx, it.CMID)
		if err != nil || got.Code != "" {
			t.Fatalf("WS item %q: %+v, %v", it.Body, got, err)
		}
	}
	select {
	case err := <-runErr:
		t.Fatalf("the client's Run ended during the outage: %v", err)
	default:
	}
	bad.check(t)
	var unavailable int64
	for _, hs := range senders {
		unavailable += hs.unavailable.Load()
	}
	if unavailable == 0 {
		t.Error("no HTTP request was answered 503: the outage was not exercised")
	}
	if sctx.Err() != nil {
		t.Fatal("the HTTP senders did not finish their keys in time")
	}

	// Exactly one row per key and per cmid.
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT cmid, count(*) FROM events WHERE conv_id = 'g1' AND kind = 'message' GROUP BY cmid`)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for rows.Next() {
		var cmid string
		var n int64
		if err := rows.Scan(&cmid, &n); err != nil {
			t.Fatal(err)
		}
		stored[cmid] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := append([]string{}, keys...)
	for _, it := range items {
		want = append(want, it.CMID)
	}
	for _, k := range want {
		if stored[k] != 1 {
			t.Errorf("%s stored %d times, want 1", k, stored[k])
		}
	}
	if len(stored) != len(want) {
		t.Errorf("%d distinct request keys stored, want %d", len(stored), len(want))
	}
	t.Logf("%d HTTP keys, %d WS items, %d answers of 503 during the outage", len(keys), len(items), unavailable)
}

// TestServeWaitsForPostgres: `parley serve` started while its PostgreSQL is
// down stays up — /healthz 200, /readyz 503, the API, login and the /ws
// upgrade 503 UNAVAILABLE with Retry-After — retries the store with backoff
// (logged at warn), and serves once the database is up. SIGTERM while it
// waits exits 0 at once. A store that cannot work whatever the wait (a
// missing database, a broken SQLite path) still fails at start.
func TestServeWaitsForPostgres(t *testing.T) {
	pg := newCluster(t) // initialised, not started
	dir := t.TempDir()

	t.Run("SIGTERM while waiting", func(t *testing.T) {
		p := serveEnv(t, nil, "--db", pg.DSN, "--data-dir", dir)
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.waitExit(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM while the store was down: exit %v, want 0\n%s", err, p.stderr())
		}
	})

	p := serveEnv(t, nil, "--db", pg.DSN, "--data-dir", dir)
	get := func(path, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, p.http+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	wantUnavailable := func(what string, resp *http.Response) {
		t.Helper()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s while the store is down: %d, Retry-After %q, %s; want 503 problem with Retry-After",
				what, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
		}
	}
	if resp := get("/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz while the store is down: %d, want 200", resp.StatusCode)
	}
	wantUnavailable("/readyz", get("/readyz", ""))
	wantUnavailable("GET /api/convs", get("/api/convs", "some-token"))
	resp, err := http.Post(p.http+"/api/login", "application/json", strings.NewReader(`{"login":"ana","password":"password-ana","device_id":"d","install_id":"i"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantUnavailable("POST /api/login", resp)
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ws, resp, err := websocket.Dial(dctx, p.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer some-token"}}}); err == nil {
		ws.CloseNow()
		t.Error("the /ws upgrade succeeded while the store is down")
	} else if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the /ws upgrade while the store is down: %v, %+v; want 503", err, resp)
	}
	// Let it retry a few times, then bring the database up.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.stderr(), "store unreachable; retrying") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no retries logged:\n%s", p.stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(p.stderr(), "level=WARN msg=\"store unreachable; retrying\"") {
		t.Errorf("retries are not logged at warn:\n%s", p.stderr())
	}
	pg.Start()
	deadline = time.Now().Add(20 * time.Second)
	for get("/readyz", "").StatusCode != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after the database came up\n%s", p.stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	s, err := postgres.Open(context.Background(), pg.DSN, parley.Options{Secrets: testSealer(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seed(t, s)
	resp, err = http.Post(p.http+"/api/login", "application/json", strings.NewReader(`{"login":"ana","password":"password-ana","device_id":"d","install_id":"i"}`))
	if err != nil {
		t.Fatal(err)
	}
	var login struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login once the store is up: %d", resp.StatusCode)
	}
	send := &httpSender{base: p.http, token: login.Token, bad: &violations{}}
	sctx, cancelSend := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelSend()
	if !send.sendUntilDone(sctx, "after-start") {
		t.Fatal("a send never succeeded once the store was up")
	}
	send.bad.check(t)
	if n := count(messages(t, s), "after-start"); n != 1 {
		t.Errorf("the send is stored %d times, want 1", n)
	}

	// What waiting cannot mend fails at start, with exit status 1.
	notADir := filepath.Join(dir, "not-a-dir") // a file where a directory should be
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{
		strings.Replace(pg.DSN, "/postgres?", "/no_such_database?", 1),
		"sqlite:" + filepath.Join(notADir, "parley.db"),
	} {
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := run(ctx, []string{"parley", "serve", "--addr", "127.0.0.1:0", "--db", db, "--data-dir", dir}, func(string) string { return "" }, strings.NewReader(""), &out, &out)
		expired := ctx.Err()
		cancel()
		if err == nil || expired != nil {
			t.Errorf("serve --db %s: %v (ctx %v), want a failure at start\n%s", db, err, expired, out.String())
		}
	}
}
