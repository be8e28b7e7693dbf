package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/parleychat/parley/metrics"
)

// scrape serves one GET /metrics from m.Handler and parses the exposition.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape status = %d, want 200; body:\n%s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// sample returns the value of the series name{labels} (the sample count
// for a histogram) and whether it is present. labels must match exactly.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, mt := range fam.GetMetric() {
		if len(mt.GetLabel()) != len(labels) {
			continue
		}
		for _, lp := range mt.GetLabel() {
			if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
		}
		switch {
		case mt.Counter != nil:
			return mt.GetCounter().GetValue(), true
		case mt.Gauge != nil:
			return mt.GetGauge().GetValue(), true
		case mt.Histogram != nil:
			return float64(mt.GetHistogram().GetSampleCount()), true
		case mt.Untyped != nil:
			return mt.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// series counts the series of a family that observed something: the
// series created at 0 from the start (label values known in advance) do
// not count.
func series(fams map[string]*dto.MetricFamily, name string) int {
	n := 0
	for _, mt := range fams[name].GetMetric() {
		switch {
		case mt.Counter != nil && mt.GetCounter().GetValue() == 0:
		case mt.Histogram != nil && mt.GetHistogram().GetSampleCount() == 0:
		default:
			n++
		}
	}
	return n
}

func errorCount(fams map[string]*dto.MetricFamily, metric, reason string) float64 {
	v, _ := sample(fams, metrics.NameErrors, map[string]string{"metric": metric, "reason": reason})
	return v
}

// recordingHandler is a slog.Handler that keeps every record's message
// and attributes, so tests can count log lines.
type recordingHandler struct {
	mu      sync.Mutex
	records []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "stack" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	})
	h.mu.Lock()
	h.records = append(h.records, b.String())
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.records...)
}

// every calls each observation method once with valid arguments.
var every = []struct {
	name string
	do   func(m *metrics.Metrics)
}{
	{metrics.NameRequests, func(m *metrics.Metrics) {
		m.Request("POST /api/convs/{id}/messages", "POST", 200, 3*time.Millisecond)
	}},
	{metrics.NameActivity, func(m *metrics.Metrics) { m.Activity("POST /api/convs/{id}/messages") }},
	{metrics.NameRateLimited, func(m *metrics.Metrics) { m.RateLimited("send", "ws") }},
	{metrics.NameRefused, func(m *metrics.Metrics) { m.Refused("GET /api/admin/config", 403) }},
	{metrics.NameSends, func(m *metrics.Metrics) { m.Send("http", "new") }},
	{metrics.NameSearches, func(m *metrics.Metrics) { m.Search("ws", "ok") }},
	{metrics.NameConfigReloads, func(m *metrics.Metrics) { m.ConfigReload(true) }},
	{metrics.NameBusGaps, func(m *metrics.Metrics) { m.BusGap() }},
	{metrics.NameDownloads, func(m *metrics.Metrics) { m.Download(206) }},
	{"parley_test_gauge", func(m *metrics.Metrics) {
		m.GaugeFunc("parley_test_gauge", "A test gauge.", func() float64 { return 7 })
	}},
	{"parley_test_counter_total", func(m *metrics.Metrics) {
		m.CounterFunc("parley_test_counter_total", "A test counter.", func() float64 { return 11 })
	}},
}

