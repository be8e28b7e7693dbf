// Package loadtest is Parley's load generator and end-to-end acceptance
// checker, the library behind `parley bench`.
//
// A run simulates Users × DevicesPerUser devices, each a client.Client with
// its own durable outbox talking to the gateways over real WebSockets. It
// creates its own users (through the operations API, with an admin login)
// and conversations: a direct chat per pair of neighbouring users and
// groups of 10, 100 and 1,000 (those the user count can fill; the admin
// creates the groups and stays in them, so it can read their whole log).
// Then, for Duration, it sends at a target rate (open loop) or as fast as
// each device gets its replies (closed loop), recalls some of its own
// messages, moves read cursors, removes and re-adds group members,
// disconnects and reconnects devices, and, when it started the gateways
// itself, kills one with SIGKILL and restarts it.
//
// At the end it lets every outbox drain and every device catch up, reads
// every conversation's committed log through the HTTP API, and holds each
// device to it (Check). The Report carries the figures and the violations.
package loadtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
)

// Config is one run.
type Config struct {
	// Servers are the gateways' base URLs (http://HOST:PORT; ws://…/ws
	// and bare HOST:PORT are accepted). Ignored when Spawn > 0.
	Servers []string
	// Admin and AdminPassword log in to the operations API.
	Admin, AdminPassword string
	// LoginPrefix starts every user id the run creates (a random tag
	// follows it, so runs against one server do not collide).
	LoginPrefix    string
	Users          int
	DevicesPerUser int
	Duration       time.Duration
	// Rate is the target of sends per second over all devices (open
	// loop); 0 means closed loop: every device sends its next message
	// when the previous one ended.
	Rate float64
	// Groups are the group sizes to create (each size the user count can
	// fill: Users/size disjoint groups of it); Directs adds a direct chat
	// between each user and the next.
	Groups  []int
	Directs bool
	// DisconnectEvery: how often one random device drops its connection
	// and comes back 0.1–1 s later (0: never).
	DisconnectEvery time.Duration
	// ChurnEvery: how often a group member is removed or a removed one
	// re-added (0: never).
	ChurnEvery time.Duration
	// RecallRatio is the share of sent messages their sender recalls;
	// ReadRatio the share of sends that are followed by some device
	// moving its read cursor.
	RecallRatio, ReadRatio float64
	// Settle bounds the wait, after the load, for outboxes to drain and
	// devices to catch up: the wait ends when nothing moved for Settle
	// (or after 5×Settle in all).
	Settle time.Duration

	// Spawn > 0 starts that many `parley serve` processes (Exe, default
	// this executable) on DB, with ServeArgs and ServeEnv added, the fault
	// spec Faults in PARLEY_FAULTS, and creates the admin on DB first.
	Spawn     int
	DB        string
	Exe       string
	ServeArgs []string
	ServeEnv  []string
	Faults    string
	// GatewayCPU > 0 confines each spawned gateway to that many CPU
	// cores, in a control group of its own (package cpucap; needs root),
	// so the gateways, not what shares the machine with them, bound the
	// run.
	GatewayCPU float64
	// KillEvery: how often one spawned gateway is killed (SIGKILL) and
	// restarted on its address (0: never; needs Spawn).
	KillEvery time.Duration
	// DuringLoad, when set, runs in a goroutine of its own from the start
	// of the load phase, with a context that ends with it; the run settles
	// only after it returned. It is for faults the caller makes itself:
	// killing or draining gateways it started behind a load balancer.
	DuringLoad func(ctx context.Context)

	// WorkDir holds the outbox files and the gateways' data and logs
	// (default: a new temporary directory, removed at the end).
	WorkDir string
	Log     io.Writer // progress lines; nil: none
	Seed    uint64    // 0: random
}

func (c Config) withDefaults() Config {
	if c.LoginPrefix == "" {
		c.LoginPrefix = "bench"
	}
	if c.Users <= 0 {
		c.Users = 100
	}
	if c.DevicesPerUser <= 0 {
		c.DevicesPerUser = 1
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = time.Minute
	}
	if c.Seed == 0 {
		c.Seed = mrand.Uint64()
	}
	return c
}

