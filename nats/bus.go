// Package nats is a parley.Bus over core NATS (github.com/nats-io/nats.go),
// for deployments whose gateways should not all hear every notice.
//
// Subjects. A notice is published on the subjects of those who may need
// it, and a gateway subscribes only to the subjects of its interest
// (parley.Bus.Interest):
//
//	PREFIX.c.SHARD   event notices of the conversations hashed to SHARD
//	                 (FNV-1a of the id modulo Options.Shards), and their
//	                 typing and presence notices (a presence change is
//	                 published once per conversation of the user, so it
//	                 reaches every gateway watching one of them)
//	PREFIX.u.USER    read-cursor and account notices of USER, and event
//	                 notices that name USER (membership changes); USER
//	                 with '.' written as '~' (a NATS token separator)
//	PREFIX.lost      a publisher dropped notices: every gateway calls Lost
//
// PREFIX is Options.Prefix ("parley", or ?prefix= on the URL): every
// gateway of a deployment uses the same one, and deployments that share a
// NATS server use different ones, so they never hear each other.
//
// A gateway that watches a conversation subscribes to its shard, and to
// the subject of every user it has sockets of. A shard carries its other
// conversations too; the bus filters them out before the handler, so it is
// Selective: the handler hears only notices of its declared interest (a
// membership notice that comes on both a watched shard and a served user
// is delivered once, from the shard).
//
// Delivery is core NATS: at most once, in publish order per publisher and
// subject, which is per conversation for event notices and per user for
// the rest (parley.Bus). Nothing is stored in NATS; the store fills every
// gap.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/busqueue"
)

// Options tunes a Bus. The zero value is the production setting.
type Options struct {
	// Prefix is the first token of every subject, [A-Za-z0-9_-]{1,32};
	// every gateway of a deployment uses the same one. Default "parley".
	Prefix string
	// Shards is the number of conversation subjects (default 256): more
	// shards, fewer notices a gateway filters out, more subscriptions.
	// Every gateway of a deployment must use the same number.
	Shards int
	// MaxBuffered bounds the notices waiting to be sent, and separately
	// those waiting for the handler. Default 65536.
	MaxBuffered int
	// MaxMessage bounds the bytes of one NATS message (default 64 KiB,
	// and never above the server's max_payload): a batch of notices for
	// one subject is split into messages of at most this size.
	MaxMessage int
	// Timeout bounds connecting and the last flush when Run ends.
	// Default 5s.
	Timeout time.Duration
	// PingEvery is the client's keepalive ping interval; two unanswered
	// pings declare the connection dead. Default 5s.
	PingEvery time.Duration
	// Name is the connection name the server shows (default "parley").
	Name string
	// Logger receives connection changes and malformed messages. Default
	// slog.Default().
	Logger *slog.Logger
	// SkipOwn asks the server not to deliver this bus's own messages to
	// its subscriptions (NATS "no echo"), loss announcements included:
	// for a publisher that has already handed its notices to its own
	// handler, as gateway.Hub.Publish does. Off, the bus keeps the
	// parley.Bus contract's "this one included".
	SkipOwn bool
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "parley"
	}
	if o.Shards <= 0 {
		o.Shards = 256
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = 65536
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = 64 << 10
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 5 * time.Second
	}
	if o.Name == "" {
		o.Name = "parley"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Bus is a parley.Bus over core NATS.
//
// Beyond the parley.Bus contract:
//   - Publish only appends to a bounded buffer; Run's publisher sends
//     what is buffered as one message per subject (split at MaxMessage).
//     A notice the publisher drops (buffer overflow, a send refused by the
//     client, whose reconnect buffer is full) is announced on PREFIX.lost
//     with the next send, on which every gateway calls Lost.
//   - Carried events (Notice.Event) travel with their notices; one that
//     would take its notice over MaxMessage (far above what a publisher
//     attaches, parley.MaxNoticeBody) goes as ids only.
//   - The connection is kept by nats.go: reconnects forever, with jitter.
//     When it comes back after a loss (or after a first connection that
//     needed retries), the subscriptions are restored by the client and
//     the handler gets Lost: notices sent meanwhile were missed, and the
//     gateway polls the store for them (heads of watched conversations),
//     resyncing its sockets only when that poll fails.
//   - Received messages go through one channel, in arrival order, to a
//     goroutine that decodes and filters them; the handler is called from
//     a third one, so a slow handler never stalls the connection. A
//     handler too slow for the bound (MaxBuffered, or the client's slow
//     consumer limit) gets Lost instead of what overflowed.
type Bus struct {
	url  string
	opts Options
	log  *slog.Logger

	out     busqueue.Queue // published, not yet sent
	in      busqueue.Queue // received, not yet delivered
	running atomic.Bool

	mu     sync.RWMutex
	nc     *natsgo.Conn     // nil unless Run is connected (or connecting)
	msgs   chan *natsgo.Msg // the one delivery channel of every subscription
	watch  map[string]struct{}
	shards map[int]*shardSub
	users  map[string]*natsgo.Subscription // served users (nil: not subscribed yet)
	lostSb *natsgo.Subscription

	subjects atomic.Int64 // live subscriptions, for tests and metrics
}

type shardSub struct {
	convs int
	sub   *natsgo.Subscription
}

var _ parley.Bus = (*Bus)(nil)

// NewBus returns a bus on the NATS server at url: nats://HOST:PORT, or a
// comma-separated list of servers, optionally followed by ?prefix=NAME,
// which sets Options.Prefix (two deployments that share a NATS server need
// prefixes of their own; a prefix in both the URL and opts must agree).
// It only parses: Run connects, and a server that is down at start is
// retried, not fatal.
func NewBus(url string, opts Options) (*Bus, error) {
	url, query, _ := strings.Cut(url, "?")
	if query != "" {
		q, err := neturl.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("nats: bus: query %q: %w", query, err)
		}
		for k, v := range q {
			if k != "prefix" {
				return nil, fmt.Errorf("nats: bus: unknown parameter %q (want prefix)", k)
			}
			if len(v) != 1 || opts.Prefix != "" && opts.Prefix != v[0] {
				return nil, fmt.Errorf("nats: bus: more than one prefix (%q and %q)", opts.Prefix, v)
			}
			opts.Prefix = v[0]
			if opts.Prefix == "" {
				return nil, errors.New("nats: bus: empty prefix")
			}
		}
	}
	opts = opts.withDefaults()
	if !validPrefix(opts.Prefix) {
		return nil, fmt.Errorf("nats: bus: prefix %q must match [A-Za-z0-9_-]{1,32}", opts.Prefix)
	}
	for _, u := range strings.Split(url, ",") {
		if !strings.HasPrefix(strings.TrimSpace(u), "nats://") {
			return nil, fmt.Errorf("nats: bus: server %q: want nats://HOST:PORT", u)
		}
	}
	b := &Bus{
		url: url, opts: opts, log: opts.Logger,
		watch:  map[string]struct{}{},
		shards: map[int]*shardSub{},
		users:  map[string]*natsgo.Subscription{},
	}
	b.out.Init(opts.MaxBuffered)
	b.in.Init(opts.MaxBuffered)
	return b, nil
}

