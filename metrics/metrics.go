package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
)

// Metric names, also the names passed to [Options.Hook].
const (
	NameRequests        = "parley_http_requests_total"
	NameRequestDuration = "parley_http_request_duration_seconds"
	NameActivity        = "parley_activity_total"
	NameRateLimited     = "parley_rate_limited_total"
	NameRefused         = "parley_http_refused_total"
	NameSends           = "parley_sends_total"
	NameSearches        = "parley_search_total"
	NameConfigReloads   = "parley_config_reloads_total"
	NameBusGaps         = "parley_bus_gaps_total"
	NameDownloads       = "parley_export_downloads_total"
	NameErrors          = "parley_metric_errors_total"
	NameLoginRefused    = "parley_login_refused_total"
)

// LoginRefusals are the reasons of parley_login_refused_total: the
// backoff of a (login name, client address) pair, of a (login name, known
// install) pair, and a login that found every password-hash slot taken.
var LoginRefusals = []string{"backoff_address", "backoff_install", "busy"}

// Reasons recorded in parley_metric_errors_total.
const (
	reasonInvalid  = "invalid"
	reasonPanic    = "panic"
	reasonRegister = "register"
)

// MaxLabelRunes is the length, in runes, to which every label value is cut.
const MaxLabelRunes = 128

// Options configures New. The zero value is usable.
type Options struct {
	// Log receives the first recovered panic and the first skipped
	// observation of each metric. Nil discards.
	Log *slog.Logger
	// Hook, if not nil, is called with the metric name inside the guarded
	// section of every observation (and of every GaugeFunc/CounterFunc read
	// at scrape time). It exists for tests and fault injection: a Hook that
	// panics shows that a panic never leaves this package. See SetHook.
	Hook func(name string)
}

// Metrics records Parley's observations. Its methods are safe for
// concurrent use and are no-ops on a nil *Metrics.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler
	log     *slog.Logger
	hook    atomic.Pointer[func(string)]
	logged  sync.Map // metric+"\x00"+reason → struct{}: what has been logged once

	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	activity     *prometheus.CounterVec
	rateLimited  *prometheus.CounterVec
	refused      *prometheus.CounterVec
	sends        *prometheus.CounterVec
	searches     *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	busGaps      prometheus.Counter
	downloads    *prometheus.CounterVec
	errors       *prometheus.CounterVec
	loginRefused *prometheus.CounterVec

	ops opsMetrics // store, export and retention (ops.go)
}

// New returns a Metrics with its own registry. It registers only metrics
// it defines, so it cannot fail.
func New(opts Options) *Metrics {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: log,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRequests,
			Help: "HTTP requests completed, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameRequestDuration,
			Help:    "Time to serve HTTP requests, by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		activity: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameActivity,
			Help: "Business actions completed with a 2xx response, by route pattern.",
		}, []string{"route"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRateLimited,
			Help: "Requests or frames rejected by the rate limiter, by bucket and transport.",
		}, []string{"bucket", "transport"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRefused,
			Help: "HTTP requests refused by authentication (401), authorization (403) or an outage of either (503) before their handler, by route pattern and status code.",
		}, []string{"route", "code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameConfigReloads,
			Help: `Configuration reloads by result ("ok" or "error").`,
		}, []string{"result"}),
		busGaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: NameBusGaps,
			Help: "Notices lost by the bus; the receivers poll the store (resync only if that fails).",
		}),
		downloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameDownloads,
			Help: "Export download responses by HTTP status code.",
		}, []string{"code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameErrors,
			Help: `Observations dropped by the metrics code, by metric and reason ("invalid", "panic", "register").`,
		}, []string{"metric", "reason"}),
		loginRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameLoginRefused,
			Help: `Logins refused before the password was checked, by reason ("backoff_address", "backoff_install", "busy").`,
		}, []string{"reason"}),
	}
	for _, r := range LoginRefusals {
		m.loginRefused.WithLabelValues(r)
	}
	m.sends, m.searches = newOutcomes()
	m.ops = newOpsMetrics()
	if opts.Hook != nil {
		m.SetHook(opts.Hook)
	}
	// Both results exist from the start so that rate() and alerts on
	// "error" work before the first failure.
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	m.initKnown()
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.activity, m.rateLimited, m.refused, m.sends,
		m.searches, m.reloads, m.busGaps, m.downloads, m.errors, m.loginRefused,
	)
	m.reg.MustRegister(m.ops.collectors()...)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError,
	})
	return m
}

