package webpush

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
)

// Targets is what the worker reads and writes of the store.
type Targets interface {
	PushTargets(ctx context.Context, msgs []parley.PushMessage) ([]parley.PushTarget, error)
	RemovePushSubscription(ctx context.Context, id, endpoint string) (bool, error)
}

// Defaults of WorkerOptions.
const (
	DefaultDelay      = 2 * time.Second
	DefaultTTL        = 24 * time.Hour
	DefaultAttempts   = 4
	DefaultBackoff    = time.Second
	MaxBackoff        = time.Minute
	DefaultQueue      = 4096
	DefaultDeliveries = 32
	DefaultTimeout    = 10 * time.Second
)

// WorkerOptions configure a Worker. Store and Key are required.
type WorkerOptions struct {
	Store Targets
	// Key returns the VAPID key (app.Service.VAPIDKey: the store's, read
	// once).
	Key func(ctx context.Context) (*Key, error)
	// Allow returns push.allow_endpoints in force; Subject the VAPID sub
	// ("" for DefaultSubject).
	Allow   func() []string
	Subject func() string
	// Delay is how long after a send its pushes are decided: a connected
	// client acks within it, and its devices are then not pushed.
	Delay time.Duration
	// TTL is how long a push service keeps an undelivered push.
	TTL time.Duration
	// Attempts bounds the tries of one push that the push service answers
	// 429 or 5xx, or a network error; Backoff is the first pause between
	// them, doubling up to MaxBackoff (a Retry-After is honoured within
	// MaxBackoff).
	Attempts int
	Backoff  time.Duration
	// Queue bounds the sends waiting for their delay: beyond it a send's
	// pushes are dropped (counted), never waited for.
	Queue int
	// Deliveries bounds the pushes in flight at once.
	Deliveries int
	// Timeout bounds one store call and one delivery request.
	Timeout time.Duration
	Log     *slog.Logger
	Now     func() time.Time
}

// Counts are a Worker's counters since it was made.
type Counts struct {
	Sent    int64 // pushes the push service accepted
	Failed  int64 // pushes given up on (refused address, 4xx, attempts spent)
	Removed int64 // subscriptions removed (404 or 410)
	Retried int64 // attempts after the first
	Dropped int64 // sends whose pushes were dropped: the queue was full
	Queued  int64 // sends waiting now
}

// Worker pushes committed messages: Notify queues a (conv, seq) without
// blocking; after the delay the worker asks the store who to push
// (PushTargets, filtered in the query: one call for every message that
// is due, up to parley.MaxPushBatch) and delivers a hint {conv, seq} to
// each subscription. Only the gateway that committed a send is told of it,
// so one send is pushed once.
type Worker struct {
	o      WorkerOptions
	sender *Sender
	queue  chan job
	sem    chan struct{}

	sent, failed, removed, retried, dropped atomic.Int64
}

type job struct {
	conv string
	seq  int64
	due  time.Time
}

