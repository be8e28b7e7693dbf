// Package client is Parley's Go client library: one WebSocket connection to
// a gateway, a durable outbox, and per-conversation sync cursors,
// the last two in one local SQLite file (WAL, synchronous=FULL).
//
// # Obligations it fulfils
//
//   - Every cmid is random (UUIDv4 text), never a counter: the request key is
//     per user and conversation across devices.
//   - Send, Reply, Recall, Edit and React write the item (cmid,
//     conversation, and what it asks) to the outbox and commit it to disk
//     before the first attempt goes on the wire.
//   - After every (re)connect every pending item is sent again with its
//     original cmid, in the order written.
//   - An item ends on success (sent, recalled, edited or reacted, dup or not) or on a terminal
//     code (IsTerminal: every code parley.Codes marks not retryable). It stays
//     pending on UNAVAILABLE (retried after backoff), RATE_LIMITED (retried
//     after retry_after_ms) and when no reply comes. Each item ends exactly
//     once: its outcome is written to the file (Outcomes) and reported once to
//     Options.OnOutcome.
//   - A conversation's sync cursor is stored only after the whole page was
//     handed to the Handler.
//
// # Outbox pruning
//
// Ended items (sent, dup, or ended by a terminal code) stay in the file for
// Options.KeepEnded after they ended, 7 days by default (DefaultKeepEnded),
// readable by Outcomes and Wait; older ones are deleted when Open opens the
// file and every hour while Run runs, so the file does not grow with every
// message ever sent. Pending items are never deleted, however old: they
// are what the client still owes the server. A negative KeepEnded keeps
// every ended item.
//
// # What the application gets
//
// Handler methods are called from one goroutine at a time, never
// concurrently. For each conversation and epoch, Handler.Events delivers
// visible events in strictly ascending seq, none skipped and none twice:
// pushes are applied only when they continue the cursor (seq == cursor+1),
// duplicates (seq <= cursor) are dropped, and anything else (a gap, an
// unknown conversation, a hint ahead of the cursor, a resync) is filled by
// sync. When the server answers EPOCH_CHANGED or CURSOR_AHEAD,
// Handler.Reset says to drop the conversation's local state, and delivery
// starts again at seq 1 of the current epoch. Handler.Trimmed says that
// retention purged events the client never saw.
//
// The cursor is stored after the Handler returns, so a crash between the two
// hands the same page over again after a restart: an application that keeps
// its own durable state should apply events idempotently by (conv, seq).
//
// Edits, reactions and replies arrive as events of their own; a message
// read by sync or fetch also carries its derived state as of the read
// (as_of). Timeline is a Handler that folds the two by the protocol's rule,
// so an application can keep its messages there or follow the same rule.
//
// # Connection
//
// Run dials the URLs in turn with Authorization: Bearer <token>, reconnects
// with exponential backoff and full jitter, reconnects at once (to the next
// URL) on goaway, and returns an UNAUTHENTICATED or STALE_INSTALL
// *parley.Error when the server refuses the token: those are not retried.
// After connecting it sends sub, then convs, then syncs every conversation
// whose head or epoch differs from its cursor.
//
// One Client per outbox file at a time.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Handler receives what the client learns about conversations. Its methods
// are called from one goroutine, one at a time; a slow method delays the
// application of later pushes but never the replies to requests.
type Handler interface {
	// Convs reports the conversation list, after every (re)connect and
	// resync, before those conversations are synced.
	Convs(convs []wire.Conv)

	// Events delivers events of conv in epoch, ascending by seq: each call
	// continues where the previous call for that conversation and epoch
	// ended, with no visible event skipped or repeated.
	Events(conv string, epoch int64, evs []wire.Event)

	// Reset says the conversation's local state must be dropped: the server
	// answered code (EPOCH_CHANGED after an operator rollback, or
	// CURSOR_AHEAD). Events for it start again from seq 1.
	Reset(conv string, code parley.Code)

	// Trimmed says retention purged events of conv after the cursor: events
	// below minSeq that the client never saw are lost for good.
	Trimmed(conv string, minSeq int64)

	// Read says the user's read cursor in conv moved to read (from another
	// device of the same user).
	Read(conv string, read int64)
}

