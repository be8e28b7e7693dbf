package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// recorder is a Handler that checks the delivery contract as it goes: per
// conversation and epoch, seqs strictly ascending, never repeated.
type recorder struct {
	mu      sync.Mutex
	seqs    map[string][]int64
	bodies  map[string][]string
	epoch   map[string]int64
	resets  []string
	trimmed []string
	reads   map[string]int64
	convs   int
	bad     []string
	signals []string // typing and presence pushes, as "typing conv user" and "presence user state"
}

func (r *recorder) Typing(conv, user string, until time.Time) {
	r.mu.Lock()
	r.signals = append(r.signals, fmt.Sprintf("typing %s %s %s", conv, user, until.UTC().Format(time.RFC3339)))
	r.mu.Unlock()
}

func (r *recorder) Presence(user string, state parley.PresenceState, lastSeen time.Time) {
	r.mu.Lock()
	r.signals = append(r.signals, fmt.Sprintf("presence %s %s %v", user, state, lastSeen.IsZero()))
	r.mu.Unlock()
}

func (r *recorder) heardSignals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.signals)
}

func newRecorder() *recorder {
	return &recorder{seqs: map[string][]int64{}, bodies: map[string][]string{}, epoch: map[string]int64{}, reads: map[string]int64{}}
}

func (r *recorder) Convs([]wire.Conv) {
	r.mu.Lock()
	r.convs++
	r.mu.Unlock()
}

func (r *recorder) Events(conv string, epoch int64, evs []wire.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.epoch[conv]; ok && e != epoch {
		r.bad = append(r.bad, fmt.Sprintf("%s: epoch %d after %d without a reset", conv, epoch, e))
	}
	r.epoch[conv] = epoch
	if len(evs) == 0 {
		r.bad = append(r.bad, fmt.Sprintf("%s: empty Events call", conv))
	}
	for _, ev := range evs {
		s := r.seqs[conv]
		if ev.Conv != conv {
			r.bad = append(r.bad, fmt.Sprintf("%s: event of %s", conv, ev.Conv))
		}
		if len(s) > 0 && ev.Seq <= s[len(s)-1] {
			r.bad = append(r.bad, fmt.Sprintf("%s: seq %d after %d", conv, ev.Seq, s[len(s)-1]))
		}
		r.seqs[conv] = append(s, ev.Seq)
		r.bodies[conv] = append(r.bodies[conv], ev.Body)
	}
}

func (r *recorder) Reset(conv string, code parley.Code) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seqs, conv)
	delete(r.bodies, conv)
	delete(r.epoch, conv)
	r.resets = append(r.resets, conv+" "+string(code))
}

func (r *recorder) Trimmed(conv string, minSeq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trimmed = append(r.trimmed, fmt.Sprintf("%s %d", conv, minSeq))
}

func (r *recorder) Read(conv string, read int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads[conv] = read
}

func (r *recorder) seqsOf(conv string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs[conv])
}

func (r *recorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		t.Error("delivery contract broken:", b)
	}
}

func upTo(n int64) []int64 {
	var s []int64
	for i := int64(1); i <= n; i++ {
		s = append(s, i)
	}
	return s
}

// running is a client with Run going in the background.
type running struct {
	*client.Client
	rec       *recorder
	connected chan string // OnConnect
	outcomes  chan client.Item
	stop      func() error // cancels Run and closes the client; returns Run's error
}