// NewWorker returns a Worker; Run starts it.
func NewWorker(o WorkerOptions) *Worker {
	if o.Delay < 0 {
		o.Delay = 0
	}
	o.TTL = cmpDur(o.TTL, DefaultTTL)
	o.Backoff = cmpDur(o.Backoff, DefaultBackoff)
	o.Timeout = cmpDur(o.Timeout, DefaultTimeout)
	if o.Attempts < 1 {
		o.Attempts = DefaultAttempts
	}
	if o.Queue < 1 {
		o.Queue = DefaultQueue
	}
	if o.Deliveries < 1 {
		o.Deliveries = DefaultDeliveries
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := NewSender(nil, o.Timeout)
	s.Allow, s.Subject, s.Now = o.Allow, o.Subject, o.Now
	return &Worker{o: o, sender: s, queue: make(chan job, o.Queue), sem: make(chan struct{}, o.Deliveries)}
}

func cmpDur(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Notify queues the pushes of message seq of conv, committed now. It never
// blocks: with the queue full, they are dropped and counted.
func (w *Worker) Notify(conv string, seq int64) {
	select {
	case w.queue <- job{conv: conv, seq: seq, due: w.o.Now().Add(w.o.Delay)}:
	default:
		w.dropped.Add(1)
	}
}

// Counts returns the counters.
func (w *Worker) Counts() Counts {
	return Counts{Sent: w.sent.Load(), Failed: w.failed.Load(), Removed: w.removed.Load(), Retried: w.retried.Load(),
		Dropped: w.dropped.Load(), Queued: int64(len(w.queue))}
}

// batchSlack is how early a message may be pushed to share the read of
// the one due before it: nothing beside the push delay.
const batchSlack = 10 * time.Millisecond

// Run delivers until ctx ends, then waits for the deliveries in flight
// (their requests end with ctx).
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	batch := make([]parley.PushMessage, 0, parley.MaxPushBatch)
	for {
		var j job
		select {
		case <-ctx.Done():
			return
		case j = <-w.queue:
		}
		if !sleep(ctx, j.due.Sub(w.o.Now())) {
			return
		}
		// The queue is in due order (one delay for all): what else is
		// due now, or within batchSlack, goes in the same read.
		batch = append(batch[:0], parley.PushMessage{Conv: j.conv, Seq: j.seq})
		for len(batch) < parley.MaxPushBatch && len(w.queue) > 0 {
			if j = <-w.queue; j.due.After(w.o.Now().Add(batchSlack)) {
				w.push(ctx, &wg, batch)
				batch = batch[:0]
				if !sleep(ctx, j.due.Sub(w.o.Now())) {
					return
				}
			}
			batch = append(batch, parley.PushMessage{Conv: j.conv, Seq: j.seq})
		}
		w.push(ctx, &wg, batch)
	}
}

// push reads the targets of a batch of messages and starts a delivery to
// each.
func (w *Worker) push(ctx context.Context, wg *sync.WaitGroup, batch []parley.PushMessage) {
	sctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	key, err := w.o.Key(sctx)
	var targets []parley.PushTarget
	if err == nil {
		targets, err = w.o.Store.PushTargets(sctx, batch)
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.o.Log.Warn("push: targets not read; these messages are not pushed", "messages", len(batch),
				"conv", batch[0].Conv, "seq", batch[0].Seq, "err", err)
		}
		return
	}
	var payload []byte
	for i, pt := range targets {
		if i == 0 || pt.Msg != targets[i-1].Msg {
			payload, _ = json.Marshal(struct {
				Conv string `json:"conv"`
				Seq  int64  `json:"seq"`
			}{pt.Msg.Conv, pt.Msg.Seq})
		}
		m, ok := message(pt.Sub, payload, pt.Msg.Conv, w.o.TTL)
		if !ok {
			w.failed.Add(1)
			continue
		}
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		sub := pt.Sub
		wg.Go(func() {
			defer func() { <-w.sem }()
			w.deliver(ctx, key, sub, m)
		})
	}
}

// message builds the push of payload to sub; false when the stored keys
// do not decode (they were checked when stored).
func message(sub parley.PushSubscription, payload []byte, conv string, ttl time.Duration) (Message, bool) {
	dh, err1 := base64.RawURLEncoding.DecodeString(sub.P256DH)
	auth, err2 := base64.RawURLEncoding.DecodeString(sub.Auth)
	if err1 != nil || err2 != nil {
		return Message{}, false
	}
	return Message{Endpoint: sub.Endpoint, P256DH: dh, Auth: auth, Payload: payload, Topic: Topic(conv), TTL: ttl}, true
}

// deliver sends m, retrying what may pass later with backoff, and removes
// a subscription the push service says is gone.
func (w *Worker) deliver(ctx context.Context, key *Key, sub parley.PushSubscription, m Message) {
	m.Key = key
	pause := w.o.Backoff
	for attempt := 1; ; attempt++ {
		res, after, err := w.sender.Send(ctx, m)
		switch {
		case res == Delivered:
			w.sent.Add(1)
			return
		case res == Gone:
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.o.Timeout)
			removed, rerr := w.o.Store.RemovePushSubscription(sctx, sub.ID, sub.Endpoint)
			cancel()
			if rerr != nil {
				w.o.Log.Warn("push: a gone subscription was not removed", "subscription", sub.ID, "err", rerr)
			}
			if removed {
				w.removed.Add(1)
			}
			return
		case ctx.Err() != nil:
			return
		case res == Failed || attempt >= w.o.Attempts:
			w.failed.Add(1)
			w.o.Log.Info("push failed", "subscription", sub.ID, "user", sub.User, "attempts", attempt, "err", err,
				"refused", errors.Is(err, ErrRefusedAddress))
			return
		}
		w.retried.Add(1)
		wait := pause
		if after > wait {
			wait = min(after, MaxBackoff)
		}
		if !sleep(ctx, wait) {
			return
		}
		pause = min(2*pause, MaxBackoff)
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