// SignalHandler is what a Handler may implement besides to hear typing
// and presence pushes, called on the same goroutine as the Handler's
// methods. Signals are never synced: one missed while disconnected is gone.
type SignalHandler interface {
	// Typing says user is typing in conv until until (or until a message
	// of theirs arrives there).
	Typing(conv, user string, until time.Time)
	// Presence says user's presence changed; lastSeen is zero when the
	// server has never seen the user.
	Presence(user string, state parley.PresenceState, lastSeen time.Time)
}

// NopHandler ignores everything; embed it to implement only some methods.
type NopHandler struct{}

func (NopHandler) Convs([]wire.Conv)                  {}
func (NopHandler) Events(string, int64, []wire.Event) {}
func (NopHandler) Reset(string, parley.Code)          {}
func (NopHandler) Trimmed(string, int64)              {}
func (NopHandler) Read(string, int64)                 {}

// Options configure a Client. Outbox is required; URLs and Token are
// required by Run.
type Options struct {
	URLs   []string // WebSocket URLs of the gateways (ws://host/ws), tried in turn
	Token  string   // device token from login
	Outbox string   // path of the local state file (created when missing)

	Handler Handler // nil: NopHandler

	// OnOutcome is called once for every outbox item that ends, after its
	// outcome is on disk, in the order outcomes were written. It is called
	// from the client's goroutines and must not block for long. The file is
	// the record (Outcomes): a crash between the write and the call loses
	// the call, never the outcome.
	OnOutcome func(Item)
	// OnConnect is called after a connection is established and the
	// initial sub, convs and sync are done.
	OnConnect func(url string)
	// OnDisconnect is called when a connection (or a dial) ends, with why.
	OnDisconnect func(url string, err error)

	// Window is how many outbox items may be awaiting their reply at once on
	// a connection. The default, 1, makes items land in the order written.
	Window int
	// SyncLimit is the page size of the client's syncs (default and cap:
	// parley.MaxPage).
	SyncLimit int
	// RequestTimeout bounds the client's own requests (sync, convs, outbox
	// items) and a dial; no reply within it ends the connection, and the
	// client reconnects. Default 15s.
	RequestTimeout time.Duration
	// BackoffBase and BackoffMax shape the reconnect and retry delays:
	// full jitter, a uniform draw from [0, min(BackoffMax, BackoffBase·2^n)).
	// Defaults 100ms and 5s. A connection that stayed up longer than
	// BackoffMax resets n.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// PingInterval is how often the connection is checked with a WebSocket
	// ping; no pong within RequestTimeout ends it (default 15s; negative
	// disables).
	PingInterval time.Duration

	// KeepEnded is how long an item that ended (sent, dup, or a terminal
	// code such as ORIGINAL_EXPIRED) stays in the outbox file after it
	// ended, readable by Outcomes and Wait. Older ended items are deleted
	// when the client opens and every hour while Run runs, so the file
	// does not grow forever. Pending items are never deleted. Default
	// DefaultKeepEnded (7 days); negative keeps ended items forever (a
	// checker that audits every outcome).
	KeepEnded time.Duration

	HTTPClient *http.Client // for the upgrade request; nil: http.DefaultClient
	Log        *slog.Logger // nil: discard
}

// DefaultKeepEnded is the default of Options.KeepEnded.
const DefaultKeepEnded = 7 * 24 * time.Hour

// pruneEvery is how often Run deletes ended items older than KeepEnded.
const pruneEvery = time.Hour