func start(t *testing.T, o client.Options) *running {
	t.Helper()
	r := &running{rec: newRecorder(), connected: make(chan string, 100), outcomes: make(chan client.Item, 10000)}
	if o.Handler == nil {
		o.Handler = r.rec
	}
	o.OnConnect = func(url string) { r.connected <- url }
	o.OnOutcome = func(it client.Item) { r.outcomes <- it }
	if o.BackoffMax == 0 {
		o.BackoffMax = 200 * time.Millisecond
	}
	c, err := client.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r.Client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
			c.Close()
			r.rec.check(t)
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil && !t.Failed() {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// waitConnected waits for the next OnConnect.
func (r *running) waitConnected(t *testing.T) string {
	t.Helper()
	select {
	case url := <-r.connected:
		return url
	case <-time.After(10 * time.Second):
		t.Fatal("client did not connect")
		return ""
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestIsTerminal(t *testing.T) {
	for _, row := range parley.Codes {
		err := parley.Errorf(row.Code, "x")
		if got, want := client.IsTerminal(err), !row.Retryable; got != want {
			t.Errorf("IsTerminal(%s) = %v, want %v", row.Code, got, want)
		}
		if got, want := client.IsTerminal(fmt.Errorf("wrapped: %w", err)), !row.Retryable; got != want {
			t.Errorf("IsTerminal(wrapped %s) = %v, want %v", row.Code, got, want)
		}
	}
	for _, err := range []error{nil, errors.New("no code"), context.DeadlineExceeded, client.ErrConnLost,
		parley.Errorf("SOMETHING_NEW", "unknown code"), parley.Errorf(parley.CodeUnavailable, "x"), parley.Errorf(parley.CodeRateLimited, "x")} {
		if client.IsTerminal(err) {
			t.Errorf("IsTerminal(%v) = true, want false", err)
		}
	}
	if got := parley.ErrorCode(client.ErrConnLost); got != parley.CodeUnavailable {
		t.Errorf("ErrConnLost code = %s, want UNAVAILABLE", got)
	}
}

func TestOutboxSurvivesReopen(t *testing.T) {
	ctx := ctxT(t)
	file := filepath.Join(t.TempDir(), "outbox.db")
	c, err := client.Open(ctx, client.Options{Outbox: file})
	if err != nil {
		t.Fatal(err)
	}
	var want []client.Item
	for i := range 3 {
		it, err := c.Enqueue(ctx, "c1", fmt.Sprintf("hello %d", i))
		if err != nil {
			t.Fatal(err)
		}
		if !uuidV4.MatchString(it.CMID) {
			t.Errorf("cmid %q is not UUIDv4 text", it.CMID)
		}
		want = append(want, it)
	}
	rc, err := c.EnqueueRecall(ctx, "c1", 7)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, rc)
	for _, enqueue := range []func() (client.Item, error){
		func() (client.Item, error) { return c.EnqueueEdit(ctx, "c1", 3, "edited") },
		func() (client.Item, error) { return c.EnqueueReact(ctx, "c1", 3, "👍", true) },
		func() (client.Item, error) { return c.EnqueueReact(ctx, "c1", 3, ":ok:", false) },
		func() (client.Item, error) { return c.EnqueueReply(ctx, "c1", 3, "a reply") },
	} {
		it, err := enqueue()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, it)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c, err = client.Open(ctx, client.Options{Outbox: file})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("pending after reopen: %d items, want %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for i := range got {
		g, w := got[i], want[i]
		if g.CMID != w.CMID || g.Conv != w.Conv || g.Kind != w.Kind || g.Body != w.Body || g.Target != w.Target || g.ID != w.ID || g.Done || !g.Created.Equal(w.Created) ||
			g.ReplyTo != w.ReplyTo || g.Emoji != w.Emoji || g.On != w.On {
			t.Errorf("item %d after reopen = %+v, want %+v", i, g, w)
		}
		if seen[g.CMID] {
			t.Errorf("cmid %s repeated", g.CMID)
		}
		seen[g.CMID] = true
	}
	if got[3].Kind != client.KindRecall || got[3].Target != 7 {
		t.Errorf("recall item = %+v", got[3])
	}
	if g := got[4]; g.Kind != client.KindEdit || g.Target != 3 || g.Body != "edited" {
		t.Errorf("edit item = %+v", g)
	}
	if g := got[5]; g.Kind != client.KindReact || g.Target != 3 || g.Emoji != "👍" || !g.On {
		t.Errorf("reaction item = %+v", g)
	}
	if g := got[6]; g.Kind != client.KindReact || g.Emoji != ":ok:" || g.On {
		t.Errorf("removal item = %+v", g)
	}
	if g := got[7]; g.Kind != client.KindSend || g.ReplyTo != 3 || g.Body != "a reply" {
		t.Errorf("reply item = %+v", g)
	}
	if out, err := c.Outcomes(ctx); err != nil || len(out) != 0 {
		t.Errorf("Outcomes = %v, %v; want none", out, err)
	}
}

func TestEnqueueRefusesInvalidArguments(t *testing.T) {
	ctx := ctxT(t)
	c, err := client.Open(ctx, client.Options{Outbox: filepath.Join(t.TempDir(), "o.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ conv, body string }{{"c1", ""}, {"", "x"}, {"bad conv", "x"}, {"c1", string(make([]rune, parley.MaxBodyChars+1))}, {"c1", "\xff"}} {
		if _, err := c.Enqueue(ctx, tc.conv, tc.body); parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("Enqueue(%q, %.10q) = %v, want INVALID_ARGUMENT", tc.conv, tc.body, err)
		}
	}
	if _, err := c.EnqueueRecall(ctx, "c1", 0); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("EnqueueRecall(target 0) = %v, want INVALID_ARGUMENT", err)
	}
	for name, enqueue := range map[string]func() (client.Item, error){
		"edit target 0":      func() (client.Item, error) { return c.EnqueueEdit(ctx, "c1", 0, "x") },
		"edit empty body":    func() (client.Item, error) { return c.EnqueueEdit(ctx, "c1", 3, "") },
		"react target 0":     func() (client.Item, error) { return c.EnqueueReact(ctx, "c1", 0, "👍", true) },
		"react empty emoji":  func() (client.Item, error) { return c.EnqueueReact(ctx, "c1", 3, "", true) },
		"react space emoji":  func() (client.Item, error) { return c.EnqueueReact(ctx, "c1", 3, "a b", true) },
		"reply to negative":  func() (client.Item, error) { return c.EnqueueReply(ctx, "c1", -1, "x") },
		"reply without body": func() (client.Item, error) { return c.EnqueueReply(ctx, "c1", 3, "") },
	} {
		if _, err := enqueue(); parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("%s = %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if p, _ := c.Pending(ctx); len(p) != 0 {
		t.Errorf("refused requests were written: %v", p)
	}
}

func TestSendAndOutcomeWithFake(t *testing.T) {
	f := newFake(t)
	f.add("c1", 2)
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	ctx := ctxT(t)

	it, err := r.Send(ctx, "c1", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if !it.Done || it.Seq != 3 || it.Dup || it.Epoch != 1 || it.Code != "" {
		t.Errorf("Send = %+v, want done at seq 3", it)
	}
	if o := <-r.outcomes; o.CMID != it.CMID || o.Seq != 3 {
		t.Errorf("OnOutcome = %+v", o)
	}
	rc, err := r.Recall(ctx, "c1", 3)
	if err != nil || rc.Seq != 4 || rc.Kind != client.KindRecall || rc.CMID == it.CMID {
		t.Errorf("Recall = %+v, %v", rc, err)
	}
	eventually(t, "events 1..4", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(4)) })

	_, err = r.Send(ctx, "nope", "hi")
	if parley.ErrorCode(err) != parley.CodeNotMember {
		t.Fatalf("Send to an unknown conversation = %v, want NOT_MEMBER", err)
	}
	out, _ := r.Outcomes(ctx)
	if len(out) != 3 || out[2].Code != parley.CodeNotMember || !out[2].Done {
		t.Errorf("Outcomes = %+v", out)
	}
	if p, _ := r.Pending(ctx); len(p) != 0 {
		t.Errorf("Pending = %+v, want none", p)
	}
	if got := len(f.requests(wire.TSend)); got != 2 {
		t.Errorf("server saw %d sends, want 2 (a terminal code is not retried)", got)
	}

	// The plain requests.
	p, err := r.Sync(ctx, "c1", 1, 2)
	if err != nil || len(p.Events) != 2 || p.NextAfter != 3 || !p.HasMore || p.Epoch != 1 {
		t.Errorf("Sync = %+v, %v", p, err)
	}
	ev, err := r.Fetch(ctx, "c1", 3)
	if err != nil || ev.Body != "hi" {
		t.Errorf("Fetch = %+v, %v", ev, err)
	}
	if _, err := r.Fetch(ctx, "c1", 99); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Errorf("Fetch(99) = %v, want NOT_FOUND", err)
	}
	if n, err := r.Ack(ctx, "c1", 3); n != 3 || err != nil {
		t.Errorf("Ack = %d, %v", n, err)
	}
	if n, err := r.Read(ctx, "c1", 2); n != 2 || err != nil {
		t.Errorf("Read = %d, %v", n, err)
	}
	if cs, err := r.Convs(ctx); err != nil || len(cs) != 1 || cs[0].Conv != "c1" {
		t.Errorf("Convs = %+v, %v", cs, err)
	}
}

// TestConvsPages: the conversation list comes in pages; the client walks
// them all, both to sync every conversation on connect and in Convs.
func TestConvsPages(t *testing.T) {
	f := newFake(t)
	ids := []string{"c1", "c2", "c3", "c4", "c5"}
	for _, id := range ids {
		f.add(id, 2)
	}
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	for _, id := range ids {
		eventually(t, "sync of "+id, func() bool { return slices.Equal(r.rec.seqsOf(id), upTo(2)) })
	}
	cs, err := r.Convs(context.Background())
	var got []string
	for _, c := range cs {
		got = append(got, c.Conv)
	}
	if err != nil || !slices.Equal(got, ids) {
		t.Errorf("Convs = %v, %v; want %v", got, err, ids)
	}
	if n := len(f.requests(wire.TConvs)); n < 2*3 {
		t.Errorf("%d convs requests, want the 3 pages walked twice", n)
	}
}

func TestDuplicateAndOutOfOrderPushes(t *testing.T) {
	f := newFake(t)
	evs := f.add("c1", 2)
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	eventually(t, "initial sync", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(2)) })
	syncs := len(f.requests(wire.TSync))

	// Duplicates of what was synced, then the next event three times.
	ev3 := f.add("c1", 1)[0]
	for _, e := range []wire.Event{evs[0], evs[1], ev3, ev3, evs[1], ev3} {
		f.push(wire.Frame{T: wire.TEvent, Ev: &e})
	}
	eventually(t, "event 3", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(3)) })
	if got := len(f.requests(wire.TSync)); got != syncs {
		t.Errorf("duplicate or next pushes caused %d syncs", got-syncs)
	}

	// A gap: 4 and 5 are committed, only 5 is pushed; the client syncs.
	more := f.add("c1", 2)
	f.push(wire.Frame{T: wire.TEvent, Ev: &more[1]})
	eventually(t, "gap filled", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(5)) })
	f.push(wire.Frame{T: wire.TEvent, Ev: &more[0]}) // late, a duplicate now

	// A conversation the client has never seen.
	other := f.add("c2", 3)
	f.push(wire.Frame{T: wire.TEvent, Ev: &other[2]})
	eventually(t, "new conversation", func() bool { return slices.Equal(r.rec.seqsOf("c2"), upTo(3)) })

	// A hint ahead of the cursor, with a read cursor.
	f.add("c1", 1)
	f.push(wire.Frame{T: wire.THint, Conv: "c1", Head: ptr(int64(6)), Read: ptr(int64(4))})
	eventually(t, "hint followed", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(6)) })
	r.rec.mu.Lock()
	if r.rec.reads["c1"] != 4 {
		t.Errorf("read cursor reported %d, want 4", r.rec.reads["c1"])
	}
	r.rec.mu.Unlock()

	// resync: everything that changed silently is caught up.
	f.add("c1", 2)
	f.add("c2", 1)
	f.push(wire.Frame{T: wire.TResync})
	eventually(t, "resync", func() bool {
		return slices.Equal(r.rec.seqsOf("c1"), upTo(8)) && slices.Equal(r.rec.seqsOf("c2"), upTo(4))
	})
	eventually(t, "cursor at 8", func() bool { cur, _ := r.Cursor("c1"); return cur == client.Cursor{After: 8, Epoch: 1} })
}