// newOutcomes makes the counters of the use cases counted by transport and
// outcome: sends and searches.
func newOutcomes() (sends, searches *prometheus.CounterVec) {
	sends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameSends,
		Help: `Message sends by transport and outcome ("new", "dup" or an error code).`,
	}, []string{"transport", "outcome"})
	searches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameSearches,
		Help: `Message searches by transport and outcome ("ok" or an error code).`,
	}, []string{"transport", "outcome"})
	return sends, searches
}

// SetHook replaces the hook given in Options; nil removes it. It is safe
// to call while observations are being made.
func (m *Metrics) SetHook(hook func(name string)) {
	if m == nil {
		return
	}
	if hook == nil {
		m.hook.Store(nil)
		return
	}
	m.hook.Store(&hook)
}

// Handler serves the Prometheus exposition of every registered metric. A
// collector that fails does not fail the scrape. On a nil *Metrics it
// answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return m.handler
}

// Request records one completed HTTP request. route is the route pattern
// that matched (http.Request.Pattern), never the raw path; an empty route
// (nothing matched), an unknown method, a status outside 100..599 or a
// negative duration skips the observation.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	defer m.rescue(NameRequests)
	m.callHook(NameRequests)
	route, method = normalize(route), normalize(method)
	switch {
	case route == "":
		m.skip(NameRequests, "route", route)
	case !httpMethods[method]:
		m.skip(NameRequests, "method", method)
	case status < 100 || status > 599:
		m.skip(NameRequests, "code", strconv.Itoa(status))
	case d < 0:
		m.skip(NameRequests, "duration", d.String())
	default:
		m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(route, method).Observe(d.Seconds())
	}
}

// Activity records one completed business action on route (a route
// pattern). The caller decides what counts: allow-listed routes, 2xx only.
func (m *Metrics) Activity(route string) {
	if m == nil {
		return
	}
	defer m.rescue(NameActivity)
	m.callHook(NameActivity)
	route = normalize(route)
	if route == "" {
		m.skip(NameActivity, "route", route)
		return
	}
	m.activity.WithLabelValues(route).Inc()
}

// RateLimited records one request ("http") or frame ("ws") rejected by the
// rate limiter in bucket.
func (m *Metrics) RateLimited(bucket, transport string) {
	if m == nil {
		return
	}
	defer m.rescue(NameRateLimited)
	m.callHook(NameRateLimited)
	bucket, transport = normalize(bucket), normalize(transport)
	switch {
	case bucket == "":
		m.skip(NameRateLimited, "bucket", bucket)
	case transport != "http" && transport != "ws":
		m.skip(NameRateLimited, "transport", transport)
	default:
		m.rateLimited.WithLabelValues(bucket, transport).Inc()
	}
}

// Refused records one request the chain refused before its handler: 401
// (no identity), 403 (not allowed) or 503 (an outage: the identity or the
// permission could not be checked), on route (a route pattern). Other
// statuses skip the observation.
func (m *Metrics) Refused(route string, status int) {
	if m == nil {
		return
	}
	defer m.rescue(NameRefused)
	m.callHook(NameRefused)
	route = normalize(route)
	switch {
	case route == "":
		m.skip(NameRefused, "route", route)
	case status != http.StatusUnauthorized && status != http.StatusForbidden && status != http.StatusServiceUnavailable:
		m.skip(NameRefused, "code", strconv.Itoa(status))
	default:
		m.refused.WithLabelValues(route, strconv.Itoa(status)).Inc()
	}
}

// Send records the outcome of one message send over transport ("http",
// "ws" or "hook"). outcome is "new" when a message was stored, "dup" when
// an idempotent retry was answered with the stored one, or a protocol
// error code (upper-case letters and underscores). Record it after commit.
func (m *Metrics) Send(transport, outcome string) {
	if m == nil {
		return
	}
	defer m.rescue(NameSends)
	m.callHook(NameSends)
	transport, outcome = normalize(transport), normalize(outcome)
	switch {
	case transport != "http" && transport != "ws" && transport != "hook":
		m.skip(NameSends, "transport", transport)
	case outcome != "new" && outcome != "dup" && !isErrorCode(outcome):
		m.skip(NameSends, "outcome", outcome)
	default:
		m.sends.WithLabelValues(transport, outcome).Inc()
	}
}

