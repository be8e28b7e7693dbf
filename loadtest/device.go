package loadtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

// device is one simulated device: a client.Client on its own outbox file,
// whose Handler records every event it applies (the checker's evidence)
// and whose callbacks feed the figures.
type device struct {
	r      *runner
	user   string
	name   string // device id
	token  string
	outbox string
	c      *client.Client
	// logFile holds the client's log (OUTBOX.log); clog writes to it.
	logFile *os.File
	clog    *slog.Logger

	// runMu is held while the connection loop starts or stops, the
	// wait for a stopping one included: a run that came while a halt
	// waited would find no loop running and start a second Run while the
	// first was still ending, which the client refuses.
	runMu   sync.Mutex
	cancel  context.CancelFunc // ends the current Run; nil while offline
	runDone chan struct{}

	connected  atomic.Bool
	everUp     chan struct{} // closed at the first OnConnect
	upOnce     sync.Once
	reconnectT atomic.Int64 // unix nanos when the current offline period began (0: none being timed)

	mu       sync.Mutex
	applied  map[string][]Applied
	resets   []string
	trims    []string
	outcomes map[string]int
	enqueued []string
	started  map[string]time.Time // cmid → when it was enqueued
	sentOK   []int64Pair          // (conv index, seq) of own messages, for recalls
}

type int64Pair struct {
	conv string
	seq  int64
}

func (d *device) id() string { return d.user + "/" + d.name }

// open opens the device's client.
func (d *device) open(ctx context.Context, urls []string) error {
	// The client's own log (retries, disconnects, outcomes it could not
	// record) goes next to its outbox, OUTBOX.log: the first place to look
	// when the check names the device.
	logf, err := os.OpenFile(d.outbox+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("device %s: %w", d.id(), err)
	}
	d.logFile = logf
	d.clog = slog.New(slog.NewTextHandler(logf, nil))
	c, err := client.Open(ctx, client.Options{
		Log:  d.clog,
		URLs: urls, Token: d.token, Outbox: d.outbox, Handler: (*handler)(d),
		OnOutcome:    d.onOutcome,
		OnConnect:    d.onConnect,
		OnDisconnect: func(string, error) { d.connected.Store(false) },
		BackoffBase:  50 * time.Millisecond, BackoffMax: time.Second,
		RequestTimeout: 10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("device %s: %w", d.id(), err)
	}
	d.c = c
	return nil
}

// run starts the client's connection loop.
func (d *device) run() {
	d.runMu.Lock()
	defer d.runMu.Unlock()
	if d.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	d.cancel, d.runDone = cancel, done
	go func() {
		defer close(done)
		if err := d.c.Run(ctx); err != nil && ctx.Err() == nil {
			// The device stays offline: say so where its log is read.
			d.clog.Error("loadtest: client stopped", "err", err)
			d.r.logf("device %s: client stopped: %v", d.id(), err)
		}
	}()
}

// halt ends the connection loop, as an app that goes to the background
// would; the outbox keeps what is enqueued meanwhile.
func (d *device) halt() {
	d.runMu.Lock()
	defer d.runMu.Unlock()
	if d.cancel != nil {
		d.cancel()
		<-d.runDone
		d.cancel = nil
	}
	d.connected.Store(false)
}

func (d *device) onConnect(string) {
	d.connected.Store(true)
	d.upOnce.Do(func() { close(d.everUp) })
	if t := d.reconnectT.Swap(0); t != 0 {
		d.r.stats.catchup(time.Since(time.Unix(0, t)))
	}
}

func (d *device) onOutcome(it client.Item) {
	d.mu.Lock()
	d.outcomes[it.CMID]++
	start, ok := d.started[it.CMID]
	if it.Code == "" && it.Kind == client.KindSend {
		d.sentOK = append(d.sentOK, int64Pair{it.Conv, it.Seq})
	}
	d.mu.Unlock()
	d.r.stats.outcome(it, start, ok)
	if it.Code == "" && it.Kind == client.KindSend {
		d.r.maybeRecall(d, it)
	}
}

// enqueue writes a message to the outbox.
func (d *device) enqueue(ctx context.Context, conv, body string) error {
	now := time.Now()
	it, err := d.c.Enqueue(ctx, conv, body)
	return d.track(it, err, now)
}

// enqueueRecall writes a recall of target to the outbox.
func (d *device) enqueueRecall(ctx context.Context, conv string, target int64) error {
	now := time.Now()
	it, err := d.c.EnqueueRecall(ctx, conv, target)
	return d.track(it, err, now)
}

// track records an item the outbox accepted at start (for the check and
// the latency figures); an error means it was not written.
func (d *device) track(it client.Item, err error, start time.Time) error {
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.enqueued = append(d.enqueued, it.CMID)
	d.started[it.CMID] = start
	d.mu.Unlock()
	return nil
}

// lastApplied is the last seq the device applied in conv.
func (d *device) lastApplied(conv string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.applied[conv]
	if len(a) == 0 {
		return 0
	}
	return a[len(a)-1].Seq
}

// handler is the device's client.Handler.
type handler device

func (h *handler) Convs([]wire.Conv) {}

func (h *handler) Events(conv string, _ int64, evs []wire.Event) {
	d := (*device)(h)
	now := time.Now()
	live := d.connected.Load()
	d.mu.Lock()
	for _, ev := range evs {
		d.applied[conv] = append(d.applied[conv], appliedOf(ev))
	}
	d.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind != string(parley.EventMessage) || (ev.Sender == d.user && ev.Device == d.name) {
			continue
		}
		at, err := ev.Time()
		if err != nil || at.Before(d.r.loadStart) {
			continue
		}
		d.r.stats.delivered(d.r.sizeOf(conv), now.Sub(at), live)
	}
}

func (h *handler) Reset(conv string, code parley.Code) {
	d := (*device)(h)
	d.mu.Lock()
	d.resets = append(d.resets, conv+": "+string(code))
	d.applied[conv] = nil
	d.mu.Unlock()
}

func (h *handler) Trimmed(conv string, minSeq int64) {
	d := (*device)(h)
	d.mu.Lock()
	d.trims = append(d.trims, fmt.Sprintf("%s below %d", conv, minSeq))
	d.mu.Unlock()
}

func (h *handler) Read(string, int64) {}

// log returns the device's evidence for the checker; call it after the
// client is closed.
func (d *device) log(ctx context.Context) (DeviceLog, error) {
	c, err := client.Open(ctx, client.Options{Outbox: d.outbox, Token: d.token})
	if err != nil {
		return DeviceLog{}, err
	}
	defer c.Close()
	ended, err := c.Outcomes(ctx)
	if err != nil {
		return DeviceLog{}, err
	}
	pending, err := c.Pending(ctx)
	if err != nil {
		return DeviceLog{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return DeviceLog{
		User: d.user, Device: d.name, Applied: d.applied, Resets: d.resets, Trims: d.trims,
		Ended: ended, Pending: pending, Outcomes: d.outcomes, Enqueued: d.enqueued,
	}, nil
}