// TestObservations proves that each method records the series it
// documents, with the labels it documents, and nothing in the error count.
func TestObservations(t *testing.T) {
	tests := []struct {
		name   string
		do     func(m *metrics.Metrics)
		metric string
		labels map[string]string
		want   float64
	}{
		{"request counter", func(m *metrics.Metrics) {
			m.Request("GET /api/convs", "GET", 200, time.Millisecond)
			m.Request("GET /api/convs", "GET", 200, 2*time.Second)
		}, metrics.NameRequests, map[string]string{"route": "GET /api/convs", "method": "GET", "code": "200"}, 2},
		{"request duration", func(m *metrics.Metrics) {
			m.Request("GET /api/convs", "GET", 500, time.Millisecond)
		}, metrics.NameRequestDuration, map[string]string{"route": "GET /api/convs", "method": "GET"}, 1},
		{"request status 100", func(m *metrics.Metrics) {
			m.Request("GET /ws", "GET", 101, 0)
		}, metrics.NameRequests, map[string]string{"route": "GET /ws", "method": "GET", "code": "101"}, 1},
		{"request status 599", func(m *metrics.Metrics) {
			m.Request("GET /ws", "HEAD", 599, 0)
		}, metrics.NameRequests, map[string]string{"route": "GET /ws", "method": "HEAD", "code": "599"}, 1},
		{"activity", func(m *metrics.Metrics) { m.Activity("POST /api/convs") },
			metrics.NameActivity, map[string]string{"route": "POST /api/convs"}, 1},
		{"rate limited http", func(m *metrics.Metrics) { m.RateLimited("login", "http") },
			metrics.NameRateLimited, map[string]string{"bucket": "login", "transport": "http"}, 1},
		{"rate limited ws", func(m *metrics.Metrics) { m.RateLimited("send", "ws") },
			metrics.NameRateLimited, map[string]string{"bucket": "send", "transport": "ws"}, 1},
		{"refused 401", func(m *metrics.Metrics) { m.Refused("GET /api/convs", 401) },
			metrics.NameRefused, map[string]string{"route": "GET /api/convs", "code": "401"}, 1},
		{"refused 403", func(m *metrics.Metrics) { m.Refused("GET /api/admin/config", 403) },
			metrics.NameRefused, map[string]string{"route": "GET /api/admin/config", "code": "403"}, 1},
		{"refused 503 (outage)", func(m *metrics.Metrics) { m.Refused("GET /api/convs", 503) },
			metrics.NameRefused, map[string]string{"route": "GET /api/convs", "code": "503"}, 1},
		{"send new", func(m *metrics.Metrics) { m.Send("http", "new") },
			metrics.NameSends, map[string]string{"transport": "http", "outcome": "new"}, 1},
		{"send dup", func(m *metrics.Metrics) { m.Send("ws", "dup") },
			metrics.NameSends, map[string]string{"transport": "ws", "outcome": "dup"}, 1},
		{"send error code", func(m *metrics.Metrics) { m.Send("hook", "RATE_LIMITED") },
			metrics.NameSends, map[string]string{"transport": "hook", "outcome": "RATE_LIMITED"}, 1},
		{"search ok", func(m *metrics.Metrics) { m.Search("http", "ok"); m.Search("http", "ok") },
			metrics.NameSearches, map[string]string{"transport": "http", "outcome": "ok"}, 2},
		{"search error code", func(m *metrics.Metrics) { m.Search("ws", "NOT_MEMBER") },
			metrics.NameSearches, map[string]string{"transport": "ws", "outcome": "NOT_MEMBER"}, 1},
		{"search ok starts at zero", func(m *metrics.Metrics) {},
			metrics.NameSearches, map[string]string{"transport": "ws", "outcome": "ok"}, 0},
		{"reload ok", func(m *metrics.Metrics) { m.ConfigReload(true) },
			metrics.NameConfigReloads, map[string]string{"result": "ok"}, 1},
		{"reload error", func(m *metrics.Metrics) { m.ConfigReload(false); m.ConfigReload(false) },
			metrics.NameConfigReloads, map[string]string{"result": "error"}, 2},
		{"reload error starts at zero", func(m *metrics.Metrics) { m.ConfigReload(true) },
			metrics.NameConfigReloads, map[string]string{"result": "error"}, 0},
		{"bus gap", func(m *metrics.Metrics) { m.BusGap(); m.BusGap(); m.BusGap() },
			metrics.NameBusGaps, map[string]string{}, 3},
		{"bus gap starts at zero", func(m *metrics.Metrics) {},
			metrics.NameBusGaps, map[string]string{}, 0},
		{"download", func(m *metrics.Metrics) { m.Download(206) },
			metrics.NameDownloads, map[string]string{"code": "206"}, 1},
		{"gauge func", func(m *metrics.Metrics) {
			m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return 42 })
		}, "parley_ws_connections", map[string]string{}, 42},
		{"counter func", func(m *metrics.Metrics) {
			m.CounterFunc("parley_gateway_pushes_total", "Frames pushed.", func() float64 { return 9 })
		}, "parley_gateway_pushes_total", map[string]string{}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New(metrics.Options{})
			tt.do(m)
			fams := scrape(t, m)
			got, ok := sample(fams, tt.metric, tt.labels)
			if !ok {
				t.Fatalf("no series %s%v in scrape", tt.metric, tt.labels)
			}
			if got != tt.want {
				t.Errorf("%s%v = %v, want %v", tt.metric, tt.labels, got, tt.want)
			}
			if n := series(fams, metrics.NameErrors); n != 0 {
				t.Errorf("%s has %d series, want none", metrics.NameErrors, n)
			}
			if series(fams, "go_goroutines") == 0 {
				t.Error("Go collector missing from the scrape")
			}
		})
	}
}