// Search records the outcome of one message search over transport ("http"
// or "ws"): "ok" when a page was answered (with or without hits), or a
// protocol error code ("INVALID_ARGUMENT", "NOT_MEMBER", "UNAVAILABLE" while
// an index is being built or the store failed…).
func (m *Metrics) Search(transport, outcome string) {
	if m == nil {
		return
	}
	defer m.rescue(NameSearches)
	m.callHook(NameSearches)
	transport, outcome = normalize(transport), normalize(outcome)
	switch {
	case transport != "http" && transport != "ws":
		m.skip(NameSearches, "transport", transport)
	case outcome != "ok" && !isErrorCode(outcome):
		m.skip(NameSearches, "outcome", outcome)
	default:
		m.searches.WithLabelValues(transport, outcome).Inc()
	}
}

// LoginRefused records one login refused before its password was checked;
// reason is one of LoginRefusals (another is skipped).
func (m *Metrics) LoginRefused(reason string) {
	if m == nil {
		return
	}
	defer m.rescue(NameLoginRefused)
	m.callHook(NameLoginRefused)
	if !slices.Contains(LoginRefusals, reason) {
		m.skip(NameLoginRefused, "reason", reason)
		return
	}
	m.loginRefused.WithLabelValues(reason).Inc()
}

// ConfigReload records one configuration reload attempt.
func (m *Metrics) ConfigReload(ok bool) {
	if m == nil {
		return
	}
	defer m.rescue(NameConfigReloads)
	m.callHook(NameConfigReloads)
	result := "error"
	if ok {
		result = "ok"
	}
	m.reloads.WithLabelValues(result).Inc()
}

// BusGap records one loss of notices reported by the bus.
func (m *Metrics) BusGap() {
	if m == nil {
		return
	}
	defer m.rescue(NameBusGaps)
	m.callHook(NameBusGaps)
	m.busGaps.Inc()
}

// Download records one export download response with the given status.
func (m *Metrics) Download(status int) {
	if m == nil {
		return
	}
	defer m.rescue(NameDownloads)
	m.callHook(NameDownloads)
	if status < 100 || status > 599 {
		m.skip(NameDownloads, "code", strconv.Itoa(status))
		return
	}
	m.downloads.WithLabelValues(strconv.Itoa(status)).Inc()
}

// GaugeFunc exports a gauge whose value is read from f at scrape time, for
// state owned elsewhere (parley_ws_connections, …). If f panics, the
// gauge is left out of that scrape and the panic is counted; the rest of
// the scrape is served. A name that is not a classic Prometheus name
// ([a-zA-Z_:][a-zA-Z0-9_:]*) or is already registered, or a nil f, is
// logged and counted, and nothing is registered.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	m.funcMetric(name, help, prometheus.GaugeValue, f)
}

// CounterFunc is GaugeFunc for a counter kept elsewhere (gateway pushes,
// hints, kicks, …). f must never decrease.
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	m.funcMetric(name, help, prometheus.CounterValue, f)
}

func (m *Metrics) funcMetric(name, help string, typ prometheus.ValueType, f func() float64) {
	m.registerFunc(name, f == nil, func(name string) prometheus.Collector {
		return &funcCollector{m: m, name: name, desc: prometheus.NewDesc(name, help, nil, nil), typ: typ, f: f}
	})
}

// LabeledGaugeFunc exports a gauge with one label whose values are read
// from f at scrape time, in one call for all of them (parley_export_jobs
// by state, counted by one store query). Every value of values is
// exported, 0 when f leaves it out, so the series exist from the start;
// when f reports failure (ok false: the store did not answer) or panics,
// the gauge is left out of that scrape. Names are checked as GaugeFunc's.
func (m *Metrics) LabeledGaugeFunc(name, help, label string, values []string, f func() (map[string]float64, bool)) {
	m.registerFunc(name, f == nil, func(name string) prometheus.Collector {
		return &labeledCollector{m: m, name: name, desc: prometheus.NewDesc(name, help, []string{label}, nil), typ: prometheus.GaugeValue, values: values, f: f}
	})
}

// LabeledCounterFunc is LabeledGaugeFunc for counters kept elsewhere
// (uploads by outcome); every value must never decrease.
func (m *Metrics) LabeledCounterFunc(name, help, label string, values []string, f func() (map[string]float64, bool)) {
	m.registerFunc(name, f == nil, func(name string) prometheus.Collector {
		return &labeledCollector{m: m, name: name, desc: prometheus.NewDesc(name, help, []string{label}, nil), typ: prometheus.CounterValue, values: values, f: f}
	})
}