func (o Options) withDefaults() Options {
	if o.Handler == nil {
		o.Handler = NopHandler{}
	}
	if o.Window < 1 {
		o.Window = 1
	}
	if o.SyncLimit < 1 || o.SyncLimit > parley.MaxPage {
		o.SyncLimit = parley.MaxPage
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 15 * time.Second
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 100 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 5 * time.Second
	}
	if o.BackoffMax < o.BackoffBase {
		o.BackoffMax = o.BackoffBase
	}
	if o.PingInterval == 0 {
		o.PingInterval = 15 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.KeepEnded == 0 {
		o.KeepEnded = DefaultKeepEnded
	}
	return o
}

var cryptoRand = rand.Reader

// ErrClosed is returned by methods of a closed Client.
var ErrClosed = errors.New("client: closed")

// ErrConnLost fails a request whose connection ended before its reply: its
// outcome is unknown, so it is UNAVAILABLE (retry with the same key).
var ErrConnLost = &parley.Error{Code: parley.CodeUnavailable, Msg: "connection lost before the reply; the outcome is unknown"}

// IsTerminal reports whether err carries a protocol code that ends a
// request: every code parley.Codes marks not retryable. It is false for
// UNAVAILABLE, RATE_LIMITED, unknown codes, and errors without a code (no
// reply, a lost connection, a local failure): their outcome is unknown or
// the request had no effect, and the request is kept and retried.
func IsTerminal(err error) bool {
	var e *parley.Error
	return errors.As(err, &e) && e.Code.IsTerminal()
}

// Client is a Parley client. Its methods are safe for concurrent use.
type Client struct {
	opts     Options
	log      *slog.Logger
	box      *outbox
	now      func() time.Time
	every    time.Duration   // how often Run prunes ended items (pruneEvery)
	rand     io.Reader       // cmids
	jitter   func() float64  // backoff draws in [0, 1)
	rid      atomic.Uint64   // request ids, unique per Client
	kick     chan struct{}   // a new outbox item is on disk
	closing  context.Context // done once Close began
	closeNow context.CancelFunc

	running   atomic.Bool
	runs      sync.WaitGroup // the Run in progress; Close waits for it
	closeOnce sync.Once

	mu      sync.Mutex
	cur     *session               // the live connection, nil when none
	changed chan struct{}          // closed and replaced whenever cur changes
	cursors map[string]Cursor      // the file's cursors, plus conversations learnt but not yet synced
	waiters map[string][]chan Item // Wait callers, by cmid
	outMu   sync.Mutex             // orders outcome writes with their OnOutcome calls
}

// Open opens (creating if needed) the outbox file of opts.Outbox. Items
// pending in it are sent once Run connects; ended items older than
// opts.KeepEnded are deleted.
func Open(ctx context.Context, opts Options) (*Client, error) {
	return open(ctx, opts, time.Now)
}

// open is Open on the clock now.
func open(ctx context.Context, opts Options, now func() time.Time) (*Client, error) {
	opts = opts.withDefaults()
	box, err := openOutbox(ctx, opts.Outbox)
	if err != nil {
		return nil, err
	}
	if _, err := box.prune(ctx, opts.KeepEnded, now()); err != nil {
		box.close()
		return nil, err
	}
	cursors, err := box.cursors(ctx)
	if err != nil {
		box.close()
		return nil, err
	}
	closing, closeNow := context.WithCancel(context.Background())
	c := &Client{
		opts:     opts,
		log:      opts.Log,
		box:      box,
		now:      now,
		every:    pruneEvery,
		rand:     cryptoRand,
		jitter:   mrand.Float64,
		kick:     make(chan struct{}, 1),
		closing:  closing,
		closeNow: closeNow,
		changed:  make(chan struct{}),
		cursors:  cursors,
		waiters:  map[string][]chan Item{},
	}
	return c, nil
}

// Close ends Run, if it is running, waits for it to return, and closes the
// outbox file. Pending items stay in the file for the next Client.
func (c *Client) Close() error {
	err := ErrClosed
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closeNow()
		c.mu.Unlock()
		c.runs.Wait()
		err = c.box.close()
	})
	return err
}