func validPrefix(s string) bool {
	if len(s) < 1 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Subscriptions is the number of NATS subscriptions the bus holds now.
func (b *Bus) Subscriptions() int { return int(b.subjects.Load()) }

// Publish queues ns to be sent. It never blocks and never touches the
// network.
func (b *Bus) Publish(ns ...parley.Notice) {
	if len(ns) > 0 {
		b.out.Push(false, ns)
	}
}

// Interest changes the subscriptions. It takes the bus's lock and, while
// Run is connected, hands SUB and UNSUB to the client, which writes them
// to its buffer (never the network) and sends them within moments.
func (b *Bus) Interest(in parley.Interest) {
	if in.Empty() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range in.Watch {
		if _, ok := b.watch[c]; ok {
			continue
		}
		b.watch[c] = struct{}{}
		k := b.shard(c)
		s := b.shards[k]
		if s == nil {
			s = &shardSub{}
			b.shards[k] = s
		}
		if s.convs++; s.convs == 1 {
			s.sub = b.subscribeLocked(b.shardSubject(k))
		}
	}
	for _, u := range in.Serve {
		if _, ok := b.users[u]; !ok {
			b.users[u] = b.subscribeLocked(b.userSubject(u))
		}
	}
	for _, c := range in.Unwatch {
		if _, ok := b.watch[c]; !ok {
			continue
		}
		delete(b.watch, c)
		k := b.shard(c)
		if s := b.shards[k]; s != nil {
			if s.convs--; s.convs <= 0 {
				b.unsubscribe(s.sub)
				delete(b.shards, k)
			}
		}
	}
	for _, u := range in.Unserve {
		if sub, ok := b.users[u]; ok {
			b.unsubscribe(sub)
			delete(b.users, u)
		}
	}
}

// subscribeLocked subscribes subject on the running connection (nil when
// there is none: Run subscribes when it connects).
func (b *Bus) subscribeLocked(subject string) *natsgo.Subscription {
	if b.nc == nil {
		return nil
	}
	sub, err := b.nc.ChanSubscribe(subject, b.msgs)
	if err != nil {
		// Only a closed connection refuses: Run is ending, or will
		// resubscribe everything when it runs again.
		b.log.Warn("nats: bus: subscribe failed", "subject", subject, "err", err)
		return nil
	}
	b.subjects.Add(1)
	return sub
}

func (b *Bus) unsubscribe(sub *natsgo.Subscription) {
	if sub == nil {
		return
	}
	b.subjects.Add(-1)
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) && !errors.Is(err, natsgo.ErrBadSubscription) {
		b.log.Warn("nats: bus: unsubscribe failed", "subject", sub.Subject, "err", err)
	}
}

