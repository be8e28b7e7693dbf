package metrics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parleychat/parley"
)

// Names of the metrics an on-call person reads first (docs/operations.md):
// the store, its connection pool, the bus, export jobs and retention.
const (
	NameStoreDuration     = "parley_store_duration_seconds"
	NameStoreErrors       = "parley_store_errors_total"
	NamePoolInUse         = "parley_store_pool_in_use"
	NamePoolIdle          = "parley_store_pool_idle"
	NamePoolMax           = "parley_store_pool_max"
	NamePoolWaits         = "parley_store_pool_waits_total"
	NamePoolWaitSeconds   = "parley_store_pool_wait_seconds_total"
	NameBusSent           = "parley_bus_notices_sent_total"
	NameBusReceived       = "parley_bus_notices_received_total"
	NameExportAttempts    = "parley_export_attempts_total"
	NameExportDuration    = "parley_export_attempt_duration_seconds"
	NameExportRunning     = "parley_export_jobs_running"
	NameExportJobs        = "parley_export_jobs"
	NameRetentionPurges   = "parley_retention_purges_total"
	NameRetentionPurged   = "parley_retention_purged_events_total"
	exportOutcomeDone     = "done"
	exportOutcomeRetry    = "retry"
	exportOutcomeFailed   = "failed"
	exportOutcomeLost     = "lost"
	exportOutcomeStopped  = "stopped"
	storeDurationHelpText = "Time of store calls (SQLite or PostgreSQL), by Store method."
)

// ExportOutcomes are the outcomes of an export attempt: done (the artifact
// is ready), retry (it failed and will be retried: a full disk, the store
// down), failed (failed for good), lost (the lease was lost: revoked,
// rolled back or taken over, or the job deleted), stopped (the process
// stopped; the job was handed back).
var ExportOutcomes = []string{exportOutcomeDone, exportOutcomeRetry, exportOutcomeFailed, exportOutcomeLost, exportOutcomeStopped}

// opsMetrics are registered by New next to the request metrics.
type opsMetrics struct {
	storeDuration   *prometheus.HistogramVec
	storeErrors     *prometheus.CounterVec
	exportAttempts  *prometheus.CounterVec
	exportDuration  *prometheus.HistogramVec
	retentionPurges prometheus.Counter
	retentionPurged prometheus.Counter
}

func newOpsMetrics() opsMetrics {
	o := opsMetrics{
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameStoreDuration,
			Help:    storeDurationHelpText,
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameStoreErrors,
			Help: "Store calls that failed without an answer (no protocol code, or UNAVAILABLE: a timeout, a lost connection, an exhausted pool), by Store method. Answers such as NOT_MEMBER are not errors.",
		}, []string{"op"}),
		exportAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameExportAttempts,
			Help: `Export job attempts run by this process, by outcome ("done", "retry", "failed", "lost", "stopped").`,
		}, []string{"outcome"}),
		exportDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameExportDuration,
			Help:    "Time of export job attempts run by this process, by outcome.",
			Buckets: []float64{.1, .5, 1, 5, 15, 60, 300, 900, 3600},
		}, []string{"outcome"}),
		retentionPurges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: NameRetentionPurges,
			Help: "Retention purges run (one per conversation and run, whether or not it deleted anything).",
		}),
		retentionPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: NameRetentionPurged,
			Help: "Events deleted by retention purges.",
		}),
	}
	// Every label value known in advance exists from the start, at 0, so
	// rate() and alerts work before the first event.
	for _, op := range StoreOps {
		o.storeErrors.WithLabelValues(op)
		o.storeDuration.WithLabelValues(op)
	}
	for _, out := range ExportOutcomes {
		o.exportAttempts.WithLabelValues(out)
		o.exportDuration.WithLabelValues(out)
	}
	return o
}

func (o opsMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.storeDuration, o.storeErrors, o.exportAttempts, o.exportDuration, o.retentionPurges, o.retentionPurged}
}

// StoreCall records one store call: its duration, and a failure when err
// says the store could not answer. A caller that gave up (context
// canceled: the client hung up) and a lost export lease are not store
// failures.
func (m *Metrics) StoreCall(op string, d time.Duration, err error) {
	if m == nil {
		return
	}
	defer m.rescue(NameStoreDuration)
	m.callHook(NameStoreDuration)
	op = normalize(op)
	if op == "" || d < 0 {
		m.skip(NameStoreDuration, "op", op)
		return
	}
	m.ops.storeDuration.WithLabelValues(op).Observe(d.Seconds())
	if storeFailed(err) {
		m.ops.storeErrors.WithLabelValues(op).Inc()
	}
}

