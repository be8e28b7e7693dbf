package webpush_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/webpush"
)

// stores runs fn on SQLite and, when PARLEY_TEST_POSTGRES is set, on
// PostgreSQL.
func stores(t *testing.T, fn func(t *testing.T, st parley.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.Server(t)
		st, err := postgres.Open(context.Background(), pgtest.DSN(t), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
}

// receiver is a push service on 127.0.0.1 (RFC 8030): each path is one
// subscription, whose browser key opens what arrives there. It checks the
// VAPID token and records the hints by path; /gone answers 410.
type receiver struct {
	t    *testing.T
	srv  *httptest.Server
	key  string // the VAPID public key requests must carry
	mu   sync.Mutex
	subs map[string]browser
	got  map[string][]string
	hits int
}

type hint struct {
	Conv string `json:"conv"`
	Seq  int64  `json:"seq"`
}

func newReceiver(t *testing.T, key string) *receiver {
	rc := &receiver{t: t, key: key, subs: map[string]browser{}, got: map[string][]string{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.hits++
	if r.URL.Path == "/gone" {
		w.WriteHeader(http.StatusGone)
		return
	}
	if k, _, err := webpush.VerifyAuthorization(r.Header.Get("Authorization"), "http://"+r.Host, time.Now()); err != nil || k != rc.key {
		rc.t.Errorf("%s: vapid key %q, %v", r.URL.Path, k, err)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	b, ok := rc.subs[r.URL.Path]
	plain, err := webpush.Decrypt(body, b.priv, b.auth)
	var h hint
	if !ok || err != nil || json.Unmarshal(plain, &h) != nil || r.Header.Get("TTL") == "" || len(r.Header.Get("Topic")) > 32 {
		rc.t.Errorf("%s: a push that does not open: %v %q", r.URL.Path, err, plain)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.got[r.URL.Path] = append(rc.got[r.URL.Path], fmt.Sprintf("%s/%d", h.Conv, h.Seq))
	w.WriteHeader(http.StatusCreated)
}

// subscribe makes a browser subscription at path for p.
func (rc *receiver) subscribe(t *testing.T, st parley.Store, p parley.Principal, path string) parley.PushSubscription {
	t.Helper()
	b := newBrowser(t)
	rc.mu.Lock()
	rc.subs[path] = b
	rc.mu.Unlock()
	enc := base64.RawURLEncoding
	s, _, err := st.SavePushSubscription(t.Context(), p, parley.NewPushSubscription{Endpoint: rc.srv.URL + path,
		P256DH: enc.EncodeToString(b.priv.PublicKey().Bytes()), Auth: enc.EncodeToString(b.auth)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (rc *receiver) hints() map[string][]string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string][]string{}
	for k, v := range rc.got {
		out[k] = slices.Clone(v)
	}
	return out
}

func member(t *testing.T, st parley.Store, id, device string) parley.Principal {
	t.Helper()
	if _, err := st.CreateUser(t.Context(), parley.NewUser{ID: id, Password: "password-" + id}); err != nil && parley.ErrorCode(err) != parley.CodeAlreadyExists {
		t.Fatal(err)
	}
	s, err := st.Login(t.Context(), parley.LoginRequest{Login: id, Password: "password-" + id, DeviceID: device, InstallID: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	return s.Principal
}

func worker(t *testing.T, st parley.Store, allow []string) *webpush.Worker {
	t.Helper()
	raw, err := st.PushKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	key, err := webpush.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	w := webpush.NewWorker(webpush.WorkerOptions{
		Store: st, Key: func(context.Context) (*webpush.Key, error) { return key, nil },
		Allow: func() []string { return allow }, Delay: 20 * time.Millisecond, Backoff: 10 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// settle waits until the worker has finished n pushes (sent, failed or
// removed).
func settle(t *testing.T, w *webpush.Worker, n int64) webpush.Counts {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := w.Counts()
		if c.Sent+c.Failed+c.Removed >= n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("pushes did not finish: %+v, want %d", c, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkerPushes: a send is pushed, as a hint the subscription's key
// opens, to the members who should hear of it — not the sender, not a
// device that has the message already, not a former member, a mentions
// level only when mentioned — and a subscription whose push service
// answers 410 is removed.
func TestWorkerPushes(t *testing.T) {
	stores(t, func(t *testing.T, st parley.Store) {
		raw, _ := st.PushKey(t.Context())
		key, _ := webpush.ParseKey(raw)
		rc := newReceiver(t, key.Public())
		ana, ben, cy, dan, eve := member(t, st, "ana", "d1"), member(t, st, "ben", "d1"), member(t, st, "cy", "d1"), member(t, st, "dan", "d1"), member(t, st, "eve", "d1")
		ben2 := member(t, st, "ben", "d2")
		ctx := t.Context()
		if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-team", Kind: parley.KindGroup, Members: []string{"ben", "cy", "dan", "eve"}}); err != nil {
			t.Fatal(err)
		}
		for p, path := range map[parley.Principal]string{ana: "/ana", ben: "/ben", ben2: "/ben2", cy: "/cy", dan: "/dan"} {
			rc.subscribe(t, st, p, path)
		}
		gone := rc.subscribe(t, st, eve, "/gone")
		if _, err := st.SetPushLevel(ctx, cy, "c-team", parley.PushMentions); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RemoveMember(ctx, ana, "c-team", "dan"); err != nil {
			t.Fatal(err)
		}
		w := worker(t, st, []string{"http://127.0.0.1:"})

		s1, err := st.Send(ctx, ana, parley.SendRequest{Conv: "c-team", CMID: "m1", Body: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Ack(ctx, ben2, "c-team", s1.Seq); err != nil {
			t.Fatal(err)
		}
		w.Notify("c-team", s1.Seq)
		c := settle(t, w, 2) // ben: sent; eve: removed
		s2, err := st.Send(ctx, ben2, parley.SendRequest{Conv: "c-team", CMID: "m2", Body: "hi @cy"})
		if err != nil {
			t.Fatal(err)
		}
		w.Notify("c-team", s2.Seq)
		c = settle(t, w, 4) // ana and cy
		want := map[string][]string{
			"/ben": {fmt.Sprintf("c-team/%d", s1.Seq)},
			"/ana": {fmt.Sprintf("c-team/%d", s2.Seq)},
			"/cy":  {fmt.Sprintf("c-team/%d", s2.Seq)},
		}
		time.Sleep(100 * time.Millisecond) // nothing else arrives
		if got := rc.hints(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("hints %v, want %v", got, want)
		}
		if c = w.Counts(); c.Sent != 3 || c.Removed != 1 || c.Failed != 0 {
			t.Errorf("counts %+v, want 3 sent, 1 removed", c)
		}
		if removed, _ := st.RemovePushSubscription(ctx, gone.ID, gone.Endpoint); removed {
			t.Error("the subscription the push service called gone is still stored")
		}
	})
}

// counting is the store with its PushTargets calls counted.
type counting struct {
	parley.Store
	calls atomic.Int64
}

func (c *counting) PushTargets(ctx context.Context, msgs []parley.PushMessage) ([]parley.PushTarget, error) {
	c.calls.Add(1)
	return c.Store.PushTargets(ctx, msgs)
}

// TestWorkerBatches: messages committed together are read in one
// PushTargets call, not one each, and each is still pushed once.
func TestWorkerBatches(t *testing.T) {
	stores(t, func(t *testing.T, st parley.Store) {
		raw, _ := st.PushKey(t.Context())
		key, _ := webpush.ParseKey(raw)
		rc := newReceiver(t, key.Public())
		ana, ben := member(t, st, "ana", "d1"), member(t, st, "ben", "d1")
		ctx := t.Context()
		if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-team", Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
			t.Fatal(err)
		}
		rc.subscribe(t, st, ben, "/ben")
		const n = 40
		var seqs []int64
		for i := range n {
			s, err := st.Send(ctx, ana, parley.SendRequest{Conv: "c-team", CMID: fmt.Sprintf("m%d", i), Body: "hello"})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s.Seq)
		}
		cs := &counting{Store: st}
		w := worker(t, cs, []string{"http://127.0.0.1:"})
		for _, seq := range seqs {
			w.Notify("c-team", seq)
		}
		settle(t, w, n)
		if got := len(rc.hints()["/ben"]); got != n {
			t.Errorf("ben got %d hints, want %d", got, n)
		}
		if c := cs.calls.Load(); c > n/8 {
			t.Errorf("%d PushTargets calls for %d messages notified together, want them batched", c, n)
		}
	})
}

// TestWorkerRefusesLoopback: without the allow list, an endpoint on
// 127.0.0.1 is refused when the connection is made: nothing reaches it,
// and the push counts as failed, not retried.
func TestWorkerRefusesLoopback(t *testing.T) {
	stores(t, func(t *testing.T, st parley.Store) {
		var hits int
		var mu sync.Mutex
		srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { mu.Lock(); hits++; mu.Unlock() }))
		t.Cleanup(srv.Close)
		ctx := t.Context()
		ana, ben := member(t, st, "ana", "d1"), member(t, st, "ben", "d1")
		if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-team", Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t)
		enc := base64.RawURLEncoding
		for _, ep := range []string{srv.URL + "/p", strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/q"} {
			if _, _, err := st.SavePushSubscription(ctx, ben, parley.NewPushSubscription{Endpoint: ep,
				P256DH: enc.EncodeToString(b.priv.PublicKey().Bytes()), Auth: enc.EncodeToString(b.auth)}); err != nil {
				t.Fatal(err)
			}
		}
		w := worker(t, st, nil)
		s, err := st.Send(ctx, ana, parley.SendRequest{Conv: "c-team", CMID: "m1", Body: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		w.Notify("c-team", s.Seq)
		c := settle(t, w, 2)
		mu.Lock()
		defer mu.Unlock()
		if c.Failed != 2 || c.Sent != 0 || c.Retried != 0 || hits != 0 {
			t.Errorf("counts %+v, %d requests reached the server; want 2 failed, none retried, none reached", c, hits)
		}
	})
}

// TestWorkerRetries: a 503 is tried again with backoff, up to the bound;
// a full queue drops instead of blocking.
func TestWorkerRetries(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	ana, ben := member(t, st, "ana", "d1"), member(t, st, "ben", "d1")
	if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-team", Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	enc := base64.RawURLEncoding
	if _, _, err := st.SavePushSubscription(ctx, ben, parley.NewPushSubscription{Endpoint: srv.URL + "/x",
		P256DH: enc.EncodeToString(b.priv.PublicKey().Bytes()), Auth: enc.EncodeToString(b.auth)}); err != nil {
		t.Fatal(err)
	}
	w := worker(t, st, []string{srv.URL})
	s, err := st.Send(ctx, ana, parley.SendRequest{Conv: "c-team", CMID: "m1", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	w.Notify("c-team", s.Seq)
	if c := settle(t, w, 1); c.Sent != 1 || c.Retried != 2 {
		t.Errorf("counts %+v, want sent after 2 retries", c)
	}
	// A push service that keeps failing is given up on after the bound.
	if _, _, err := st.SavePushSubscription(ctx, ben, parley.NewPushSubscription{Endpoint: srv.URL + "/down",
		P256DH: enc.EncodeToString(b.priv.PublicKey().Bytes()), Auth: enc.EncodeToString(b.auth)}); err != nil {
		t.Fatal(err)
	}
	s2, err := st.Send(ctx, ana, parley.SendRequest{Conv: "c-team", CMID: "m2", Body: "again"})
	if err != nil {
		t.Fatal(err)
	}
	w.Notify("c-team", s2.Seq)
	if c := settle(t, w, 3); c.Sent != 2 || c.Failed != 1 || c.Retried != 2+webpush.DefaultAttempts-1 {
		t.Errorf("counts %+v, want the failing push given up after %d attempts", c, webpush.DefaultAttempts)
	}

	full := webpush.NewWorker(webpush.WorkerOptions{Store: st, Queue: 2}) // not running
	for range 5 {
		full.Notify("c-team", s.Seq)
	}
	if c := full.Counts(); c.Queued != 2 || c.Dropped != 3 {
		t.Errorf("full queue: %+v, want 2 queued, 3 dropped", c)
	}
}
