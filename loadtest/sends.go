package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
)

// SendsConfig is a send-throughput run (`parley bench --senders N`): N
// senders, each one user with one WebSocket, send in a closed loop (the next
// send as soon as the previous one's reply is in) for Duration, each to
// its own group or, Hot, all to one group. No client library, outbox or
// subscription: what is measured is the send path, frame → store → reply,
// as pgbench measures the bare transaction.
type SendsConfig struct {
	Senders  int
	Hot      bool
	Duration time.Duration
	Warmup   time.Duration // sends before the measured window (not counted)
	Body     string        // default: a 38-character message

	// The server, or the spawned gateway (Spawn 1) on DB, as Config.
	Servers             []string
	Spawn               int
	DB                  string
	Exe                 string
	ServeArgs, ServeEnv []string
	Admin               string
	AdminPassword       string
	LoginPrefix         string
	WorkDir             string
	Log                 io.Writer
}

// SendsReport is what a send-throughput run measured.
type SendsReport struct {
	Senders int     `json:"senders"`
	Hot     bool    `json:"hot"`
	Seconds float64 `json:"seconds"`
	Sends   int64   `json:"sends"`
	Errors  int64   `json:"errors"`
	Rate    float64 `json:"sends_per_s"`
	Latency Dist    `json:"send_to_sent"`
	// Server CPU over the measured window (process_cpu_seconds_total of
	// the first server's /metrics), per send in microseconds; 0 when the
	// server exposes no process metrics.
	ServerCPUSeconds float64 `json:"server_cpu_s"`
	CPUPerSendMicros float64 `json:"server_cpu_per_send_us"`
}

// Text writes the report for people.
func (r *SendsReport) Text(w io.Writer) {
	target := "own conversations"
	if r.Hot {
		target = "one conversation"
	}
	fmt.Fprintf(w, "%d senders, %s, %.1f s: %d sends, %.0f sends/s, %d errors\n", r.Senders, target, r.Seconds, r.Sends, r.Rate, r.Errors)
	fmt.Fprintf(w, "send→sent ms: p50 %.2f  p95 %.2f  p99 %.2f  max %.2f\n", r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Latency.Max)
	if r.CPUPerSendMicros > 0 {
		fmt.Fprintf(w, "server CPU: %.2f s, %.1f µs per send\n", r.ServerCPUSeconds, r.CPUPerSendMicros)
	}
}

// RunSends runs a send-throughput measurement.
func RunSends(ctx context.Context, cfg SendsConfig) (*SendsReport, error) {
	if cfg.Senders < 1 || cfg.Duration <= 0 {
		return nil, errors.New("senders must be at least 1 and the duration positive")
	}
	if cfg.Body == "" {
		cfg.Body = "a benchmark message of ordinary length"
	}
	if cfg.LoginPrefix == "" {
		cfg.LoginPrefix = "bench"
	}
	servers, stop, err := sendsServers(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	a := newAPI(baseURL(servers[0]))
	s, err := createSenders(ctx, a, cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.dial(ctx, servers); err != nil {
		return nil, err
	}
	cfg.logf("%d senders connected; warm-up %s, then %s", cfg.Senders, cfg.Warmup, cfg.Duration)
	return measureSends(ctx, a, cfg, s)
}

func (cfg SendsConfig) logf(format string, args ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "bench: "+format+"\n", args...)
	}
}

// sendsServers returns the servers of the run: cfg.Servers, or the one
// gateway it spawns (Spawn > 0), which stop stops.
func sendsServers(ctx context.Context, cfg SendsConfig) (servers []string, stop func(), err error) {
	servers, stop = cfg.Servers, func() {}
	if cfg.Spawn > 0 {
		dir, removeDir := cfg.WorkDir, func() {}
		if dir == "" {
			d, err := os.MkdirTemp("", "parley-sends-")
			if err != nil {
				return nil, nil, err
			}
			dir, removeDir = d, func() { os.RemoveAll(d) }
		}
		gws, err := spawn(ctx, Config{Spawn: 1, DB: cfg.DB, Exe: cfg.Exe, ServeArgs: cfg.ServeArgs, ServeEnv: cfg.ServeEnv,
			Admin: cfg.Admin, AdminPassword: cfg.AdminPassword}, dir)
		if err != nil {
			removeDir()
			return nil, nil, err
		}
		stop = func() {
			gws[0].stop(5 * time.Second)
			removeDir()
		}
		servers = []string{gws[0].url()}
		cfg.logf("started a gateway: %s", servers[0])
	}
	if len(servers) == 0 {
		stop()
		return nil, nil, errors.New("no server")
	}
	return servers, stop, nil
}

// senders are the run's senders: sender i is users[i], logged in with
// tokens[i], sending to convs[i] on socks[i].
type senders struct {
	users, tokens, convs []string
	socks                []*websocket.Conn
}