func storeFailed(err error) bool {
	// A lost export lease is an answer (the job was revoked or taken
	// over), though coded UNAVAILABLE for the worker's sake.
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, parley.ErrLeaseLost) {
		return false
	}
	code := parley.ErrorCode(err)
	return code == "" || code == parley.CodeUnavailable
}

// ExportAttempt records one export attempt that ended with outcome (one of
// ExportOutcomes) after d.
func (m *Metrics) ExportAttempt(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	defer m.rescue(NameExportAttempts)
	m.callHook(NameExportAttempts)
	known := false
	for _, o := range ExportOutcomes {
		known = known || o == outcome
	}
	if !known || d < 0 {
		m.skip(NameExportAttempts, "outcome", outcome)
		return
	}
	m.ops.exportAttempts.WithLabelValues(outcome).Inc()
	m.ops.exportDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// RetentionPurge records one retention purge of a conversation that
// deleted events events (0 is a purge that found nothing to delete).
func (m *Metrics) RetentionPurge(events int) {
	if m == nil {
		return
	}
	defer m.rescue(NameRetentionPurges)
	m.callHook(NameRetentionPurges)
	if events < 0 {
		m.skip(NameRetentionPurges, "events", "negative")
		return
	}
	m.ops.retentionPurges.Inc()
	m.ops.retentionPurged.Add(float64(events))
}

// PoolStats is a store's connection pool at one moment (SQLite: both of
// its pools, writer and readers, summed).
type PoolStats struct {
	InUse, Idle, Max int64
	// Waits counts acquisitions that had to wait for a connection, and
	// WaitTime their total wait, since the pool opened.
	Waits    int64
	WaitTime time.Duration
}

// Pool exports the store's connection pool, read from f at scrape time.
func (m *Metrics) Pool(f func() PoolStats) {
	if f == nil {
		return
	}
	m.GaugeFunc(NamePoolInUse, "Store connections in use.", func() float64 { return float64(f().InUse) })
	m.GaugeFunc(NamePoolIdle, "Store connections open and idle.", func() float64 { return float64(f().Idle) })
	m.GaugeFunc(NamePoolMax, "Most store connections the pool opens (0: no limit).", func() float64 { return float64(f().Max) })
	m.CounterFunc(NamePoolWaits, "Store connection acquisitions that waited for a free connection.", func() float64 { return float64(f().Waits) })
	m.CounterFunc(NamePoolWaitSeconds, "Total time spent waiting for a free store connection.", func() float64 { return f().WaitTime.Seconds() })
}

// InitRoute creates, at 0, the series a route will have (so rate() and
// alerts see them before the first request): its latency histogram, its
// refusals (401, 403, 503) when it needs an identity, its activity when it
// is on the allow-list, and its rate-limit bucket over HTTP. The requests
// counter is labelled by status too, so its series appear with each first
// status. route is the pattern, "POST /api/convs"; one without a method
// gets no latency series.
func (m *Metrics) InitRoute(route, bucket string, refusable, activity bool) {
	if m == nil {
		return
	}
	defer m.rescue(NameRequests)
	route = normalize(route)
	if route == "" {
		return
	}
	if method, _, ok := strings.Cut(route, " "); ok && httpMethods[method] {
		m.duration.WithLabelValues(route, method)
	}
	if refusable {
		for _, code := range []string{"401", "403", "503"} {
			m.refused.WithLabelValues(route, code)
		}
	}
	if activity {
		m.activity.WithLabelValues(route)
	}
	if bucket != "" {
		m.rateLimited.WithLabelValues(normalize(bucket), "http")
	}
}

// InitRateLimited creates the rate-limited series of bucket over
// transport ("http" or "ws") at 0.
func (m *Metrics) InitRateLimited(bucket, transport string) {
	if m == nil || (transport != "http" && transport != "ws") || normalize(bucket) == "" {
		return
	}
	defer m.rescue(NameRateLimited)
	m.rateLimited.WithLabelValues(normalize(bucket), transport)
}

// initKnown creates at 0 the series whose label values are known at
// start.
func (m *Metrics) initKnown() {
	for _, t := range []string{"http", "ws", "hook"} {
		m.sends.WithLabelValues(t, "new")
		m.sends.WithLabelValues(t, "dup")
	}
	for _, t := range []string{"http", "ws"} {
		m.searches.WithLabelValues(t, "ok")
	}
	for _, code := range []int{200, 206, 304, 403, 404, 410, 416, 503} {
		m.downloads.WithLabelValues(strconv.Itoa(code))
	}
	for _, name := range []string{
		NameRequests, NameActivity, NameRateLimited, NameRefused, NameSends, NameSearches, NameConfigReloads,
		NameBusGaps, NameDownloads, NameStoreDuration, NameExportAttempts, NameRetentionPurges,
	} {
		m.errors.WithLabelValues(name, reasonInvalid)
		m.errors.WithLabelValues(name, reasonPanic)
	}
}