// newCMID returns a random UUIDv4 in text form.
func (c *Client) newCMID() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(c.rand, b[:]); err != nil {
		return "", fmt.Errorf("client: random cmid: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

// Enqueue writes a message to the outbox and returns once it is on disk;
// Run sends it. A request the server would refuse as INVALID_ARGUMENT
// (bad conversation id, empty or oversized body) is refused here and never
// written. An error means the item was not written; ctx is only checked
// before the write begins (a write is never cut in the middle).
func (c *Client) Enqueue(ctx context.Context, conv, body string) (Item, error) {
	return c.enqueue(ctx, Item{Kind: KindSend, Conv: conv, Body: body})
}

// EnqueueRecall writes a recall of the message at target to the outbox and
// returns once it is on disk.
func (c *Client) EnqueueRecall(ctx context.Context, conv string, target int64) (Item, error) {
	return c.enqueue(ctx, Item{Kind: KindRecall, Conv: conv, Target: target})
}

// EnqueueReply writes a reply to the message at replyTo to the outbox
// and returns once it is on disk (a send with reply_to).
func (c *Client) EnqueueReply(ctx context.Context, conv string, replyTo int64, body string) (Item, error) {
	return c.enqueue(ctx, Item{Kind: KindSend, Conv: conv, Body: body, ReplyTo: replyTo})
}

// EnqueueEdit writes an edit of the message at target to the outbox and
// returns once it is on disk.
func (c *Client) EnqueueEdit(ctx context.Context, conv string, target int64, body string) (Item, error) {
	return c.enqueue(ctx, Item{Kind: KindEdit, Conv: conv, Target: target, Body: body})
}

// EnqueueReact writes a reaction (on: set it; off: remove it) to the
// message at target to the outbox and returns once it is on disk.
func (c *Client) EnqueueReact(ctx context.Context, conv string, target int64, emoji string, on bool) (Item, error) {
	return c.enqueue(ctx, Item{Kind: KindReact, Conv: conv, Target: target, Emoji: emoji, On: on})
}

// validate refuses an item the server would refuse as INVALID_ARGUMENT.
func (it Item) validate() error {
	switch it.Kind {
	case KindSend:
		if it.ReplyTo < 0 {
			return parley.Errorf(parley.CodeInvalidArgument, "reply_to must be a seq of at least 1")
		}
		return parley.ValidateSend(parley.SendRequest{Conv: it.Conv, CMID: it.CMID, Body: it.Body, ReplyTo: it.ReplyTo})
	case KindRecall:
		return parley.ValidateRecall(parley.RecallRequest{Conv: it.Conv, Target: it.Target, CMID: it.CMID})
	case KindEdit:
		return parley.ValidateEdit(parley.EditRequest{Conv: it.Conv, Target: it.Target, CMID: it.CMID, Body: it.Body})
	case KindReact:
		return parley.ValidateReact(parley.ReactRequest{Conv: it.Conv, Target: it.Target, Emoji: it.Emoji, On: it.On, CMID: it.CMID})
	}
	return fmt.Errorf("client: unknown item kind %q", it.Kind)
}

func (c *Client) enqueue(ctx context.Context, it Item) (Item, error) {
	select {
	case <-c.closing.Done():
		return Item{}, ErrClosed
	default:
	}
	cmid, err := c.newCMID()
	if err != nil {
		return Item{}, err
	}
	it.CMID = cmid
	if err := it.validate(); err != nil {
		return Item{}, err
	}
	it.Created = c.now().UTC().Truncate(time.Millisecond)
	if err := ctx.Err(); err != nil {
		return Item{}, fmt.Errorf("client: item not written: %w", err)
	}
	// The write does not follow ctx once it began: a cancel in the middle
	// of the INSERT could leave the row written while Enqueue reports an
	// error and no kick wakes the pump, so the item would wait, unsent,
	// for the next connection. An error from here on means not written.
	it, err = c.box.add(context.WithoutCancel(ctx), it)
	if err != nil {
		return Item{}, err
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return it, nil
}

// Send writes a message to the outbox (on disk before anything is sent) and
// waits for its outcome. The error is the terminal *parley.Error the item
// ended with, or, when ctx ends first, an error wrapping ctx.Err(): the item
// is then still pending and will be sent once connected (Wait for it).
func (c *Client) Send(ctx context.Context, conv, body string) (Item, error) {
	it, err := c.Enqueue(ctx, conv, body)
	if err != nil {
		return it, err
	}
	return c.Wait(ctx, it.CMID)
}

// Recall writes a recall of the message at target to the outbox, under a
// cmid of its own, and waits for its outcome, like Send.
func (c *Client) Recall(ctx context.Context, conv string, target int64) (Item, error) {
	it, err := c.EnqueueRecall(ctx, conv, target)
	if err != nil {
		return it, err
	}
	return c.Wait(ctx, it.CMID)
}

// Reply writes a reply to the message at replyTo to the outbox and waits
// for its outcome, like Send. The server files it in the thread of
// replyTo's root.
func (c *Client) Reply(ctx context.Context, conv string, replyTo int64, body string) (Item, error) {
	it, err := c.EnqueueReply(ctx, conv, replyTo, body)
	if err != nil {
		return it, err
	}
	return c.Wait(ctx, it.CMID)
}

// Edit writes an edit of the message at target to the outbox and waits
// for its outcome, like Send. Item.Seq is the seq of the edit event.
func (c *Client) Edit(ctx context.Context, conv string, target int64, body string) (Item, error) {
	it, err := c.EnqueueEdit(ctx, conv, target, body)
	if err != nil {
		return it, err
	}
	return c.Wait(ctx, it.CMID)
}

// React sets (on) or removes a reaction with emoji on the message at
// target and waits for its outcome, like Send. A state that already held
// ends the item with Dup and the seq of the event that set it (0 when
// none did).
func (c *Client) React(ctx context.Context, conv string, target int64, emoji string, on bool) (Item, error) {
	it, err := c.EnqueueReact(ctx, conv, target, emoji, on)
	if err != nil {
		return it, err
	}
	return c.Wait(ctx, it.CMID)
}

// Wait waits until the outbox item with cmid has ended and returns it with
// its Err. An item that ended longer than Options.KeepEnded ago may be gone:
// Wait then returns an error without a code. When ctx ends first it returns the pending item and an error
// wrapping ctx.Err().
func (c *Client) Wait(ctx context.Context, cmid string) (Item, error) {
	ch := make(chan Item, 1)
	c.mu.Lock()
	c.waiters[cmid] = append(c.waiters[cmid], ch)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		ws := c.waiters[cmid]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(c.waiters, cmid)
		} else {
			c.waiters[cmid] = ws
		}
	}()
	it, err := c.box.item(ctx, cmid)
	if err != nil {
		return it, err
	}
	if it.Done {
		return it, it.Err()
	}
	select {
	case it := <-ch:
		return it, it.Err()
	case <-ctx.Done():
		return it, fmt.Errorf("client: item %s still pending: %w", cmid, ctx.Err())
	case <-c.closing.Done():
		return it, ErrClosed
	}
}

// Pending returns the items that have not ended, in the order written (the
// order they are sent).
func (c *Client) Pending(ctx context.Context) ([]Item, error) {
	return c.box.items(ctx, false, 0, 0)
}

// Outcomes returns every item that has ended, with its outcome, in the
// order written: those that ended within Options.KeepEnded (older ones are
// deleted).
func (c *Client) Outcomes(ctx context.Context) ([]Item, error) {
	return c.box.items(ctx, true, 0, 0)
}

// Cursor returns the client's cursor in conv, and whether it knows conv.
func (c *Client) Cursor(conv string) (Cursor, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.cursors[conv]
	return cur, ok
}

// setCursor stores a cursor, in the file first: the caller has handed
// everything up to it to the Handler.
func (c *Client) setCursor(ctx context.Context, conv string, cur Cursor) error {
	if err := c.box.saveCursor(context.WithoutCancel(ctx), conv, cur); err != nil {
		return err
	}
	c.mu.Lock()
	c.cursors[conv] = cur
	c.mu.Unlock()
	return nil
}

// learn notes a conversation the client has not synced yet.
func (c *Client) learn(conv string) {
	c.mu.Lock()
	if _, ok := c.cursors[conv]; !ok {
		c.cursors[conv] = Cursor{}
	}
	c.mu.Unlock()
}

// finish records the outcome of an item and tells whoever waits for it.
// The write does not follow ctx: a reply that arrived is recorded even
// while the connection shuts down. It returns the error of a write that
// failed: the item is then still pending, and only a new connection sends
// it again (the pump of this one has moved past it).
func (c *Client) finish(ctx context.Context, it Item, out Item) error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	done, ok, err := c.box.finish(context.WithoutCancel(ctx), it.CMID, out, c.now())
	if err != nil {
		c.log.Error("client: outcome not recorded; the item stays pending and is resent on a new connection", "cmid", it.CMID, "err", err)
		return err
	}
	if !ok {
		return nil
	}
	c.mu.Lock()
	for _, ch := range c.waiters[it.CMID] {
		select {
		case ch <- done:
		default:
		}
	}
	c.mu.Unlock()
	if c.opts.OnOutcome != nil {
		c.opts.OnOutcome(done)
	}
	return nil
}