func TestCursorAheadRebuilds(t *testing.T) {
	f := newFake(t)
	f.add("c1", 5)
	url := f.listen()
	file := filepath.Join(t.TempDir(), "o.db")
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: file})
	r.waitConnected(t)
	eventually(t, "initial sync", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(5)) })
	r.stop()

	// The server lost events without an epoch change (a bad restore).
	f.mu.Lock()
	f.convs["c1"].events = f.convs["c1"].events[:2]
	f.mu.Unlock()
	r = start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: file})
	r.waitConnected(t)
	if got := r.rec.seqsOf("c1"); !slices.Equal(got, upTo(2)) {
		t.Errorf("handler holds %v, want 1..2", got)
	}
	r.rec.mu.Lock()
	if !slices.Equal(r.rec.resets, []string{"c1 CURSOR_AHEAD"}) {
		t.Errorf("resets = %v", r.rec.resets)
	}
	r.rec.mu.Unlock()
}

func TestCursorSurvivesRestart(t *testing.T) {
	f := newFake(t)
	f.add("c1", 5)
	url := f.listen()
	file := filepath.Join(t.TempDir(), "o.db")
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: file})
	r.waitConnected(t)
	eventually(t, "initial sync", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(5)) })
	r.stop()
	syncs := len(f.requests(wire.TSync))

	r = start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: file})
	if cur, ok := r.Cursor("c1"); !ok || cur != (client.Cursor{After: 5, Epoch: 1}) {
		t.Errorf("cursor after reopen = %+v, %v", cur, ok)
	}
	r.waitConnected(t)
	if got := len(f.requests(wire.TSync)); got != syncs {
		t.Errorf("an unchanged conversation was synced again (%d syncs)", got-syncs)
	}
	f.add("c1", 2)
	f.push(wire.Frame{T: wire.TResync})
	eventually(t, "new events", func() bool { return slices.Equal(r.rec.seqsOf("c1"), []int64{6, 7}) })
	last := f.requests(wire.TSync)
	if after := *last[len(last)-1].req.After; after != 5 {
		t.Errorf("sync after restart started after %d, want 5", after)
	}
}