// registerFunc registers the collector that collector makes for the
// normalised name, unless the function behind it is missing (noFunc) or
// the name is not a classic Prometheus name; each refusal is logged and
// counted, and nothing is registered.
func (m *Metrics) registerFunc(name string, noFunc bool, collector func(name string) prometheus.Collector) {
	if m == nil {
		return
	}
	name = normalize(name)
	defer m.rescue(name)
	m.callHook(name)
	if noFunc {
		m.fail(name, reasonRegister, "error", "nil function")
		return
	}
	// Prometheus now accepts any UTF-8 name, but older scrapers and
	// PromQL without quoting do not: keep to the classic character set.
	if !model.LegacyValidation.IsValidMetricName(name) {
		m.fail(name, reasonRegister, "error", "invalid metric name")
		return
	}
	if err := m.reg.Register(collector(name)); err != nil {
		m.fail(name, reasonRegister, "error", err.Error())
	}
}

type labeledCollector struct {
	m      *Metrics
	name   string
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	values []string
	f      func() (map[string]float64, bool)
}

func (c *labeledCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *labeledCollector) Collect(ch chan<- prometheus.Metric) {
	got, ok := c.read()
	if !ok {
		return
	}
	for _, v := range c.values {
		if metric, err := prometheus.NewConstMetric(c.desc, c.typ, got[v], v); err == nil {
			ch <- metric
		}
	}
}

func (c *labeledCollector) read() (got map[string]float64, ok bool) {
	defer c.m.rescue(c.name)
	c.m.callHook(c.name)
	return c.f()
}

// funcCollector reads one value at scrape time. A panicking f yields no
// sample rather than an invalid metric, so the scrape stays complete.
type funcCollector struct {
	m    *Metrics
	name string
	desc *prometheus.Desc
	typ  prometheus.ValueType
	f    func() float64
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	if v, ok := c.read(); ok {
		if metric, err := prometheus.NewConstMetric(c.desc, c.typ, v); err == nil {
			ch <- metric
		}
	}
}

func (c *funcCollector) read() (v float64, ok bool) {
	defer c.m.rescue(c.name)
	c.m.callHook(c.name)
	return c.f(), true
}

func (m *Metrics) callHook(name string) {
	if h := m.hook.Load(); h != nil {
		(*h)(name)
	}
}

// rescue must be deferred directly. It turns a panic into a count and,
// the first time per metric, a log line with the stack.
func (m *Metrics) rescue(name string) {
	v := recover()
	if v == nil {
		return
	}
	// Reporting must not panic in its turn.
	defer func() { _ = recover() }()
	m.fail(name, reasonPanic, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
}

// skip drops an observation with an invalid dimension.
func (m *Metrics) skip(name, label, value string) {
	m.fail(name, reasonInvalid, "label", label, "value", value)
}

// fail counts a dropped observation and logs the first one of each kind:
// a broken caller would otherwise flood the log on every request.
func (m *Metrics) fail(name, reason string, args ...any) {
	m.errors.WithLabelValues(name, reason).Inc()
	if _, seen := m.logged.LoadOrStore(name+"\x00"+reason, struct{}{}); seen {
		return
	}
	msg := "metrics: observation skipped; logged once, counted in " + NameErrors
	if reason == reasonPanic {
		msg = "metrics: panic recovered, the request continues; logged once, counted in " + NameErrors
	}
	m.log.Warn(msg, append([]any{"metric", name, "reason", reason}, args...)...)
}

var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true,
	http.MethodOptions: true, http.MethodConnect: true, http.MethodTrace: true,
}

// isErrorCode reports whether s looks like a protocol error code.
func isErrorCode(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'A' || c > 'Z') && c != '_' {
			return false
		}
	}
	return true
}

// normalize makes s a safe label value: valid UTF-8, trimmed, at most
// MaxLabelRunes runes.
func normalize(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.TrimSpace(s)
	if len(s) <= MaxLabelRunes {
		return s // at most MaxLabelRunes bytes, so at most as many runes
	}
	n := 0
	for i := range s {
		if n == MaxLabelRunes {
			return strings.TrimSpace(s[:i])
		}
		n++
	}
	return s
}

// promLogger adapts slog to promhttp's logger.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics: scrape: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