// conv is one conversation the run created.
type conv struct {
	id      string
	class   string // direct, group10, group100, group1000
	initial []string
	head    int64  // after creation
	readAs  string // a token of a member who never leaves
}

type runner struct {
	cfg   Config
	log   io.Writer
	stats *stats
	rnd   *mrand.Rand
	rndMu sync.Mutex

	apis      []*api
	admin     string // admin token
	devices   []*device
	byUser    map[string][]*device
	convs     []*conv
	convByID  map[string]*conv
	loadStart time.Time
	loading   atomic.Bool

	memMu     sync.Mutex
	members   map[string]map[string]bool // conv → current members (bench users)
	userConvs map[string][]string        // user → convs they were ever put in

	recalls chan recallJob
	bg      sync.WaitGroup
	gws     []*gateway
	samples map[string][]Sample
}

type recallJob struct {
	d    *device
	conv string
	seq  int64
}

func (r *runner) logf(format string, args ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "bench: "+format+"\n", args...)
	}
}

func (r *runner) intn(n int) int {
	r.rndMu.Lock()
	defer r.rndMu.Unlock()
	return r.rnd.IntN(n)
}

func (r *runner) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	r.rndMu.Lock()
	defer r.rndMu.Unlock()
	return r.rnd.Float64() < p
}

func (r *runner) sizeOf(id string) string {
	if c := r.convByID[id]; c != nil {
		return c.class
	}
	return "other"
}

// Run runs one load test and checks it. The error is for a run that could
// not be carried out (setup failed); a run whose check failed returns a
// Report with Pass false.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	r := &runner{
		cfg: cfg, log: cfg.Log, stats: newStats(), rnd: mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		byUser: map[string][]*device{}, convByID: map[string]*conv{}, members: map[string]map[string]bool{},
		userConvs: map[string][]string{}, recalls: make(chan recallJob, 1024), samples: map[string][]Sample{},
	}
	dir := cfg.WorkDir
	if dir == "" {
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm" // outboxes fsync on every write; the load generator's disk is not under test
		}
		d, err := os.MkdirTemp(base, "parley-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	servers := cfg.Servers
	if cfg.Spawn > 0 {
		if cfg.DB == "" {
			return nil, errors.New("spawning gateways needs a store (DB)")
		}
		gws, err := spawn(ctx, cfg, dir)
		if err != nil {
			return nil, err
		}
		r.gws = gws
		defer func() {
			for _, g := range gws {
				g.stop(5 * time.Second)
			}
		}()
		servers = nil
		for _, g := range gws {
			servers = append(servers, g.url())
		}
		r.logf("started %d gateway(s): %s", len(gws), strings.Join(servers, ", "))
	}
	if len(servers) == 0 {
		return nil, errors.New("no server")
	}
	for _, s := range servers {
		r.apis = append(r.apis, newAPI(baseURL(s)))
	}
	rep, err := r.run(ctx, dir)
	if rep != nil {
		rep.Servers = servers
	}
	return rep, err
}

// baseURL turns ws://host/ws, http://host or host:port into http://host.
func baseURL(s string) string {
	s = strings.TrimSuffix(strings.TrimSpace(s), "/")
	s = strings.TrimSuffix(s, "/ws")
	switch {
	case strings.HasPrefix(s, "ws://"):
		return "http://" + strings.TrimPrefix(s, "ws://")
	case strings.HasPrefix(s, "wss://"):
		return "https://" + strings.TrimPrefix(s, "wss://")
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
		return s
	}
	return "http://" + s
}

func wsURL(base string) string {
	if strings.HasPrefix(base, "https://") {
		return "wss://" + strings.TrimPrefix(base, "https://") + "/ws"
	}
	return "ws://" + strings.TrimPrefix(base, "http://") + "/ws"
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return ctx.Err()
}