// live returns the current connection, waiting for one until ctx ends.
func (c *Client) live(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		s, ch := c.cur, c.changed
		c.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("client: not connected: %w", ctx.Err())
		case <-c.closing.Done():
			return nil, ErrClosed
		}
	}
}

// setLive makes s the connection requests go to (nil: none).
func (c *Client) setLive(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = s
	close(c.changed)
	c.changed = make(chan struct{})
}

// unsetLive clears s if it is still the live connection.
func (c *Client) unsetLive(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == s {
		c.cur = nil
		close(c.changed)
		c.changed = make(chan struct{})
	}
}

// Do sends one request on the live connection (waiting for one) and
// returns its reply. It sets req.RID. An error frame comes back as a
// *parley.Error with the frame itself (retry_after_ms, request_id); a
// connection that ends before the reply is ErrConnLost (outcome unknown);
// ctx ending first returns an error wrapping ctx.Err(). Do does not retry
// and does not touch the outbox: sends through Do are the caller's to
// account for.
func (c *Client) Do(ctx context.Context, req wire.Request) (wire.Frame, error) {
	for {
		s, err := c.live(ctx)
		if err != nil {
			return wire.Frame{}, err
		}
		f, err := s.do(ctx, req)
		if errors.Is(err, errNotSent) {
			continue // the connection closed before the request went out: use the next one
		}
		return f, err
	}
}