func TestRefusedToken(t *testing.T) {
	for _, code := range []parley.Code{parley.CodeUnauthenticated, parley.CodeStaleInstall} {
		t.Run(string(code), func(t *testing.T) {
			f := newFake(t)
			f.refuse = code
			url := f.listen()
			c, err := client.Open(ctxT(t), client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Run(ctxT(t))
			if parley.ErrorCode(err) != code || !client.IsTerminal(err) {
				t.Errorf("Run = %v, want %s", err, code)
			}
		})
	}
	t.Run("wrong token", func(t *testing.T) {
		f := newFake(t)
		url := f.listen()
		c, err := client.Open(ctxT(t), client.Options{URLs: []string{url}, Token: "other", Outbox: filepath.Join(t.TempDir(), "o.db")})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Run(ctxT(t)); parley.ErrorCode(err) != parley.CodeUnauthenticated {
			t.Errorf("Run = %v, want UNAUTHENTICATED", err)
		}
	})
	t.Run("unavailable is retried", func(t *testing.T) {
		f := newFake(t)
		f.refuse = parley.CodeUnavailable
		url := f.listen()
		r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
		time.Sleep(300 * time.Millisecond)
		f.mu.Lock()
		f.refuse = ""
		f.mu.Unlock()
		r.waitConnected(t)
	})
}

// The real gateway with a real limiter (1 send per 300ms per user): every
// RATE_LIMITED answer keeps the item, waits retry_after_ms and resends it
// under the same cmid, so each message lands exactly once.
func TestRateLimitedWaitsAndKeepsTheKey(t *testing.T) {
	s := newStore(t)
	limits := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	var refused atomic.Int32
	g := newGatewayWith(t, s, gateway.Options{
		Limit: func(ctx context.Context, bucket, user string) (bool, time.Duration) {
			if bucket != "send" {
				return true, 0
			}
			d, _ := limits.Allow(ctx, "send:"+user, 1, 300*time.Millisecond)
			if !d.Allowed {
				refused.Add(1)
			}
			return d.Allowed, d.RetryAfter
		},
	})
	r := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d1", "i1"), Outbox: filepath.Join(t.TempDir(), "o.db")})
	began := time.Now()
	var items []client.Item
	for _, body := range []string{"one", "two", "three"} {
		it, err := r.Enqueue(ctxT(t), "g1", body)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	for i, it := range items {
		done, err := r.Wait(ctxT(t), it.CMID)
		if err != nil || done.Seq != int64(3+i) || done.Dup || done.Code != "" {
			t.Fatalf("item %d ended %+v, %v", i, done, err)
		}
	}
	if d := time.Since(began); d < 600*time.Millisecond {
		t.Errorf("three sends at 1 per 300ms finished after %v", d)
	}
	if refused.Load() == 0 {
		t.Fatal("the limiter never refused: the test proves nothing")
	}
	for body, n := range messages(t, r, "g1") {
		if n != 1 {
			t.Errorf("%q landed %d times", body, n)
		}
	}
}

// Every frame counts in a rate-limit bucket (sub, convs and sync in read):
// a client whose read budget is spent while it connects waits
// retry_after_ms and asks again on the same connection, instead of
// dropping it and reconnecting.
func TestReadLimitedConnect(t *testing.T) {
	s := newStore(t)
	limits := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	var refused atomic.Int32
	hub := gateway.New(gateway.Options{
		Store: s, Bus: inmem.NewBus(), Log: slog.New(slog.DiscardHandler),
		Limit: func(ctx context.Context, bucket, user string) (bool, time.Duration) {
			d, _ := limits.Allow(ctx, bucket+":"+user, 1, 200*time.Millisecond)
			if !d.Allowed {
				refused.Add(1)
			}
			return d.Allowed, d.RetryAfter
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	var upgrades atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrades.Add(1)
		hub.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	r := start(t, client.Options{URLs: []string{"ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	eventually(t, "g1 synced", func() bool { return len(r.rec.seqsOf("g1")) == 2 })
	if refused.Load() == 0 {
		t.Fatal("the limiter never refused: the test proves nothing")
	}
	if n := upgrades.Load(); n != 1 {
		t.Errorf("%d upgrades, want 1: a spent read budget is waited out on the connection", n)
	}
}

// The server commits the send and the connection dies before the reply:
// the item stays pending, is resent with the same cmid on the next
// connection, and ends once, as a dup.
func TestNoReplyResentOnReconnect(t *testing.T) {
	f := newFake(t)
	f.add("c1", 1)
	var dropped atomic.Bool
	f.setHook(func(ws *websocket.Conn, req wire.Request) bool {
		if req.T != wire.TSend || dropped.Swap(true) {
			return false
		}
		f.answer(ws, req) // commit, no reply, no push
		ws.CloseNow()
		return true
	})
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	it, err := r.Send(ctxT(t), "c1", "once")
	if err != nil {
		t.Fatal(err)
	}
	if it.Seq != 2 || !it.Dup {
		t.Errorf("outcome = %+v, want seq 2 dup", it)
	}
	sends := f.requests(wire.TSend)
	if len(sends) != 2 || sends[0].req.CMID != sends[1].req.CMID {
		t.Errorf("sends = %+v, want the same cmid twice", sends)
	}
	f.mu.Lock()
	n := len(f.convs["c1"].events)
	f.mu.Unlock()
	if n != 2 {
		t.Errorf("server holds %d events, want 2", n)
	}
	if o := <-r.outcomes; o.CMID != it.CMID {
		t.Errorf("outcome %+v", o)
	}
	select {
	case o := <-r.outcomes:
		t.Errorf("a second outcome: %+v", o)
	default:
	}
	eventually(t, "message delivered once", func() bool { return slices.Equal(r.rec.seqsOf("c1"), upTo(2)) })
}

func TestRequestFailsWhenConnectionDrops(t *testing.T) {
	f := newFake(t)
	f.add("c1", 1)
	f.setHook(func(ws *websocket.Conn, req wire.Request) bool {
		if req.T == wire.TFetch {
			ws.CloseNow()
			return true
		}
		return false
	})
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	_, err := r.Fetch(ctxT(t), "c1", 1)
	if !errors.Is(err, client.ErrConnLost) || parley.ErrorCode(err) != parley.CodeUnavailable || client.IsTerminal(err) {
		t.Errorf("Fetch on a dropped connection = %v, want ErrConnLost", err)
	}
	r.waitConnected(t) // it reconnects
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	f.setHook(func(ws *websocket.Conn, req wire.Request) bool { return req.T == wire.TFetch }) // never answers
	if _, err := r.Fetch(ctx, "c1", 1); !errors.Is(err, context.DeadlineExceeded) || client.IsTerminal(err) {
		t.Errorf("Fetch without a reply = %v, want a deadline error", err)
	}
}

func TestPendingItemsResentAfterRestartInOrder(t *testing.T) {
	ctx := ctxT(t)
	f := newFake(t)
	f.add("c1", 1)
	url := f.listen()
	file := filepath.Join(t.TempDir(), "o.db")
	c, err := client.Open(ctx, client.Options{Outbox: file})
	if err != nil {
		t.Fatal(err)
	}
	var cmids []string
	for i := range 5 {
		it, err := c.Enqueue(ctx, "c1", fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		cmids = append(cmids, it.CMID)
	}
	c.Close() // the process "dies" before anything was sent

	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: file})
	var got []string
	for range cmids {
		select {
		case o := <-r.outcomes:
			got = append(got, o.CMID)
		case <-time.After(10 * time.Second):
			t.Fatal("outcomes missing")
		}
	}
	if !slices.Equal(got, cmids) {
		t.Errorf("outcomes in order %v, want %v", got, cmids)
	}
	var sent []string
	for _, s := range f.requests(wire.TSend) {
		sent = append(sent, s.req.CMID)
	}
	if !slices.Equal(sent, cmids) {
		t.Errorf("sent %v, want %v", sent, cmids)
	}
	out, _ := r.Outcomes(ctx)
	for i, o := range out {
		if o.Seq != int64(i+2) || o.Dup || o.Code != "" {
			t.Errorf("outcome %d = %+v", i, o)
		}
	}
}

func TestGoawayMovesToTheNextURL(t *testing.T) {
	f := newFake(t)
	f.add("c1", 1)
	a, b := f.listen(), f.listen()
	r := start(t, client.Options{URLs: []string{a, b}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db"), BackoffMax: time.Minute})
	if got := r.waitConnected(t); got != a {
		t.Fatalf("connected to %s, want %s", got, a)
	}
	began := time.Now()
	f.push(wire.Goaway())
	if got := r.waitConnected(t); got != b {
		t.Fatalf("after goaway connected to %s, want %s", got, b)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("reconnect after goaway took %v", d)
	}
	it, err := r.Send(ctxT(t), "c1", "after goaway")
	if err != nil || it.Seq != 2 {
		t.Errorf("Send = %+v, %v", it, err)
	}
	if s := f.requests(wire.TSend); len(s) != 1 || s[0].url != b {
		t.Errorf("sends = %+v, want one on %s", s, b)
	}
}

// The tests below run against the real gateway on a real socket.

type gw struct {
	hub   *gateway.Hub
	store *sqlite.DB
	url   string
}

// newStore opens a SQLite store with users ana and ben and the group g1 of
// both (seqs 1 and 2 are their member_joined events).
func newStore(t *testing.T) *sqlite.DB {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, id := range []string{"ana", "ben"} {
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: id, Password: "password-" + id, Role: parley.RoleUser}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateConversation(ctx, parley.Principal{User: "ana", Role: parley.RoleUser},
		parley.NewConversation{ID: "g1", Kind: parley.KindGroup, Title: "g1", Members: []string{"ana", "ben"}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func newGateway(t *testing.T, s *sqlite.DB) *gw {
	t.Helper()
	return newGatewayWith(t, s, gateway.Options{})
}

func newGatewayWith(t *testing.T, s *sqlite.DB, o gateway.Options) *gw {
	t.Helper()
	o.Store, o.Bus, o.Log = s, inmem.NewBus(), slog.New(slog.DiscardHandler)
	hub := gateway.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	srv := httptest.NewServer(hub)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return &gw{hub: hub, store: s, url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"}
}

func token(t *testing.T, s *sqlite.DB, user, device, install string) string {
	t.Helper()
	sess, err := s.Login(context.Background(), parley.LoginRequest{Login: user, Password: "password-" + user, DeviceID: device, InstallID: install})
	if err != nil {
		t.Fatal(err)
	}
	return sess.Token
}

// messages returns how many message events of conv carry each body, read
// by a separate client through sync.
func messages(t *testing.T, c *running, conv string) map[string]int {
	t.Helper()
	n := map[string]int{}
	var after int64
	for {
		p, err := c.Sync(ctxT(t), conv, after, 200)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			if e.Kind == "message" {
				n[e.Body]++
			}
		}
		after = p.NextAfter
		if !p.HasMore {
			return n
		}
	}
}

func TestGatewaySendAndReceive(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	dir := t.TempDir()
	ana := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d1", "i1"), Outbox: filepath.Join(dir, "ana.db")})
	ben := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(dir, "ben.db")})
	ana.waitConnected(t)
	ben.waitConnected(t)
	eventually(t, "the joins", func() bool { return slices.Equal(ben.rec.seqsOf("g1"), upTo(2)) })

	it, err := ana.Send(ctxT(t), "g1", "hello ben")
	if err != nil {
		t.Fatal(err)
	}
	if it.Seq != 3 || it.Dup || it.Epoch != 1 {
		t.Errorf("Send = %+v, want seq 3 (after two joins), not dup, epoch 1", it)
	}
	eventually(t, "ben receives", func() bool { return slices.Equal(ben.rec.seqsOf("g1"), upTo(3)) })
	eventually(t, "ana's own push", func() bool { return slices.Equal(ana.rec.seqsOf("g1"), upTo(3)) })

	// Both send concurrently; each side sees every event once, in order.
	var wg sync.WaitGroup
	for i := range 20 {
		for _, c := range []*running{ana, ben} {
			wg.Go(func() {
				if _, err := c.Send(ctxT(t), "g1", fmt.Sprintf("m%d", i)); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	for _, c := range []*running{ana, ben} {
		eventually(t, "all 43 events", func() bool { return slices.Equal(c.rec.seqsOf("g1"), upTo(43)) })
	}
	// The cursor follows the handler: stored once the page was handed over.
	eventually(t, "ben's cursor at 43", func() bool { cur, _ := ben.Cursor("g1"); return cur == client.Cursor{After: 43, Epoch: 1} })
	if n, err := ben.Read(ctxT(t), "g1", 43); err != nil || n != 43 {
		t.Errorf("Read = %d, %v", n, err)
	}
	if ev, err := ben.Fetch(ctxT(t), "g1", 3); err != nil || ev.Body != "hello ben" || ev.Sender != "ana" {
		t.Errorf("Fetch = %+v, %v", ev, err)
	}
}

// An item written before a crash is sent once after the restart; an item
// whose first attempt committed but whose reply was lost ends as a dup. The
// store holds exactly one message for each, and a further restart sends
// nothing.
func TestGatewayOutboxExactlyOnceAcrossRestart(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	dir := t.TempDir()
	ctx := ctxT(t)
	file := filepath.Join(dir, "ana.db")
	anaToken := token(t, s, "ana", "d1", "i1")

	c, err := client.Open(ctx, client.Options{Outbox: file})
	if err != nil {
		t.Fatal(err)
	}
	never, err := c.Enqueue(ctx, "g1", "written before the crash")
	if err != nil {
		t.Fatal(err)
	}
	landed, err := c.Enqueue(ctx, "g1", "landed, reply lost")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	// The second item's first attempt: committed, but its reply never
	// reached the process that crashed.
	other := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d2", "i1"), Outbox: filepath.Join(dir, "ana-d2.db")})
	first, err := other.Do(ctx, wire.Request{T: wire.TSend, Conv: "g1", CMID: landed.CMID, Body: landed.Body})
	if err != nil || *first.Dup {
		t.Fatalf("first attempt = %+v, %v", first, err)
	}

	ana := start(t, client.Options{URLs: []string{g.url}, Token: anaToken, Outbox: file})
	got := map[string]client.Item{}
	for range 2 {
		select {
		case o := <-ana.outcomes:
			got[o.CMID] = o
		case <-time.After(10 * time.Second):
			t.Fatal("outcomes missing")
		}
	}
	if o := got[never.CMID]; !o.Done || o.Dup || o.Code != "" || o.Seq == 0 {
		t.Errorf("outcome of the unsent item = %+v", o)
	}
	if o := got[landed.CMID]; !o.Done || !o.Dup || o.Seq != *first.Seq {
		t.Errorf("outcome of the landed item = %+v, want dup at seq %d", o, *first.Seq)
	}
	if p, _ := ana.Pending(ctx); len(p) != 0 {
		t.Errorf("pending = %+v", p)
	}
	ana.waitConnected(t)
	if err := ana.stop(); err != nil {
		t.Fatal(err)
	}

	// Once more: nothing pending, nothing sent, nothing reported.
	again := start(t, client.Options{URLs: []string{g.url}, Token: anaToken, Outbox: file})
	again.waitConnected(t)
	select {
	case o := <-again.outcomes:
		t.Errorf("an ended item ended again: %+v", o)
	case <-time.After(100 * time.Millisecond):
	}
	out, err := again.Outcomes(ctx)
	if err != nil || len(out) != 2 {
		t.Errorf("Outcomes = %d items, %v", len(out), err)
	}

	ben := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(dir, "ben.db")})
	n := messages(t, ben, "g1")
	if n[never.Body] != 1 || n[landed.Body] != 1 || len(n) != 2 {
		t.Errorf("the store holds %v, want each message once", n)
	}
}

func TestGatewayCursorSurvivesRestart(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	dir := t.TempDir()
	benFile := filepath.Join(dir, "ben.db")
	benToken := token(t, s, "ben", "d1", "i1")
	ana := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d1", "i1"), Outbox: filepath.Join(dir, "ana.db")})

	ben := start(t, client.Options{URLs: []string{g.url}, Token: benToken, Outbox: benFile})
	ben.waitConnected(t)
	if _, err := ana.Send(ctxT(t), "g1", "one"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ben has 1..3", func() bool { return slices.Equal(ben.rec.seqsOf("g1"), upTo(3)) })
	ben.stop()

	for _, body := range []string{"two", "three"} {
		if _, err := ana.Send(ctxT(t), "g1", body); err != nil {
			t.Fatal(err)
		}
	}
	ben = start(t, client.Options{URLs: []string{g.url}, Token: benToken, Outbox: benFile})
	ben.waitConnected(t)
	if got := ben.rec.seqsOf("g1"); !slices.Equal(got, []int64{4, 5}) {
		t.Errorf("after the restart ben got %v, want only 4 and 5", got)
	}
	ben.rec.mu.Lock()
	bodies := ben.rec.bodies["g1"]
	ben.rec.mu.Unlock()
	if !slices.Equal(bodies, []string{"two", "three"}) {
		t.Errorf("bodies = %v", bodies)
	}
}

func TestGatewayRefusesAStaleInstall(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	old := token(t, s, "ana", "d1", "i1")
	token(t, s, "ana", "d1", "i2") // a new install on the same device
	c, err := client.Open(ctxT(t), client.Options{URLs: []string{g.url}, Token: old, Outbox: filepath.Join(t.TempDir(), "o.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Run(ctxT(t)); parley.ErrorCode(err) != parley.CodeStaleInstall {
		t.Errorf("Run = %v, want STALE_INSTALL", err)
	}
	c2, err := client.Open(ctxT(t), client.Options{URLs: []string{g.url}, Token: "not-a-token", Outbox: filepath.Join(t.TempDir(), "o2.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Run(ctxT(t)); parley.ErrorCode(err) != parley.CodeUnauthenticated {
		t.Errorf("Run = %v, want UNAUTHENTICATED", err)
	}
}

func TestGatewayGoaway(t *testing.T) {
	s := newStore(t)
	a, b := newGateway(t, s), newGateway(t, s)
	dir := t.TempDir()
	ana := start(t, client.Options{URLs: []string{a.url, b.url}, Token: token(t, s, "ana", "d1", "i1"), Outbox: filepath.Join(dir, "ana.db")})
	if got := ana.waitConnected(t); got != a.url {
		t.Fatalf("connected to %s, want %s", got, a.url)
	}
	if _, err := ana.Send(ctxT(t), "g1", "before"); err != nil {
		t.Fatal(err)
	}
	a.hub.Drain()
	if got := ana.waitConnected(t); got != b.url {
		t.Fatalf("after goaway connected to %s, want %s", got, b.url)
	}
	it, err := ana.Send(ctxT(t), "g1", "after")
	if err != nil || it.Seq != 4 {
		t.Errorf("Send after goaway = %+v, %v", it, err)
	}
	eventually(t, "ana has 1..4", func() bool { return slices.Equal(ana.rec.seqsOf("g1"), upTo(4)) })
}

func TestCloseEndsRun(t *testing.T) {
	f := newFake(t)
	url := f.listen()
	c, err := client.Open(ctxT(t), client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	f.add("c1", 1)
	eventually(t, "a connection", func() bool { return len(f.requests(wire.TSub)) > 0 })
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrClosed) {
			t.Errorf("Run after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Run did not return after Close")
	}
	if err := c.Run(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Run on a closed client = %v", err)
	}
	if _, err := c.Enqueue(context.Background(), "c1", "x"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Enqueue on a closed client = %v", err)
	}
}

// TestGatewayRevokedTokenEndsRun: a connected client whose token is logged
// out gets UNAUTHENTICATED from Run and does not reconnect with it.
func TestGatewayRevokedTokenEndsRun(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	tok := token(t, s, "ana", "d1", "i1")
	connected := make(chan struct{}, 1)
	c, err := client.Open(ctxT(t), client.Options{
		URLs: []string{g.url}, Token: tok, Outbox: filepath.Join(t.TempDir(), "o.db"),
		OnConnect: func(string) { connected <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctxT(t)) }()
	select {
	case <-connected:
	case err := <-done:
		t.Fatalf("Run ended before connecting: %v", err)
	}
	if err := s.Logout(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	g.hub.RevokeToken(tok)
	if err := <-done; parley.ErrorCode(err) != parley.CodeUnauthenticated {
		t.Fatalf("Run = %v, want UNAUTHENTICATED", err)
	}
}

// TestGatewayRollbackRebuilds: an operator rolls a conversation back under
// a connected client. The gateway sees the epoch move and sends resync; the
// client's sync answers EPOCH_CHANGED, it resets the conversation and
// rebuilds it (in pages of 2), and the seqs that are reused arrive in the
// new epoch.
func TestGatewayRollbackRebuilds(t *testing.T) {
	s := newStore(t)
	g := newGatewayWith(t, s, gateway.Options{Backstop: 100 * time.Millisecond})
	ben := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(t.TempDir(), "ben.db"), SyncLimit: 2})
	ben.waitConnected(t)
	ana := parley.Principal{User: "ana", DeviceID: "d1"}
	for i, body := range []string{"one", "two", "three"} {
		sent, err := s.Send(context.Background(), ana, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("c", i), Body: body})
		if err != nil {
			t.Fatal(err)
		}
		g.hub.Publish(parley.Notice{Conv: "g1", Seq: sent.Seq})
	}
	eventually(t, "seqs 1..5", func() bool { return slices.Equal(ben.rec.seqsOf("g1"), upTo(5)) })

	if _, err := s.Rollback(context.Background(), "g1", 3); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rebuild after the rollback", func() bool { return slices.Equal(ben.rec.seqsOf("g1"), upTo(3)) })
	sent, err := s.Send(context.Background(), ana, parley.SendRequest{Conv: "g1", CMID: "after", Body: "four, again"})
	if err != nil {
		t.Fatal(err)
	}
	g.hub.Publish(parley.Notice{Conv: "g1", Seq: sent.Seq})
	eventually(t, "the reused seq 4 in the new epoch", func() bool { return slices.Equal(ben.rec.seqsOf("g1"), upTo(4)) })

	// The cursor is stored after the handler returns: wait for it.
	eventually(t, "cursor after 4 in epoch 2", func() bool {
		cur, _ := ben.Cursor("g1")
		return cur == client.Cursor{After: 4, Epoch: 2}
	})
	ben.rec.mu.Lock()
	defer ben.rec.mu.Unlock()
	if !slices.Equal(ben.rec.resets, []string{"g1 EPOCH_CHANGED"}) {
		t.Errorf("resets %q, want exactly one g1 EPOCH_CHANGED", ben.rec.resets)
	}
	if got := ben.rec.bodies["g1"]; got[3] != "four, again" || ben.rec.epoch["g1"] != 2 {
		t.Errorf("after the rollback: bodies %q epoch %d", got, ben.rec.epoch["g1"])
	}
}

// Typing and presence pushes reach a Handler that is a SignalHandler, on
// its goroutine, malformed ones dropped; Typing and SetPresence write their
// frames without a rid and wait for no reply.
func TestSignals(t *testing.T) {
	f := newFake(t)
	f.add("c1", 1)
	f.setHook(func(ws *websocket.Conn, req wire.Request) bool {
		return req.T == wire.TTyping || req.T == wire.TPresence // no reply, as the gateway
	})
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: filepath.Join(t.TempDir(), "o.db")})
	r.waitConnected(t)
	ctx := context.Background()
	if err := r.Typing(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetPresence(ctx, parley.PresenceAway); err != nil {
		t.Fatal(err)
	}
	if err := r.SetPresence(ctx, parley.PresenceOffline); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("SetPresence(offline) = %v, want INVALID_ARGUMENT", err)
	}
	eventually(t, "signal frames", func() bool {
		return len(f.requests(wire.TTyping)) == 1 && len(f.requests(wire.TPresence)) == 1
	})
	if typ, pr := f.requests(wire.TTyping)[0].req, f.requests(wire.TPresence)[0].req; typ.Conv != "c1" || typ.RID != nil || pr.State != "away" || pr.RID != nil {
		t.Errorf("frames sent: %+v, %+v", typ, pr)
	}

	until := time.Date(2026, 12, 7, 12, 0, 5, 0, time.UTC)
	f.push(wire.Typing("c1", "ben", until))
	f.push(wire.Frame{T: wire.TTyping, Conv: "c1", User: "ben", Until: "soon"})
	f.push(wire.Frame{T: wire.TPresence, User: "ben", State: "asleep"})
	f.push(wire.PresencePush(parley.Presence{User: "ben", State: parley.PresenceAway, LastSeen: until}))
	f.push(wire.PresencePush(parley.Presence{User: "cy", State: parley.PresenceOffline}))
	want := []string{"typing c1 ben 2026-12-07T12:00:05Z", "presence ben away false", "presence cy offline true"}
	eventually(t, "signal pushes", func() bool { return len(r.rec.heardSignals()) >= len(want) })
	if got := r.rec.heardSignals(); !slices.Equal(got, want) {
		t.Errorf("signals heard = %q, want %q", got, want)
	}
}