// run carries the load test out on r's gateways: it sets up users,
// devices and conversations, connects the devices, loads, settles and
// checks.
func (r *runner) run(ctx context.Context, dir string) (*Report, error) {
	tag := strings.ToLower(rand.Text()[:4]) // in the ids of this run's users and conversations
	password := rand.Text()
	users, err := r.createUsers(ctx, tag, password)
	if err != nil {
		return nil, err
	}
	if err := r.logDevicesIn(ctx, users, dir, password); err != nil {
		return nil, err
	}
	if err := r.createConvs(ctx, users, tag); err != nil {
		return nil, err
	}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	defer r.closeAll()
	loadEnd, err := r.load(ctx)
	if err != nil {
		return nil, err
	}
	return r.settle(ctx, loadEnd)
}

// createUsers logs the admin in and creates the run's users (every login
// before any socket: a login re-checks the user's open sockets).
func (r *runner) createUsers(ctx context.Context, tag, password string) ([]string, error) {
	cfg := r.cfg
	t0 := time.Now()
	var err error
	r.admin, err = r.apis[0].login(ctx, cfg.Admin, cfg.AdminPassword, "bench-admin-"+rand.Text()[:8], rand.Text())
	if err != nil {
		return nil, fmt.Errorf("admin login as %s: %w", cfg.Admin, err)
	}
	users := make([]string, cfg.Users)
	for i := range users {
		users[i] = fmt.Sprintf("%s%s-%d", cfg.LoginPrefix, tag, i)
		if !parley.ValidUserID(users[i]) {
			return nil, fmt.Errorf("user id %q is not valid: choose a shorter or lower-case --login-prefix", users[i])
		}
	}
	err = parallel(ctx, len(users), 8, func(i int) error {
		err := r.apis[i%len(r.apis)].createUser(ctx, r.admin, users[i], password)
		if parley.ErrorCode(err) == parley.CodeAlreadyExists {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create users: %w", err)
	}
	r.logf("created %d users in %v", len(users), time.Since(t0).Round(time.Millisecond))
	return users, nil
}

// logDevicesIn makes every user's devices, their outboxes in dir, and logs
// each in.
func (r *runner) logDevicesIn(ctx context.Context, users []string, dir, password string) error {
	t1 := time.Now()
	for _, u := range users {
		for j := range r.cfg.DevicesPerUser {
			d := &device{
				r: r, user: u, name: fmt.Sprintf("d%d", j), outbox: filepath.Join(dir, fmt.Sprintf("%s-d%d.outbox", u, j)),
				everUp: make(chan struct{}), applied: map[string][]Applied{}, outcomes: map[string]int{}, started: map[string]time.Time{},
			}
			r.devices = append(r.devices, d)
			r.byUser[u] = append(r.byUser[u], d)
		}
	}
	err := parallel(ctx, len(r.devices), 8, func(i int) error {
		d := r.devices[i]
		tok, err := r.apis[i%len(r.apis)].login(ctx, d.user, password, d.name, rand.Text())
		d.token = tok
		return err
	})
	if err != nil {
		return fmt.Errorf("log devices in: %w", err)
	}
	r.logf("logged %d devices in in %v", len(r.devices), time.Since(t1).Round(time.Millisecond))
	return nil
}

// createConvs creates the direct chats and groups of cfg and notes their
// members.
func (r *runner) createConvs(ctx context.Context, users []string, tag string) error {
	cfg := r.cfg
	t2 := time.Now()
	if cfg.Directs && len(users) >= 2 {
		n := len(users)
		if n == 2 {
			n = 1
		}
		for i := range n {
			u, v := users[i], users[(i+1)%len(users)]
			r.convs = append(r.convs, &conv{id: fmt.Sprintf("%s%s-d%d", cfg.LoginPrefix, tag, i), class: "direct", initial: []string{u, v}, readAs: r.byUser[u][0].token})
		}
	}
	for _, size := range cfg.Groups {
		if size < 2 || size > len(users) {
			continue
		}
		for k := range len(users) / size {
			members := slices.Clone(users[k*size : (k+1)*size])
			r.convs = append(r.convs, &conv{id: fmt.Sprintf("%s%s-g%d-%d", cfg.LoginPrefix, tag, size, k), class: fmt.Sprintf("group%d", size), initial: members, readAs: r.admin})
		}
	}
	if len(r.convs) == 0 {
		return errors.New("no conversation to create: want --users ≥ 2 with direct chats, or a group size ≤ --users")
	}
	err := parallel(ctx, len(r.convs), 8, func(i int) error {
		c := r.convs[i]
		var err error
		if c.class == "direct" {
			c.head, err = r.apis[i%len(r.apis)].createConv(ctx, c.readAs, c.id, parley.KindDirect, c.initial[1:])
		} else {
			c.head, err = r.apis[i%len(r.apis)].createConv(ctx, r.admin, c.id, parley.KindGroup, c.initial)
			if c.head > 0 {
				// The admin (creator) is an initial member too.
				c.initial = append([]string{cfg.Admin}, c.initial...)
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create conversations: %w", err)
	}
	for _, c := range r.convs {
		r.convByID[c.id] = c
		m := map[string]bool{}
		for _, u := range c.initial {
			if r.byUser[u] != nil {
				m[u] = true
				r.userConvs[u] = append(r.userConvs[u], c.id)
			}
		}
		r.members[c.id] = m
	}
	r.logf("created %d conversations in %v", len(r.convs), time.Since(t2).Round(time.Millisecond))
	return nil
}

// connect opens every device's client, each on all gateways starting with
// its own, and waits until each was online once. On an error it closes
// them all again.
func (r *runner) connect(ctx context.Context) (err error) {
	t3 := time.Now()
	defer func() {
		if err != nil {
			r.closeAll()
		}
	}()
	for i, d := range r.devices {
		urls := make([]string, len(r.apis))
		for k := range r.apis {
			urls[k] = wsURL(r.apis[(i+k)%len(r.apis)].base)
		}
		if err := d.open(ctx, urls); err != nil {
			return err
		}
	}
	for _, d := range r.devices {
		d.run()
	}
	up := time.After(2*time.Minute + time.Duration(len(r.devices))*20*time.Millisecond)
	for _, d := range r.devices {
		select {
		case <-d.everUp:
		case <-up:
			return fmt.Errorf("device %s did not connect", d.id())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.logf("connected %d devices in %v", len(r.devices), time.Since(t3).Round(time.Millisecond))
	return nil
}

// load is the load phase: for cfg.Duration the send loops and the faults
// cfg asks for run; it returns when they all ended, with the time the
// phase ended.
func (r *runner) load(ctx context.Context) (time.Time, error) {
	cfg := r.cfg
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	r.loadStart = time.Now()
	r.stats.mu.Lock()
	r.stats.loadStart = r.loadStart
	r.stats.mu.Unlock()
	r.loading.Store(true)
	r.logf("load for %v: %s", cfg.Duration, r.describe())
	var loops sync.WaitGroup
	loops.Go(func() { r.sampler(loadCtx) })
	loops.Go(func() { r.recaller(loadCtx) })
	if cfg.Rate > 0 {
		loops.Go(func() { r.openLoop(loadCtx) })
	} else {
		for _, d := range r.devices {
			loops.Go(func() { r.closedLoop(loadCtx, d) })
		}
	}
	if cfg.DisconnectEvery > 0 {
		loops.Go(func() { r.every(loadCtx, cfg.DisconnectEvery, r.disconnectOne) })
	}
	if cfg.ChurnEvery > 0 {
		loops.Go(func() { r.every(loadCtx, cfg.ChurnEvery, func() { r.churnOne(loadCtx) }) })
	}
	if cfg.KillEvery > 0 && len(r.gws) > 0 {
		loops.Go(func() { r.every(loadCtx, cfg.KillEvery, func() { r.killOne(ctx) }) })
	}
	if cfg.DuringLoad != nil {
		loops.Go(func() { cfg.DuringLoad(loadCtx) })
	}
	<-loadCtx.Done()
	loadEnd := time.Now()
	r.loading.Store(false)
	r.stats.mu.Lock()
	r.stats.loadEnd = loadEnd
	r.stats.mu.Unlock()
	loops.Wait()
	r.bg.Wait() // reconnects, reads
	if ctx.Err() != nil {
		return time.Time{}, ctx.Err()
	}
	r.logf("load done; settling")
	return loadEnd, nil
}

// settle brings everybody online, lets every outbox drain and every device
// catch up, then reads the committed logs and holds the devices to them.
func (r *runner) settle(ctx context.Context, loadEnd time.Time) (*Report, error) {
	for _, d := range r.devices {
		d.run()
	}
	r.drainOutboxes(ctx, r.cfg.Settle)
	truth, err := r.truth(ctx)
	if err != nil {
		return nil, err
	}
	r.catchUp(ctx, truth, r.cfg.Settle)
	unread, err := r.unread(ctx)
	if err != nil {
		return nil, err
	}
	r.sample(ctx, loadEnd) // a last CPU and memory sample
	r.closeAll()
	var logs []DeviceLog
	for _, d := range r.devices {
		l, err := d.log(ctx)
		if err != nil {
			return nil, err
		}
		logs = append(logs, l)
	}
	vs := Check(truth, logs, unread)
	r.logf("checked %d devices against %d conversations: %d violation(s)", len(logs), len(truth.Convs), len(vs))
	return r.report(truth, vs, loadEnd.Sub(r.loadStart)), nil
}

func (r *runner) describe() string {
	mode := fmt.Sprintf("open loop at %.0f sends/s", r.cfg.Rate)
	if r.cfg.Rate <= 0 {
		mode = "closed loop"
	}
	counts := map[string]int{}
	for _, c := range r.convs {
		counts[c.class]++
	}
	var parts []string
	for _, k := range []string{"direct", "group10", "group100", "group1000"} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	for k, n := range counts {
		if !slices.Contains([]string{"direct", "group10", "group100", "group1000"}, k) {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return fmt.Sprintf("%d devices, %s; %s", len(r.devices), strings.Join(parts, ", "), mode)
}

func (r *runner) closeAll() {
	var wg sync.WaitGroup
	for _, d := range r.devices {
		if d.c == nil {
			continue
		}
		wg.Go(func() {
			d.halt()
			d.c.Close()
			if d.logFile != nil {
				d.logFile.Close()
			}
		})
	}
	wg.Wait()
}

// every calls fn every d until ctx ends.
func (r *runner) every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// pickConv picks a conversation d's user is in now.
func (r *runner) pickConv(d *device) (string, bool) {
	r.memMu.Lock()
	defer r.memMu.Unlock()
	cs := r.userConvs[d.user]
	if len(cs) == 0 {
		return "", false
	}
	for range 4 {
		c := cs[r.intn(len(cs))]
		if r.members[c][d.user] {
			return c, true
		}
	}
	return "", false
}

var bodySeq atomic.Int64

func (r *runner) sendOne(ctx context.Context, d *device) {
	conv, ok := r.pickConv(d)
	if !ok {
		return
	}
	body := fmt.Sprintf("%s #%d", d.id(), bodySeq.Add(1))
	if err := d.enqueue(ctx, conv, body); err != nil {
		if ctx.Err() == nil {
			r.logf("device %s: enqueue: %v", d.id(), err)
		}
		return
	}
	r.stats.add(&r.stats.enqueued, 1)
	if r.chance(r.cfg.ReadRatio) {
		r.readOne()
	}
}

// openLoop enqueues Rate sends per second, spread over random devices,
// whatever the replies do.
func (r *runner) openLoop(ctx context.Context) {
	jobs := make(chan *device, 4096)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for d := range jobs {
				r.sendOne(ctx, d)
			}
		})
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	issued := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-t.C:
			due := int(r.cfg.Rate * now.Sub(start).Seconds())
			for ; issued < due; issued++ {
				select {
				case jobs <- r.devices[r.intn(len(r.devices))]:
				case <-ctx.Done():
					break loop
				}
			}
		}
	}
	close(jobs)
	wg.Wait()
}

// closedLoop sends from d, each message when the previous one ended.
func (r *runner) closedLoop(ctx context.Context, d *device) {
	for ctx.Err() == nil {
		conv, ok := r.pickConv(d)
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		body := fmt.Sprintf("%s #%d", d.id(), bodySeq.Add(1))
		now := time.Now()
		it, err := d.c.Enqueue(ctx, conv, body)
		if err != nil {
			return
		}
		d.mu.Lock()
		d.enqueued = append(d.enqueued, it.CMID)
		d.started[it.CMID] = now
		d.mu.Unlock()
		r.stats.add(&r.stats.enqueued, 1)
		if r.chance(r.cfg.ReadRatio) {
			r.readOne()
		}
		d.c.Wait(ctx, it.CMID)
	}
}

// maybeRecall queues a recall of a message d just sent, RecallRatio of
// the time.
func (r *runner) maybeRecall(d *device, it client.Item) {
	if !r.loading.Load() || !r.chance(r.cfg.RecallRatio) {
		return
	}
	select {
	case r.recalls <- recallJob{d, it.Conv, it.Seq}:
	default: // the recaller is behind: skip this one
	}
}

func (r *runner) recaller(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.recalls:
			if err := j.d.enqueueRecall(ctx, j.conv, j.seq); err == nil {
				r.stats.add(&r.stats.recalls, 1)
			}
		}
	}
}

// readOne moves a random connected device's read cursor to what it has
// applied in one of its conversations.
func (r *runner) readOne() {
	d := r.devices[r.intn(len(r.devices))]
	if !d.connected.Load() {
		return
	}
	conv, ok := r.pickConv(d)
	if !ok {
		return
	}
	seq := d.lastApplied(conv)
	if seq == 0 {
		return
	}
	r.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := d.c.Read(ctx, conv, seq); err != nil {
			r.stats.add(&r.stats.readErrs, 1)
			return
		}
		r.stats.add(&r.stats.reads, 1)
	})
}

// disconnectOne takes a random device offline for 0.1–1 s.
func (r *runner) disconnectOne() {
	d := r.devices[r.intn(len(r.devices))]
	off := 100*time.Millisecond + time.Duration(r.intn(900))*time.Millisecond
	r.stats.add(&r.stats.reconnects, 1)
	r.bg.Go(func() {
		d.halt()
		time.Sleep(off)
		d.reconnectT.Store(time.Now().UnixNano())
		d.run()
	})
}

// churnOne re-adds a removed member of a random group, or removes one.
func (r *runner) churnOne(ctx context.Context) {
	var groups []*conv
	for _, c := range r.convs {
		if c.class != "direct" {
			groups = append(groups, c)
		}
	}
	if len(groups) == 0 {
		return
	}
	c := groups[r.intn(len(groups))]
	r.memMu.Lock()
	var in, out []string
	for _, u := range c.initial {
		if r.byUser[u] == nil {
			continue
		}
		if r.members[c.id][u] {
			in = append(in, u)
		} else {
			out = append(out, u)
		}
	}
	add := len(out) > 0 && (len(in) <= 2 || r.chance(0.5))
	var u string
	switch {
	case add:
		u = out[r.intn(len(out))]
	case len(in) > 2:
		u = in[r.intn(len(in))]
		r.members[c.id][u] = false // stop picking it before the removal lands
	default:
		r.memMu.Unlock()
		return
	}
	r.memMu.Unlock()
	if _, err := r.apis[r.intn(len(r.apis))].member(ctx, r.admin, c.id, u, add); err != nil {
		if ctx.Err() == nil {
			r.logf("membership change %s %s (add %v): %v", c.id, u, add, err)
		}
		return
	}
	if add {
		r.memMu.Lock()
		r.members[c.id][u] = true
		r.memMu.Unlock()
	}
	r.stats.add(&r.stats.churn, 1)
}

// killOne kills one spawned gateway with SIGKILL and restarts it.
func (r *runner) killOne(ctx context.Context) {
	g := r.gws[r.stats.kills%len(r.gws)]
	r.logf("killing gateway %d (%s)", g.n, g.url())
	g.kill()
	r.stats.add(&r.stats.kills, 1)
	time.Sleep(500 * time.Millisecond)
	if err := g.start(ctx); err != nil {
		r.logf("restart gateway %d: %v", g.n, err)
		return
	}
	r.logf("gateway %d restarted", g.n)
}

// settled polls left (what is still to happen) until it is 0, and gives
// up when it has not gone down for settle, or after 5×settle in all: an
// overloaded server that is still working through a backlog gets the time
// it needs, a stuck device does not hold the run.
func settled(ctx context.Context, settle, poll time.Duration, left func() int) bool {
	start, best, improved := time.Now(), -1, time.Now()
	for ctx.Err() == nil {
		n := left()
		if n == 0 {
			return true
		}
		now := time.Now()
		if best < 0 || n < best {
			best, improved = n, now
		}
		if now.Sub(improved) > settle || now.Sub(start) > 5*settle {
			return false
		}
		time.Sleep(poll)
	}
	return false
}

// drainOutboxes waits until no device has a pending item.
func (r *runner) drainOutboxes(ctx context.Context, settle time.Duration) {
	ok := settled(ctx, settle, 250*time.Millisecond, func() int {
		pending := 0
		for _, d := range r.devices {
			its, err := d.c.Pending(ctx)
			if err == nil {
				pending += len(its)
			}
		}
		return pending
	})
	if !ok {
		r.logf("outboxes did not drain within the settle time")
	}
}

// truth reads every conversation's committed log.
func (r *runner) truth(ctx context.Context) (Truth, error) {
	t := Truth{Convs: map[string]*ConvLog{}}
	logs := make([]*ConvLog, len(r.convs))
	err := parallel(ctx, len(r.convs), 8, func(i int) error {
		c := r.convs[i]
		evs, err := r.apis[i%len(r.apis)].events(ctx, c.readAs, c.id)
		if err != nil {
			return fmt.Errorf("read the log of %s: %w", c.id, err)
		}
		logs[i] = &ConvLog{ID: c.id, Initial: c.initial, CreateHead: c.head, Events: evs}
		return nil
	})
	if err != nil {
		return t, err
	}
	for _, l := range logs {
		t.Convs[l.ID] = l
	}
	return t, nil
}

// catchUp waits until every device has applied up to the last event its
// user may see in every conversation.
func (r *runner) catchUp(ctx context.Context, t Truth, settle time.Duration) {
	type want struct {
		d    *device
		conv string
		seq  int64
	}
	var wants []want
	for _, d := range r.devices {
		for _, c := range r.userConvs[d.user] {
			if vis := t.Convs[c].Visible(d.user); len(vis) > 0 {
				wants = append(wants, want{d, c, vis[len(vis)-1].Seq})
			}
		}
	}
	ok := settled(ctx, settle, 200*time.Millisecond, func() int {
		behind := 0
		for _, w := range wants {
			if w.d.lastApplied(w.conv) < w.seq {
				behind++
			}
		}
		return behind
	})
	if !ok {
		r.logf("some devices did not catch up within the settle time")
	}
}

// unread reads every user's conversation list (read cursors and unread
// counts).
func (r *runner) unread(ctx context.Context) ([]UnreadObs, error) {
	users := make([]string, 0, len(r.byUser))
	for u := range r.byUser {
		users = append(users, u)
	}
	slices.Sort(users)
	obs := make([][]UnreadObs, len(users))
	err := parallel(ctx, len(users), 8, func(i int) error {
		u := users[i]
		cs, err := r.apis[i%len(r.apis)].convs(ctx, r.byUser[u][0].token)
		if err != nil {
			return fmt.Errorf("conversations of %s: %w", u, err)
		}
		for _, c := range cs {
			obs[i] = append(obs[i], UnreadObs{User: u, Conv: c.Conv, Read: c.Read, Unread: c.Unread, Capped: c.UnreadCapped})
		}
		return nil
	})
	return slices.Concat(obs...), err
}