// Page is a sync reply.
type Page struct {
	Conv      string
	Events    []wire.Event
	NextAfter int64
	HasMore   bool
	Head      int64
	MinSeq    int64
	Trimmed   bool
	Epoch     int64
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func pageOf(f wire.Frame) Page {
	return Page{
		Conv: f.Conv, Events: f.Events, NextAfter: deref(f.NextAfter), HasMore: deref(f.HasMore),
		Head: deref(f.Head), MinSeq: deref(f.MinSeq), Trimmed: deref(f.Trimmed), Epoch: deref(f.Epoch),
	}
}

// Sync reads events of conv after the seq after (limit <= 0: the server's
// default page). It does not touch the client's cursors or the Handler.
func (c *Client) Sync(ctx context.Context, conv string, after int64, limit int) (Page, error) {
	req := wire.Request{T: wire.TSync, Conv: conv, After: &after}
	if limit > 0 {
		req.Limit = &limit
	}
	f, err := c.Do(ctx, req)
	if err != nil {
		return Page{}, err
	}
	return pageOf(f), nil
}

// Fetch reads one event.
func (c *Client) Fetch(ctx context.Context, conv string, seq int64) (wire.Event, error) {
	f, err := c.Do(ctx, wire.Request{T: wire.TFetch, Conv: conv, Seq: &seq})
	if err != nil {
		return wire.Event{}, err
	}
	if f.Ev == nil {
		return wire.Event{}, fmt.Errorf("client: fetch: reply %q without an event", f.T)
	}
	return *f.Ev, nil
}

// Ack moves this device's delivered cursor in conv to seq and returns the
// cursor (a lower seq is a no-op answering the current one).
func (c *Client) Ack(ctx context.Context, conv string, seq int64) (int64, error) {
	f, err := c.Do(ctx, wire.Request{T: wire.TAck, Conv: conv, Seq: &seq})
	return deref(f.Delivered), err
}

// Read moves the user's read cursor in conv to seq and returns the cursor.
func (c *Client) Read(ctx context.Context, conv string, seq int64) (int64, error) {
	f, err := c.Do(ctx, wire.Request{T: wire.TRead, Conv: conv, Seq: &seq})
	return deref(f.Read), err
}

// Convs lists all the caller's conversations, latest activity first,
// walking the server's pages.
func (c *Client) Convs(ctx context.Context) ([]wire.Conv, error) {
	return walkConvs(func(r wire.Request) (wire.Frame, error) { return c.Do(ctx, r) })
}

// SearchResults is one page of a search: the hits, newest first, each the
// message as the caller reads it with the matched ranges of its body in
// code points; Next, when set, is the Cursor of the following page.
type SearchResults struct {
	Hits []wire.Hit
	Next string
}

// Search finds the messages matching r that the user may read, one page
// at a time (pass the reply's Next as r.Cursor for the following one). It
// does not touch the client's cursors, the outbox or the Handler. The
// query language and the errors (INVALID_ARGUMENT, NOT_MEMBER, UNAVAILABLE
// while an index is built) are the server's: docs/protocol.md.
func (c *Client) Search(ctx context.Context, r parley.SearchRequest) (SearchResults, error) {
	req := wire.Request{T: wire.TSearch, Q: r.Query, Conv: r.Conv, From: r.From, Cursor: r.Cursor}
	if r.Limit != 0 {
		req.Limit = &r.Limit
	}
	if !r.Before.IsZero() {
		req.Before = r.Before.UTC().Format(time.RFC3339Nano)
	}
	f, err := c.Do(ctx, req)
	if err != nil {
		return SearchResults{}, err
	}
	return SearchResults{Hits: f.Hits, Next: f.Next}, nil
}

// Typing tells the members of conv that the user is typing there. The
// server answers nothing on success and drops repeats within
// parley.TypingEvery; so Typing waits for no reply and reports only a
// failure to write the frame.
func (c *Client) Typing(ctx context.Context, conv string) error {
	return c.post(ctx, wire.Request{T: wire.TTyping, Conv: conv})
}

// SetPresence reports this connection as online or away (idle). A new
// connection starts online: after a reconnect, call it again.
func (c *Client) SetPresence(ctx context.Context, state parley.PresenceState) error {
	if err := parley.CheckSocketState(string(state)); err != nil {
		return err
	}
	return c.post(ctx, wire.Request{T: wire.TPresence, State: string(state)})
}

// post writes req, without a rid, on the live connection (waiting for
// one).
func (c *Client) post(ctx context.Context, req wire.Request) error {
	for {
		s, err := c.live(ctx)
		if err != nil {
			return err
		}
		err = s.post(ctx, req)
		if errors.Is(err, errNotSent) {
			continue
		}
		return err
	}
}