// TestExposition checks the exact exposition text of a few counters over a
// real HTTP scrape.
func TestExposition(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.Send("http", "new")
	m.Send("http", "new")
	m.Send("ws", "dup")
	m.RateLimited("send", "ws")
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	if got, want := resp.Header.Get("Content-Type"), "text/plain"; !strings.HasPrefix(got, want) {
		t.Errorf("Content-Type = %q, want %s…", got, want)
	}
	want := `# HELP parley_rate_limited_total Requests or frames rejected by the rate limiter, by bucket and transport.
# TYPE parley_rate_limited_total counter
parley_rate_limited_total{bucket="send",transport="ws"} 1
`
	if !strings.Contains(string(body), want) {
		t.Errorf("exposition does not contain\n%s\ngot:\n%s", want, body)
	}
	want = `# HELP parley_sends_total Message sends by transport and outcome ("new", "dup" or an error code).
# TYPE parley_sends_total counter
parley_sends_total{outcome="dup",transport="hook"} 0
parley_sends_total{outcome="dup",transport="http"} 0
parley_sends_total{outcome="dup",transport="ws"} 1
parley_sends_total{outcome="new",transport="hook"} 0
parley_sends_total{outcome="new",transport="http"} 2
parley_sends_total{outcome="new",transport="ws"} 0
`
	if !strings.Contains(string(body), want) {
		t.Errorf("exposition does not contain\n%s\ngot:\n%s", want, body)
	}
}

