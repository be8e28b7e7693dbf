// Command uploads measures concurrent file uploads through a running
// `parley serve` (docs/benchmarks.md): --n uploads of --size bytes each,
// all started at once over tus with the Go client (client.Account.Upload,
// one PATCH per file), by one user. It reports the throughput, the
// latency of each upload from its creation to the ready file (p50, p90,
// p99, max), the requests that were retried, and the server's heap read
// from --admin (the --admin-addr listener): live after a forced GC
// before and after the run, and the peak in use sampled during it.
//
//	parley serve --db sqlite:/tmp/u/parley.db --data-dir /tmp/u --addr 127.0.0.1:8080 \
//		--admin-addr 127.0.0.1:9090 --config rate-limits-off.yaml
//	go run ./bench/uploads --server http://127.0.0.1:8080 --admin http://127.0.0.1:9090 \
//		--login root --password root-password-1
//
// Turn the rate limits off (`rate_limits: {}`): a benchmark measures the
// server, not its limiter. The user's quota must hold n × size more bytes.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "uploads: "+err.Error())
		os.Exit(1)
	}
}

type flags struct {
	server, admin, login, password string
	n                              int
	size                           int64
	timeout                        time.Duration
}

func parse(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("uploads", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the server's HTTP address")
	fs.StringVar(&f.admin, "admin", "", "the server's --admin-addr listener, for its heap (empty: not measured)")
	fs.StringVar(&f.login, "login", "", "the uploading user (required)")
	fs.StringVar(&f.password, "password", "", "their password (required)")
	fs.IntVar(&f.n, "n", 100, "uploads, all at once")
	fs.Int64Var(&f.size, "size", 1<<20, "bytes of each file")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "the longest the run may take")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.login == "" || f.password == "" || f.n < 1 || f.size < 1 {
		return f, errors.New("want --login, --password, --n ≥ 1 and --size ≥ 1")
	}
	return f, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parse(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	counts := &countingTransport{next: &http.Transport{MaxIdleConnsPerHost: f.n, MaxConnsPerHost: 0}}
	hc := &http.Client{Transport: counts}
	token, err := client.Login(ctx, hc, f.server, parley.LoginRequest{Login: f.login, Password: f.password,
		DeviceID: "uploads-bench", InstallID: fmt.Sprintf("uploads-bench-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	acct := &client.Account{Server: f.server, Token: token, HTTPClient: hc}
	data := make([]byte, int64(f.n)*f.size) // each file its own random bytes
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(data)

	heap := heapProbe{admin: f.admin}
	before, err := heap.live(ctx)
	if err != nil {
		return err
	}
	peak := heap.sample(ctx)
	lat, wall, errs := uploadAll(ctx, acct, data, f)
	peakInUse := peak()
	after, err := heap.live(ctx)
	if err != nil {
		return err
	}
	report(stdout, f, lat, wall, errs, counts, before, peakInUse, after)
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d uploads failed; the first: %v", len(errs), f.n, errs[0])
	}
	return nil
}

// uploadAll starts every upload at once and returns each one's time from
// its start to the ready file, the run's wall time, and the errors.
func uploadAll(ctx context.Context, acct *client.Account, data []byte, f flags) ([]time.Duration, time.Duration, []error) {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	gate := make(chan struct{})
	for i := range f.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := data[int64(i)*f.size : int64(i+1)*f.size]
			<-gate
			t0 := time.Now()
			_, err := acct.Upload(ctx, readerAt(part), f.size, fmt.Sprintf("bench-%03d.bin", i), client.UploadOptions{})
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			lat = append(lat, d)
		}()
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	return lat, time.Since(start), errs
}

type readerAt []byte

func (b readerAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// countingTransport counts the requests and the answers that make the
// client retry (no answer, 429, 5xx).
type countingTransport struct {
	next              http.RoundTripper
	requests, retried atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := c.next.RoundTrip(r)
	if err != nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		c.retried.Add(1)
	}
	return resp, err
}

// heapProbe reads the server's heap from its admin listener.
type heapProbe struct{ admin string }

// live forces a GC on the server (the heap profile's gc=1) and returns
// the heap then in use, in bytes (0 without --admin).
func (h heapProbe) live(ctx context.Context) (float64, error) {
	if h.admin == "" {
		return 0, nil
	}
	if _, err := h.get(ctx, "/debug/pprof/heap?gc=1"); err != nil {
		return 0, err
	}
	m, err := h.metrics(ctx)
	return m["go_memstats_heap_inuse_bytes"], err
}

// sample polls the heap in use every 50 ms until the returned function is
// called, which returns the largest value seen.
func (h heapProbe) sample(ctx context.Context) func() float64 {
	if h.admin == "" {
		return func() float64 { return 0 }
	}
	ctx, cancel := context.WithCancel(ctx)
	var peak float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if m, err := h.metrics(ctx); err == nil {
				peak = max(peak, m["go_memstats_heap_inuse_bytes"])
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 { cancel(); <-done; return peak }
}

func (h heapProbe) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(h.admin, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return b, err
}

// metrics reads the unlabelled samples of /metrics.
func (h heapProbe) metrics(ctx context.Context) (map[string]float64, error) {
	b, err := h.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

func report(w io.Writer, f flags, lat []time.Duration, wall time.Duration, errs []error, c *countingTransport, before, peak, after float64) {
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	mib := float64(int64(len(lat))*f.size) / (1 << 20)
	fmt.Fprintf(w, "uploads: %d × %d bytes at once, %d ok, %d failed\n", f.n, f.size, len(lat), len(errs))
	fmt.Fprintf(w, "wall: %v; throughput %.1f MiB/s, %.1f uploads/s\n", wall.Round(time.Millisecond), mib/wall.Seconds(), float64(len(lat))/wall.Seconds())
	fmt.Fprintf(w, "per upload (create to ready): p50 %v, p90 %v, p99 %v, max %v\n",
		q(0.50).Round(time.Millisecond), q(0.90).Round(time.Millisecond), q(0.99).Round(time.Millisecond), q(1).Round(time.Millisecond))
	fmt.Fprintf(w, "requests: %d (%d answered 429/5xx or not at all, retried)\n", c.requests.Load(), c.retried.Load())
	if f.admin != "" {
		fmt.Fprintf(w, "server heap in use: %.1f MiB live before, %.1f MiB peak during, %.1f MiB live after (after a forced GC)\n",
			before/(1<<20), peak/(1<<20), after/(1<<20))
	}
}