// shard is conv's shard: FNV-1a, stable across processes and versions.
func (b *Bus) shard(conv string) int {
	var x uint32 = 2166136261
	for i := 0; i < len(conv); i++ {
		x ^= uint32(conv[i])
		x *= 16777619
	}
	return int(x % uint32(b.opts.Shards))
}

func (b *Bus) shardSubject(k int) string {
	return b.opts.Prefix + ".c." + strconv.Itoa(k)
}

func (b *Bus) userSubject(u string) string {
	return b.opts.Prefix + ".u." + strings.ReplaceAll(u, ".", "~")
}

func (b *Bus) lostSubject() string { return b.opts.Prefix + ".lost" }

// Run connects, delivers notices to h until ctx ends, closes the
// connection (after one last flush of what was published, within
// Timeout), and returns ctx.Err(). Only one Run may be active at a time; a
// second gets an error.
func (b *Bus) Run(ctx context.Context, h parley.BusHandler) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("nats: bus: Run is already running")
	}
	defer b.running.Store(false)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	nc, err := b.connect(ctx)
	if err != nil {
		return err
	}
	msgs := make(chan *natsgo.Msg, b.opts.MaxBuffered)
	b.attach(nc, msgs)
	var wg sync.WaitGroup
	wg.Go(func() { b.publishLoop(ctx, nc) })
	wg.Go(func() { b.receiveLoop(ctx, msgs) })
	b.in.Deliver(ctx, h)
	wg.Wait()
	b.detach()
	if nc.IsConnected() {
		if err := nc.FlushTimeout(b.opts.Timeout); err != nil {
			b.log.Warn("nats: bus: last flush before shutdown failed", "err", err)
		}
	}
	nc.Close()
	return ctx.Err()
}

// connect makes Run's connection. It does not wait for a server: the
// client retries the first connection as it retries after a loss. A first
// connection that needed retries, every reconnection and a slow consumer
// are reported to the handler as a loss (notices were missed).
func (b *Bus) connect(ctx context.Context) (*natsgo.Conn, error) {
	var retried atomic.Bool
	opts := []natsgo.Option{
		natsgo.Name(b.opts.Name),
		natsgo.Timeout(b.opts.Timeout),
		natsgo.RetryOnFailedConnect(true),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(100 * time.Millisecond),
		natsgo.ReconnectJitter(100*time.Millisecond, time.Second),
		natsgo.PingInterval(b.opts.PingEvery),
		natsgo.MaxPingsOutstanding(2),
		natsgo.ConnectHandler(func(*natsgo.Conn) {
			// A first connection that needed retries: notices published
			// meanwhile by other gateways were missed.
			if retried.Load() {
				b.in.Push(true, nil)
			}
		}),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if ctx.Err() == nil {
				b.log.Warn("nats: bus: connection lost; reconnecting", "err", err)
			}
		}),
		natsgo.ReconnectErrHandler(func(_ *natsgo.Conn, err error) {
			retried.Store(true)
		}),
		natsgo.ReconnectHandler(func(c *natsgo.Conn) {
			b.log.Info("nats: bus: reconnected; polling the store for what was missed", "server", c.ConnectedUrlRedacted())
			b.in.Push(true, nil)
		}),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			if errors.Is(err, natsgo.ErrSlowConsumer) {
				b.in.Push(true, nil)
				return
			}
			b.log.Warn("nats: bus: error", "err", err)
		}),
	}
	if b.opts.SkipOwn {
		opts = append(opts, natsgo.NoEcho())
	}
	nc, err := natsgo.Connect(b.url, opts...)
	if err != nil {
		// With RetryOnFailedConnect only a bad option fails here.
		return nil, fmt.Errorf("nats: bus: connect: %w", err)
	}
	if !nc.IsConnected() {
		retried.Store(true)
		b.log.Warn("nats: bus: cannot connect yet; retrying", "url", b.url)
	}
	return nc, nil
}

// attach makes nc the running connection, its messages going to msgs, and
// subscribes the loss subject and every subject of the interest so far.
func (b *Bus) attach(nc *natsgo.Conn, msgs chan *natsgo.Msg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nc, b.msgs = nc, msgs
	b.lostSb = b.subscribeLocked(b.lostSubject())
	for k, s := range b.shards {
		s.sub = b.subscribeLocked(b.shardSubject(k))
	}
	for u := range b.users {
		b.users[u] = b.subscribeLocked(b.userSubject(u))
	}
}