// TestSkipped proves that an observation with an empty or disallowed
// dimension records nothing in its own metric and is counted once in
// parley_metric_errors_total{reason="invalid"}, with one log line.
func TestSkipped(t *testing.T) {
	tests := []struct {
		name   string
		do     func(m *metrics.Metrics)
		metric string
	}{
		{"request empty route", func(m *metrics.Metrics) { m.Request("", "GET", 200, 0) }, metrics.NameRequests},
		{"request blank route", func(m *metrics.Metrics) { m.Request(" \t\n", "GET", 200, 0) }, metrics.NameRequests},
		{"request status 42", func(m *metrics.Metrics) { m.Request("GET /x", "GET", 42, 0) }, metrics.NameRequests},
		{"request status 99", func(m *metrics.Metrics) { m.Request("GET /x", "GET", 99, 0) }, metrics.NameRequests},
		{"request status 600", func(m *metrics.Metrics) { m.Request("GET /x", "GET", 600, 0) }, metrics.NameRequests},
		{"request status 0", func(m *metrics.Metrics) { m.Request("GET /x", "GET", 0, 0) }, metrics.NameRequests},
		{"request unknown method", func(m *metrics.Metrics) { m.Request("GET /x", "BREW", 200, 0) }, metrics.NameRequests},
		{"request empty method", func(m *metrics.Metrics) { m.Request("GET /x", "", 200, 0) }, metrics.NameRequests},
		{"request negative duration", func(m *metrics.Metrics) { m.Request("GET /x", "GET", 200, -time.Second) }, metrics.NameRequests},
		{"activity empty route", func(m *metrics.Metrics) { m.Activity("") }, metrics.NameActivity},
		{"rate limited empty bucket", func(m *metrics.Metrics) { m.RateLimited("", "http") }, metrics.NameRateLimited},
		{"refused empty route", func(m *metrics.Metrics) { m.Refused("", 401) }, metrics.NameRefused},
		{"refused 404", func(m *metrics.Metrics) { m.Refused("GET /api/convs", 404) }, metrics.NameRefused},
		{"rate limited transport hook", func(m *metrics.Metrics) { m.RateLimited("send", "hook") }, metrics.NameRateLimited},
		{"rate limited unknown transport", func(m *metrics.Metrics) { m.RateLimited("send", "udp") }, metrics.NameRateLimited},
		{"send unknown transport", func(m *metrics.Metrics) { m.Send("smtp", "new") }, metrics.NameSends},
		{"send empty transport", func(m *metrics.Metrics) { m.Send("", "new") }, metrics.NameSends},
		{"send empty outcome", func(m *metrics.Metrics) { m.Send("http", "") }, metrics.NameSends},
		{"send lower-case outcome", func(m *metrics.Metrics) { m.Send("http", "forbidden") }, metrics.NameSends},
		{"send outcome with digits", func(m *metrics.Metrics) { m.Send("http", "E42") }, metrics.NameSends},
		{"send outcome with dash", func(m *metrics.Metrics) { m.Send("ws", "NOT-FOUND") }, metrics.NameSends},
		{"send outcome New", func(m *metrics.Metrics) { m.Send("ws", "New") }, metrics.NameSends},
		{"search transport hook", func(m *metrics.Metrics) { m.Search("hook", "ok") }, metrics.NameSearches},
		{"search outcome new", func(m *metrics.Metrics) { m.Search("http", "new") }, metrics.NameSearches},
		{"search empty outcome", func(m *metrics.Metrics) { m.Search("ws", "") }, metrics.NameSearches},
		{"download status 42", func(m *metrics.Metrics) { m.Download(42) }, metrics.NameDownloads},
		{"download status 1000", func(m *metrics.Metrics) { m.Download(1000) }, metrics.NameDownloads},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &recordingHandler{}
			m := metrics.New(metrics.Options{Log: slog.New(logs)})
			tt.do(m)
			tt.do(m)
			fams := scrape(t, m)
			if n := series(fams, tt.metric); n != 0 {
				t.Errorf("%s has %d series, want none", tt.metric, n)
			}
			if tt.metric == metrics.NameRequests {
				if n := series(fams, metrics.NameRequestDuration); n != 0 {
					t.Errorf("%s has %d series, want none", metrics.NameRequestDuration, n)
				}
			}
			if got := errorCount(fams, tt.metric, "invalid"); got != 2 {
				t.Errorf("%s{metric=%q,reason=\"invalid\"} = %v, want 2", metrics.NameErrors, tt.metric, got)
			}
			if got := len(logs.lines()); got != 1 {
				t.Errorf("log lines = %d, want 1 (logged once): %q", got, logs.lines())
			}
		})
	}
}

