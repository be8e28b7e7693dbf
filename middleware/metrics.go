package middleware

import (
	"net/http"
	"slices"
)

// apiMetrics records the route template, method, status and latency of
// every request that passed authorization, after the handler answered.
func (c *Chain) apiMetrics(p Policy, next http.Handler) http.Handler {
	if c.Metrics == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := c.Now()
		sw := statusOf(w)
		next.ServeHTTP(sw, r)
		d := c.Now().Sub(start)
		c.record(func(m Recorder) { m.Request(p.Pattern, r.Method, sw.status(), d) })
	})
}

// activity counts a business action when the route is on the allow-list
// and answered one of the statuses it names.
func (c *Chain) activity(p Policy, next http.Handler) http.Handler {
	if c.Metrics == nil || len(p.Activity) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := statusOf(w)
		next.ServeHTTP(sw, r)
		if slices.Contains(p.Activity, sw.status()) {
			c.record(func(m Recorder) { m.Activity(p.Pattern) })
		}
	})
}

// routeIniter is a Recorder that creates a route's series at 0 before its
// first request (*metrics.Metrics does).
type routeIniter interface {
	InitRoute(route, bucket string, refusable, activity bool)
}

// initRoute creates p's series at 0, when the recorder can.
func (c *Chain) initRoute(p Policy) {
	c.record(func(m Recorder) {
		if i, ok := m.(routeIniter); ok {
			i.InitRoute(p.Pattern, p.Bucket, p.Access != Public || p.Feature != "", len(p.Activity) > 0)
		}
	})
}

// record runs one metric call; a panic in it is logged and dropped, never
// passed on to the request.
func (c *Chain) record(f func(Recorder)) {
	if c.Metrics == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			c.Log.Error("metric failed; request unaffected", "panic", v)
		}
	}()
	f(c.Metrics)
}

// statusWriter remembers the status a handler wrote. It only observes:
// every write goes through unchanged, and Unwrap lets http.ResponseController
// and the WebSocket upgrade reach the real writer.
type statusWriter struct {
	http.ResponseWriter
	code  int
	bytes int64 // body bytes written, for the access line
}

func statusOf(w http.ResponseWriter) *statusWriter {
	if sw, ok := w.(*statusWriter); ok {
		return sw
	}
	return &statusWriter{ResponseWriter: w}
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the status written, 200 when the handler wrote nothing, and
// 101 after a WebSocket upgrade (hijacked before any WriteHeader here).
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
