package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// get answers GET url's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// exposed lists the metric names an exposition serves, with a
// histogram's _bucket, _sum and _count series.
func exposed(t *testing.T, text string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+s] = true
			}
		}
	}
	return names
}

var metricName = regexp.MustCompile(`\b(?:parley|go|process)_[a-z0-9_]+\b`)

// documentedMetrics returns the metric names of the metrics table of
// docs/operations.md.
func documentedMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var names []string
	for _, line := range strings.Split(section, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			names = append(names, name)
		}
	}
	if len(names) < 20 {
		t.Fatalf("docs/operations.md's metrics table lists %d metrics; want the whole table", len(names))
	}
	return names
}

// A fresh server exposes every metric docs/operations.md documents, before
// any traffic (the counters at 0); the Grafana dashboard and
// docs/operations.md query only metrics the server exposes.
func TestMetricsDocumentedAndPresent(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := serve(t, b.db, b.dir)
		checkDocumented(t, p)
		tokens := seed(t, b.store(t), "ana/phone")
		req, err := http.NewRequest("POST", p.http+"/api/convs/g1/messages", strings.NewReader(`{"body":"hello"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokens["ana/phone"])
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("send: %d", resp.StatusCode)
		}
		// The send was timed and, on PostgreSQL, published on the bus; the
		// pool has connections. The PostgreSQL bus drops a gateway's own
		// notices (postgres.BusOptions.SkipOwn, set by serve), checked
		// below. A SQLite server is one gateway with no bus: its notices go
		// to its own fan-out alone.
		sent := 1.0
		if b.name != "postgres" {
			sent = 0
		}
		for _, c := range []struct {
			series string
			min    float64
		}{
			{`parley_store_duration_seconds_count{op="Send"}`, 1},
			{`parley_store_errors_total{op="Send"}`, 0},
			{`parley_bus_notices_sent_total`, sent},
			{`parley_bus_notices_received_total`, 0},
			{`parley_store_pool_max`, 1},
		} {
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, body := get(t, p.http+"/metrics")
				v, ok := value(body, c.series)
				if ok && v >= c.min {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s = %v (present %v), want at least %v", c.series, v, ok, c.min)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		// The notice was sent (above); its echo, were it not dropped, would
		// be back within milliseconds (the PostgreSQL bus flushes every 5ms).
		time.Sleep(time.Second)
		_, body := get(t, p.http+"/metrics")
		if v, ok := value(body, `parley_bus_notices_received_total`); !ok || v != 0 {
			t.Errorf("parley_bus_notices_received_total = %v (present %v): the gateway heard its own notice back", v, ok)
		}
	})
}

// value reads one series' value from an exposition.
func value(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func checkDocumented(t *testing.T, p *proc) {
	t.Helper()
	status, body := get(t, p.http+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	have := exposed(t, body)
	for _, name := range documentedMetrics(t) {
		if !have[name] {
			t.Errorf("docs/operations.md documents %s; a fresh server does not expose it", name)
		}
	}

	raw, err := os.ReadFile("../../docs/grafana/parley.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana/parley.json is not valid JSON: %v", err)
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			for _, name := range metricName.FindAllString(tg.Expr, -1) {
				if !have[name] {
					t.Errorf("dashboard panel %q queries %s, which the server does not expose", p.Title, name)
				}
			}
		}
	}
	if exprs < 20 {
		t.Errorf("the dashboard has %d queries; want its panels", exprs)
	}

	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range metricName.FindAllString(string(ops), -1) {
		if !have[name] {
			t.Errorf("docs/operations.md names %s, which the server does not expose", name)
		}
	}
}

// --admin-addr serves /metrics and the profiler on its own listener; the
// main listener then serves neither. Without it /metrics stays on the main
// listener and the profiler is served nowhere.
func TestAdminAddr(t *testing.T) {
	t.Run("set", func(t *testing.T) {
		p := serveArgs(t, "--admin-addr", "127.0.0.1:0")
		if p.admin == "" {
			t.Fatal("no \"admin listening on\" line")
		}
		for _, c := range []struct {
			url    string
			status int
			has    string
		}{
			{p.admin + "/debug/pprof/", 200, "goroutine"},
			{p.admin + "/debug/pprof/cmdline", 200, "serve"},
			{p.admin + "/metrics", 200, "parley_store_duration_seconds"},
			{p.http + "/debug/pprof/", 404, ""},
			{p.http + "/debug/pprof/cmdline", 404, ""},
			{p.http + "/metrics", 404, ""},
		} {
			status, body := get(t, c.url)
			if status != c.status || !strings.Contains(body, c.has) {
				t.Errorf("GET %s: %d (body has %q: %v), want %d", c.url, status, c.has, strings.Contains(body, c.has), c.status)
			}
		}
	})
	t.Run("unset", func(t *testing.T) {
		p := serveArgs(t)
		if p.admin != "" {
			t.Fatalf("admin listener %s without --admin-addr", p.admin)
		}
		if status, _ := get(t, p.http+"/metrics"); status != 200 {
			t.Errorf("/metrics on the main listener: %d, want 200", status)
		}
		if status, _ := get(t, p.http+"/debug/pprof/"); status != 404 {
			t.Errorf("/debug/pprof/ on the main listener: %d, want 404", status)
		}
	})
}