// TestNormalize proves label values are valid UTF-8, trimmed and capped
// at 128 runes (not bytes) before they reach the exposition.
func TestNormalize(t *testing.T) {
	tests := []struct {
		name  string
		route string
		want  string
	}{
		{"1000 ASCII characters", strings.Repeat("a", 1000), strings.Repeat("a", 128)},
		{"1000 two-byte runes", strings.Repeat("é", 1000), strings.Repeat("é", 128)},
		{"exactly 128 runes", strings.Repeat("ü", 128), strings.Repeat("ü", 128)},
		{"invalid UTF-8", "GET /a\xffb\xc3", "GET /a\uFFFDb\uFFFD"},
		{"trimmed", "  GET /api/convs \n", "GET /api/convs"},
		{"trimmed after the cut", strings.Repeat("x", 127) + "   yyy", strings.Repeat("x", 127)},
		{"quotes and newline kept", `GET /"q"` + "\nz", `GET /"q"` + "\nz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New(metrics.Options{})
			m.Activity(tt.route)
			m.Request(tt.route, " GET ", 200, time.Millisecond)
			fams := scrape(t, m)
			if got, ok := sample(fams, metrics.NameActivity, map[string]string{"route": tt.want}); !ok || got != 1 {
				t.Errorf("activity{route=%q} = %v, %v; want 1, true; series: %v", tt.want, got, ok, fams[metrics.NameActivity])
			}
			labels := map[string]string{"route": tt.want, "method": "GET", "code": "200"}
			if got, ok := sample(fams, metrics.NameRequests, labels); !ok || got != 1 {
				t.Errorf("requests%v = %v, %v; want 1, true", labels, got, ok)
			}
			for _, mt := range fams[metrics.NameActivity].GetMetric() {
				for _, lp := range mt.GetLabel() {
					if !utf8.ValidString(lp.GetValue()) || utf8.RuneCountInString(lp.GetValue()) > metrics.MaxLabelRunes {
						t.Errorf("label %s=%q is invalid or longer than %d runes", lp.GetName(), lp.GetValue(), metrics.MaxLabelRunes)
					}
				}
			}
		})
	}
}

// TestNil proves a nil *Metrics is a usable no-op, so metrics can be
// switched off by passing nil.
func TestNil(t *testing.T) {
	var m *metrics.Metrics
	m.SetHook(func(string) { panic("hook on nil") })
	for _, e := range every {
		e.do(m)
	}
	m.Request("", "", 0, -1)
	m.GaugeFunc("", "", nil)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Handler status = %d, want 404", rec.Code)
	}
}

// TestHookPanic proves that a panic inside any method never reaches the
// caller, is counted and logged once per metric, and that the same
// Metrics works normally once the hook is removed.
func TestHookPanic(t *testing.T) {
	logs := &recordingHandler{}
	m := metrics.New(metrics.Options{
		Log:  slog.New(logs),
		Hook: func(name string) { panic("injected in " + name) },
	})
	for _, e := range every {
		for range 2 {
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Errorf("%s: panic escaped: %v", e.name, v)
					}
				}()
				e.do(m)
			}()
		}
	}

	// Scraping under the panicking hook still works; the function metrics
	// were never registered.
	fams := scrape(t, m)
	for _, e := range every {
		if got := errorCount(fams, e.name, "panic"); got != 2 {
			t.Errorf("%s{metric=%q,reason=\"panic\"} = %v, want 2", metrics.NameErrors, e.name, got)
		}
		if n := series(fams, e.name); n != 0 && e.name != metrics.NameConfigReloads && e.name != metrics.NameBusGaps {
			t.Errorf("%s has %d series under a panicking hook, want none", e.name, n)
		}
	}
	if got, want := len(logs.lines()), len(every); got != want {
		t.Errorf("log lines = %d, want %d (one per metric): %q", got, want, logs.lines())
	}
	for _, l := range logs.lines() {
		if !strings.Contains(l, "panic=injected in ") {
			t.Errorf("log line %q does not carry the panic value", l)
		}
	}

	m.SetHook(nil)
	for _, e := range every {
		e.do(m)
	}
	fams = scrape(t, m)
	for _, e := range every {
		if n := series(fams, e.name); n == 0 {
			t.Errorf("%s missing after the hook was removed", e.name)
		}
	}
	if got, _ := sample(fams, metrics.NameBusGaps, map[string]string{}); got != 1 {
		t.Errorf("bus gaps = %v, want 1 (only the call after the hook was removed)", got)
	}
	if got, _ := sample(fams, "parley_test_gauge", map[string]string{}); got != 7 {
		t.Errorf("parley_test_gauge = %v, want 7", got)
	}
}

