// Package metrics is Parley's Prometheus instrumentation.
//
// A [Metrics] owns a private registry (with the Go runtime and process
// collectors) and is served by [Metrics.Handler], usually at GET /metrics.
// Callers record observations through typed methods; they never touch
// Prometheus types directly.
//
// # Metrics never change a result
//
// Every method is safe to call from any request path:
//
//   - it is a no-op on a nil *Metrics, so metrics can be switched off by
//     passing nil;
//   - it recovers any panic raised inside it (including one raised by
//     [Options.Hook]), logs it once per metric and counts it in
//     parley_metric_errors_total{reason="panic"}; it never propagates;
//   - label values are normalised: invalid UTF-8 bytes are replaced by U+FFFD,
//     surrounding white space is trimmed, and the result is cut to 128 runes;
//   - an observation with a required dimension that is empty, or not in its
//     allowed set, is skipped (not guessed) and counted in
//     parley_metric_errors_total{reason="invalid"}.
//
// Metric code never writes a response, never reads a request body and
// returns nothing a caller could act on. Business-outcome metrics (sends,
// activity) are recorded by the caller after its transaction has committed,
// and only for real state changes.
//
// # Metric names
//
//	parley_http_requests_total{route,method,code}       counter    HTTP requests completed. route is the
//	                                                               ServeMux pattern ("POST /api/convs/{id}/messages"),
//	                                                               never the raw path; code is the status (100..599).
//	parley_http_request_duration_seconds{route,method}  histogram  Time to serve those requests (1ms..10s buckets).
//	parley_activity_total{route}                        counter    Business actions completed with a 2xx response,
//	                                                               for the allow-listed routes chosen by the caller.
//	parley_rate_limited_total{bucket,transport}         counter    Requests or frames rejected by the rate limiter;
//	                                                               transport is "http" or "ws". Not counted as activity.
//	parley_http_refused_total{route,code}               counter    Requests refused before their handler by
//	                                                               authentication (401) or authorization (403).
//	parley_sends_total{transport,outcome}               counter    Message sends by transport ("http", "ws", "hook");
//	                                                               outcome "new" (a message was stored), "dup" (an
//	                                                               idempotent retry answered with the stored message)
//	                                                               or a protocol error code such as "NOT_MEMBER".
//	parley_search_total{transport,outcome}              counter    Message searches by transport ("http", "ws");
//	                                                               outcome "ok" (a page was answered, with or without
//	                                                               hits) or a protocol error code such as
//	                                                               "INVALID_ARGUMENT" or "UNAVAILABLE".
//	parley_config_reloads_total{result}                 counter    Configuration reloads; result "ok" or "error"
//	                                                               ("error" keeps the last good configuration).
//	parley_login_refused_total{reason}                  counter    Logins refused before the password was checked:
//	                                                               "backoff_address" (that login name failed too often
//	                                                               from that address), "backoff_install" (from that
//	                                                               known install), "busy" (password hashing saturated).
//	parley_config_warnings                              gauge      Values of the configuration in force that resolved
//	                                                               to their safe side (a malformed rate limit is off).
//	parley_bus_gaps_total                               counter    Notices lost by the bus; the receivers poll the store (resync only if that fails).
//	parley_export_downloads_total{code}                 counter    Export download responses by HTTP status.
//	parley_metric_errors_total{metric,reason}           counter    Observations dropped by this package: reason
//	                                                               "invalid" (a dimension was empty or not allowed),
//	                                                               "panic" (a recovered panic) or "register" (a
//	                                                               GaugeFunc/CounterFunc could not be registered).
//
//	parley_store_duration_seconds{op}                   histogram  Store calls by Store method (Metrics.Store wraps
//	                                                               the store); every op exists from the start.
//	parley_store_errors_total{op}                       counter    Store calls that got no answer (no code, or
//	                                                               UNAVAILABLE); protocol answers are not errors.
//	parley_store_pool_{in_use,idle,max}                 gauge      The store's connection pool (Metrics.Pool).
//	parley_store_pool_waits_total                       counter    Acquisitions that waited, and
//	parley_store_pool_wait_seconds_total                counter    their total wait.
//	parley_export_attempts_total{outcome}               counter    Export attempts: done, retry, failed, lost, stopped.
//	parley_export_attempt_duration_seconds{outcome}     histogram  Their duration.
//	parley_retention_purges_total                       counter    Retention purges (RetentionPurge), and
//	parley_retention_purged_events_total                counter    the events they deleted.
//
// Series whose label values are known in advance (send outcomes new/dup,
// search outcome ok,
// download statuses, store operations, export outcomes, a route's latency,
// refusals, activity and bucket: InitRoute) exist from the start at 0.
//
// Gauges and counters owned by other packages (for example
// parley_ws_connections) are exported with [Metrics.GaugeFunc] and
// [Metrics.CounterFunc]; a function that panics at scrape time is skipped for
// that scrape and the rest of the exposition is still served. The standard
// go_* and process_* metrics are also exported.
package metrics
