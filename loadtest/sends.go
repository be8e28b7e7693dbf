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
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "bench: "+format+"\n", args...)
		}
	}
	servers := cfg.Servers
	if cfg.Spawn > 0 {
		dir := cfg.WorkDir
		if dir == "" {
			d, err := os.MkdirTemp("", "parley-sends-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(d)
			dir = d
		}
		gws, err := spawn(ctx, Config{Spawn: 1, DB: cfg.DB, Exe: cfg.Exe, ServeArgs: cfg.ServeArgs, ServeEnv: cfg.ServeEnv,
			Admin: cfg.Admin, AdminPassword: cfg.AdminPassword}, dir)
		if err != nil {
			return nil, err
		}
		defer gws[0].stop(5 * time.Second)
		servers = []string{gws[0].url()}
		logf("started a gateway: %s", servers[0])
	}
	if len(servers) == 0 {
		return nil, errors.New("no server")
	}
	a := newAPI(baseURL(servers[0]))
	admin, err := a.login(ctx, cfg.Admin, cfg.AdminPassword, "sends-admin", rand.Text())
	if err != nil {
		return nil, fmt.Errorf("admin login as %s: %w", cfg.Admin, err)
	}

	// Users, their tokens and conversations.
	run := strings.ToLower(rand.Text()[:6])
	users := make([]string, cfg.Senders)
	tokens := make([]string, cfg.Senders)
	convs := make([]string, cfg.Senders)
	const pw = "bench-password-1"
	err = parallel(ctx, cfg.Senders, 8, func(i int) error {
		users[i] = fmt.Sprintf("%s-%s-%d", cfg.LoginPrefix, run, i)
		if err := a.createUser(ctx, admin, users[i], pw); err != nil {
			return err
		}
		t, err := a.login(ctx, users[i], pw, "d1", "i1")
		tokens[i] = t
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	if cfg.Hot {
		hot := fmt.Sprintf("%s-%s-hot", cfg.LoginPrefix, run)
		if _, err := a.createConv(ctx, tokens[0], hot, parley.KindGroup, users[1:]); err != nil {
			return nil, fmt.Errorf("conversation: %w", err)
		}
		for i := range convs {
			convs[i] = hot
		}
	} else {
		err = parallel(ctx, cfg.Senders, 8, func(i int) error {
			convs[i] = fmt.Sprintf("%s-%s-own-%d", cfg.LoginPrefix, run, i)
			_, err := a.createConv(ctx, tokens[i], convs[i], parley.KindGroup, nil)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("conversations: %w", err)
		}
	}

	socks := make([]*websocket.Conn, cfg.Senders)
	defer func() {
		for _, c := range socks {
			if c != nil {
				c.CloseNow()
			}
		}
	}()
	for i := range socks {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+tokens[i])
		c, _, err := websocket.Dial(ctx, wsURL(baseURL(servers[i%len(servers)])), &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			return nil, fmt.Errorf("socket of %s: %w", users[i], err)
		}
		socks[i] = c
	}
	logf("%d senders connected; warm-up %s, then %s", cfg.Senders, cfg.Warmup, cfg.Duration)

	var measuring atomic.Bool
	var sends, errs atomic.Int64
	lats := make([][]float64, cfg.Senders)
	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for i := range socks {
		wg.Go(func() {
			err := sendLoop(loadCtx, socks[i], convs[i], cfg.Body, func(d time.Duration, failed bool) {
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