// TestFuncPanicDoesNotBreakScrape proves a GaugeFunc or CounterFunc whose
// function panics is left out of the scrape while every other metric is
// still served with status 200.
func TestFuncPanicDoesNotBreakScrape(t *testing.T) {
	logs := &recordingHandler{}
	m := metrics.New(metrics.Options{Log: slog.New(logs)})
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return 3 })
	m.GaugeFunc("parley_broken", "Always panics.", func() float64 { panic("broken gauge") })
	m.CounterFunc("parley_broken_total", "Always panics.", func() float64 {
		var p *int
		return float64(*p) // a runtime error, not just a panic(string)
	})
	m.BusGap()

	for i := 1; i <= 3; i++ {
		fams := scrape(t, m)
		if got, _ := sample(fams, "parley_ws_connections", map[string]string{}); got != 3 {
			t.Errorf("scrape %d: parley_ws_connections = %v, want 3", i, got)
		}
		if got, _ := sample(fams, metrics.NameBusGaps, map[string]string{}); got != 1 {
			t.Errorf("scrape %d: bus gaps = %v, want 1", i, got)
		}
		for _, name := range []string{"parley_broken", "parley_broken_total"} {
			if _, ok := fams[name]; ok {
				t.Errorf("scrape %d: %s present, want it left out", i, name)
			}
		}
	}
	// Collectors run concurrently, so a scrape may or may not see its own
	// panic; after three scrapes at least two are visible.
	fams := scrape(t, m)
	for _, name := range []string{"parley_broken", "parley_broken_total"} {
		if got := errorCount(fams, name, "panic"); got < 3 {
			t.Errorf("%s{metric=%q,reason=\"panic\"} = %v, want >= 3", metrics.NameErrors, name, got)
		}
	}
	if got := len(logs.lines()); got != 2 {
		t.Errorf("log lines = %d, want 2 (once per broken metric): %q", got, logs.lines())
	}
}

// TestFuncRegisterErrors proves a bad GaugeFunc/CounterFunc registration is
// counted and does not panic or disturb the existing metric.
func TestFuncRegisterErrors(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return 1 })
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return 2 })
	m.CounterFunc("parley bad name", "Spaces are not allowed.", func() float64 { return 1 })
	m.GaugeFunc("parley_nil", "No function.", nil)
	m.CounterFunc(metrics.NameBusGaps, "Clashes with a built-in metric.", func() float64 { return 5 })

	fams := scrape(t, m)
	if got, _ := sample(fams, "parley_ws_connections", map[string]string{}); got != 1 {
		t.Errorf("parley_ws_connections = %v, want 1 (the first registration)", got)
	}
	if got, _ := sample(fams, metrics.NameBusGaps, map[string]string{}); got != 0 {
		t.Errorf("bus gaps = %v, want 0", got)
	}
	for _, name := range []string{"parley_ws_connections", "parley bad name", "parley_nil", metrics.NameBusGaps} {
		if got := errorCount(fams, name, "register"); got != 1 {
			t.Errorf("%s{metric=%q,reason=\"register\"} = %v, want 1", metrics.NameErrors, name, got)
		}
	}
}