// createSenders logs the admin in and creates the senders' users, their
// tokens and their conversations.
func createSenders(ctx context.Context, a *api, cfg SendsConfig) (*senders, error) {
	admin, err := a.login(ctx, cfg.Admin, cfg.AdminPassword, "sends-admin", rand.Text())
	if err != nil {
		return nil, fmt.Errorf("admin login as %s: %w", cfg.Admin, err)
	}
	run := strings.ToLower(rand.Text()[:6])
	n := cfg.Senders
	s := &senders{users: make([]string, n), tokens: make([]string, n), convs: make([]string, n), socks: make([]*websocket.Conn, n)}
	const pw = "bench-password-1"
	err = parallel(ctx, n, 8, func(i int) error {
		s.users[i] = fmt.Sprintf("%s-%s-%d", cfg.LoginPrefix, run, i)
		if err := a.createUser(ctx, admin, s.users[i], pw); err != nil {
			return err
		}
		t, err := a.login(ctx, s.users[i], pw, "d1", "i1")
		s.tokens[i] = t
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	if cfg.Hot {
		hot := fmt.Sprintf("%s-%s-hot", cfg.LoginPrefix, run)
		if _, err := a.createConv(ctx, s.tokens[0], hot, parley.KindGroup, s.users[1:]); err != nil {
			return nil, fmt.Errorf("conversation: %w", err)
		}
		for i := range s.convs {
			s.convs[i] = hot
		}
		return s, nil
	}
	err = parallel(ctx, n, 8, func(i int) error {
		s.convs[i] = fmt.Sprintf("%s-%s-own-%d", cfg.LoginPrefix, run, i)
		_, err := a.createConv(ctx, s.tokens[i], s.convs[i], parley.KindGroup, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("conversations: %w", err)
	}
	return s, nil
}

// dial opens every sender's socket, sender i on servers[i%len(servers)].
func (s *senders) dial(ctx context.Context, servers []string) error {
	for i := range s.socks {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+s.tokens[i])
		c, _, err := websocket.Dial(ctx, wsURL(baseURL(servers[i%len(servers)])), &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			return fmt.Errorf("socket of %s: %w", s.users[i], err)
		}
		s.socks[i] = c
	}
	return nil
}

func (s *senders) close() {
	for _, c := range s.socks {
		if c != nil {
			c.CloseNow()
		}
	}
}

// measureSends runs every sender's loop through the warm-up and the
// measured window, and reports the window.
func measureSends(ctx context.Context, a *api, cfg SendsConfig, s *senders) (*SendsReport, error) {
	var measuring atomic.Bool
	var sends, errs atomic.Int64
	lats := make([][]float64, cfg.Senders)
	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for i := range s.socks {
		wg.Go(func() {
			err := sendLoop(loadCtx, s.socks[i], s.convs[i], cfg.Body, func(d time.Duration, failed bool) {
				if !measuring.Load() {
					return
				}
				if failed {
					errs.Add(1)
					return
				}
				sends.Add(1)
				lats[i] = append(lats[i], ms(d))
			})
			if err != nil && loadCtx.Err() == nil {
				firstErr.CompareAndSwap(nil, &err)
				cancel()
			}
		})
	}
	sleep(loadCtx, cfg.Warmup)
	cpu0, _, cpuErr := a.processStats(ctx)
	measuring.Store(true)
	start := time.Now()
	sleep(loadCtx, cfg.Duration)
	measuring.Store(false)
	took := time.Since(start)
	cpu1, _, cpuErr2 := a.processStats(ctx)
	cancel()
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return nil, *err
	}
	var all []float64
	for _, l := range lats {
		all = append(all, l...)
	}
	rep := &SendsReport{Senders: cfg.Senders, Hot: cfg.Hot, Seconds: round(took.Seconds()), Sends: sends.Load(), Errors: errs.Load(),
		Latency: distOf(all)}
	rep.Rate = round(float64(rep.Sends) / took.Seconds())
	if cpuErr == nil && cpuErr2 == nil && rep.Sends > 0 {
		rep.ServerCPUSeconds = round(cpu1 - cpu0)
		rep.CPUPerSendMicros = round((cpu1 - cpu0) / float64(rep.Sends) * 1e6)
	}
	return rep, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sendLoop sends on c in a closed loop until ctx ends, reporting each
// send's latency (or its failure: an error frame).
func sendLoop(ctx context.Context, c *websocket.Conn, conv, body string, done func(time.Duration, bool)) error {
	prefix := rand.Text()[:10]
	var reply struct {
		T    string          `json:"t"`
		RID  json.RawMessage `json:"rid"`
		Code string          `json:"code"`
	}
	for n := 1; ctx.Err() == nil; n++ {
		rid := strconv.Itoa(n)
		frame := fmt.Sprintf(`{"t":"send","rid":%s,"conv":%q,"cmid":"%s-%d","body":%q}`, rid, conv, prefix, n, body)
		start := time.Now()
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			return err
		}
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				return err
			}
			reply.T, reply.RID, reply.Code = "", nil, ""
			if err := json.Unmarshal(data, &reply); err != nil {
				return fmt.Errorf("reply %q: %w", data, err)
			}
			if string(reply.RID) != rid {
				continue // a push
			}
			switch reply.T {
			case "sent":
				done(time.Since(start), false)
			case "error":
				if reply.Code != string(parley.CodeUnavailable) && reply.Code != string(parley.CodeRateLimited) {
					return fmt.Errorf("send: %s", data)
				}
				done(time.Since(start), true)
			default:
				return fmt.Errorf("reply to a send: %s", data)
			}
			break
		}
	}
	return nil
}