// detach forgets the running connection and its subscriptions (the
// interest stays, for the next Run).
func (b *Bus) detach() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nc, b.msgs = nil, nil
	b.lostSb = nil
	for _, s := range b.shards {
		s.sub = nil
	}
	for u := range b.users {
		b.users[u] = nil
	}
	b.subjects.Store(0)
}

// publishLoop sends what Publish buffers.
func (b *Bus) publishLoop(ctx context.Context, nc *natsgo.Conn) {
	max := b.opts.MaxMessage
	if mp := int(nc.MaxPayload()); mp > 0 && mp < max {
		max = mp
	}
	var enc encoder
	b.out.Signal()
	for {
		select {
		case <-ctx.Done():
			// A gateway shutting down still tells the others what it
			// committed last (Run flushes the client after this).
			b.send(nc, &enc, max)
			return
		case <-b.out.Wake():
		}
		b.send(nc, &enc, max)
	}
}

// send publishes what is buffered: the loss marker first if notices were
// dropped, then one message per subject (split at max bytes), subjects in
// the order of their first notice.
func (b *Bus) send(nc *natsgo.Conn, enc *encoder, max int) {
	ns, lost := b.out.Take()
	if lost {
		if err := nc.Publish(b.lostSubject(), nil); err != nil {
			b.out.Push(true, nil)
			return // the notices are dropped too: the marker says so next time
		}
	}
	if len(ns) == 0 {
		return
	}
	// Signals go in messages of their own (version 2), so that a gateway
	// of a version without them skips those and reads every message of
	// committed changes.
	type key struct {
		subject string
		signal  bool
	}
	var order []key
	by := map[key][]parley.Notice{}
	add := func(subject string, n parley.Notice) {
		k := key{subject, n.Signal()}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], n)
	}
	bad := 0
	for _, n := range ns {
		if !encodable(n) {
			bad++
			continue
		}
		switch {
		case n.Signal():
			add(b.shardSubject(b.shard(n.Conv)), n)
		case n.Account() || n.Read():
			add(b.userSubject(n.User), n)
		default:
			add(b.shardSubject(b.shard(n.Conv)), n)
			if n.User != "" {
				add(b.userSubject(n.User), n)
			}
		}
	}
	if bad > 0 {
		b.log.Error("nats: bus: dropped malformed notices (a caller bug)", "count", bad)
	}
	dropped := 0
	for _, k := range order {
		msgs := enc.messages(by[k], max)
		if k.signal {
			msgs = enc.signals(by[k], max)
		}
		for _, msg := range msgs {
			if err := nc.Publish(k.subject, msg); err != nil {
				dropped++
			}
		}
	}
	if dropped > 0 {
		b.log.Warn("nats: bus: publish failed; notices dropped, loss announced with the next send", "messages", dropped)
		b.out.Push(true, nil)
	}
}

// receiveLoop decodes what the subscriptions deliver, keeps what the
// interest asks for, and buffers it for the handler.
func (b *Bus) receiveLoop(ctx context.Context, msgs <-chan *natsgo.Msg) {
	userPrefix := b.opts.Prefix + ".u."
	lostSubject := b.lostSubject()
	var keep []parley.Notice
	for {
		var m *natsgo.Msg
		select {
		case <-ctx.Done():
			return
		case m = <-msgs:
		}
		keep = keep[:0]
		lost := false
		for { // everything already here, in one push
			if m.Subject == lostSubject {
				lost = true
			} else if ns, err := decode(m.Data); err != nil {
				b.log.Warn("nats: bus: skipped a message that is not ours", "subject", m.Subject, "err", err)
			} else {
				keep = b.filter(keep, ns, strings.HasPrefix(m.Subject, userPrefix))
			}
			if len(keep) >= b.opts.MaxBuffered {
				break
			}
			select {
			case m = <-msgs:
				continue
			default:
			}
			break
		}
		if lost || len(keep) > 0 {
			b.in.Push(lost, keep)
		}
	}
}

// filter appends to keep the notices of ns that the interest asks for. A
// message of a user subject holds that user's notices; a membership
// notice in it is kept only when its conversation is not watched, for then
// it comes from the shard as well.
func (b *Bus) filter(keep, ns []parley.Notice, fromUser bool) []parley.Notice {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, n := range ns {
		_, watched := b.watch[n.Conv]
		if n.Account() || n.Read() || fromUser {
			if !fromUser {
				continue // never sent there
			}
			if _, served := b.users[n.User]; !served {
				continue
			}
			if !n.Account() && !n.Read() && watched {
				continue // the shard's copy is delivered
			}
			keep = append(keep, n)
			continue
		}
		if watched {
			keep = append(keep, n)
		}
	}
	return keep
}