// TestConcurrent exercises every method, scrapes and hook swaps from many
// goroutines; run with -race. Observations lost to the injected panics
// are exactly those counted as panics.
func TestConcurrent(t *testing.T) {
	const workers, iterations = 8, 200
	m := metrics.New(metrics.Options{})
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return 1 })
	panicOnGap := func(name string) {
		if name == metrics.NameBusGaps {
			panic("gap")
		}
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(2)
	go func() { // swap the hook
		defer side.Done()
		for {
			select {
			case <-stop:
				return
			default:
				m.SetHook(panicOnGap)
				m.SetHook(nil)
			}
		}
	}()
	go func() { // scrape
		defer side.Done()
		for {
			select {
			case <-stop:
				return
			default:
				rec := httptest.NewRecorder()
				m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				if rec.Code != http.StatusOK {
					t.Errorf("scrape status = %d", rec.Code)
					return
				}
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iterations {
				m.Request("GET /api/convs", "GET", 200, time.Duration(i)*time.Millisecond)
				m.Activity("GET /api/convs")
				m.RateLimited("send", "ws")
				m.Send("ws", "new")
				m.Send("ws", "BAD-CODE")
				m.ConfigReload(i%2 == 0)
				m.BusGap()
				m.Download(200)
				m.GaugeFunc(fmt.Sprintf("parley_c_%d_%d", w, i%3), "x", func() float64 { return 1 })
			}
		}()
	}
	wg.Wait()
	close(stop)
	side.Wait()
	m.SetHook(nil)

	fams := scrape(t, m)
	const n = workers * iterations
	checks := []struct {
		metric string
		labels map[string]string
	}{
		{metrics.NameRequests, map[string]string{"route": "GET /api/convs", "method": "GET", "code": "200"}},
		{metrics.NameRequestDuration, map[string]string{"route": "GET /api/convs", "method": "GET"}},
		{metrics.NameActivity, map[string]string{"route": "GET /api/convs"}},
		{metrics.NameRateLimited, map[string]string{"bucket": "send", "transport": "ws"}},
		{metrics.NameSends, map[string]string{"transport": "ws", "outcome": "new"}},
		{metrics.NameDownloads, map[string]string{"code": "200"}},
	}
	for _, c := range checks {
		if got, _ := sample(fams, c.metric, c.labels); got != n {
			t.Errorf("%s%v = %v, want %d", c.metric, c.labels, got, n)
		}
	}
	ok, _ := sample(fams, metrics.NameConfigReloads, map[string]string{"result": "ok"})
	bad, _ := sample(fams, metrics.NameConfigReloads, map[string]string{"result": "error"})
	if ok != n/2 || bad != n/2 {
		t.Errorf("reloads ok, error = %v, %v; want %d each", ok, bad, n/2)
	}
	gaps, _ := sample(fams, metrics.NameBusGaps, map[string]string{})
	if lost := errorCount(fams, metrics.NameBusGaps, "panic"); gaps+lost != n {
		t.Errorf("bus gaps %v + panics %v = %v, want %d", gaps, lost, gaps+lost, n)
	}
	if got := errorCount(fams, metrics.NameSends, "invalid"); got != n {
		t.Errorf("invalid sends = %v, want %d", got, n)
	}
	if got := errorCount(fams, "parley_c_0_0", "register"); got != (iterations+2)/3-1 {
		t.Errorf("duplicate registrations of parley_c_0_0 = %v, want %d", got, (iterations+2)/3-1)
	}
}

// TestLabeledGaugeFunc: every listed value is exported, 0 when the function
// leaves it out; a failed read or a panic leaves the gauge out of that
// scrape and the others are served.
func TestLabeledGaugeFunc(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var mode string
	m.LabeledGaugeFunc("parley_test_jobs", "Jobs by state.", "state", []string{"queued", "done"}, func() (map[string]float64, bool) {
		switch mode {
		case "fail":
			return nil, false
		case "panic":
			panic("broken")
		}
		return map[string]float64{"queued": 4, "other": 9}, true
	})
	m.GaugeFunc("parley_ws_connections", "Open WebSocket connections.", func() float64 { return 3 })
	for _, tc := range []struct {
		mode    string
		present bool
	}{{"", true}, {"fail", false}, {"panic", false}, {"", true}} {
		mode = tc.mode
		fams := scrape(t, m)
		_, present := fams["parley_test_jobs"]
		if present != tc.present {
			t.Fatalf("mode %q: present %v, want %v", tc.mode, present, tc.present)
		}
		if got, _ := sample(fams, "parley_ws_connections", map[string]string{}); got != 3 {
			t.Errorf("mode %q: the other gauge = %v, want 3", tc.mode, got)
		}
		if !tc.present {
			continue
		}
		for state, want := range map[string]float64{"queued": 4, "done": 0} {
			if got, ok := sample(fams, "parley_test_jobs", map[string]string{"state": state}); !ok || got != want {
				t.Errorf("state %s = %v (%v), want %v", state, got, ok, want)
			}
		}
		if _, ok := sample(fams, "parley_test_jobs", map[string]string{"state": "other"}); ok {
			t.Error("a value not listed is exported")
		}
	}
}
