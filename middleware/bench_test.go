package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
)

// BenchmarkChain is what the whole chain costs one request, in process (no
// socket): a cached identity, a rate limit that allows, the permission
// check, API and activity metrics, in front of a handler that does nothing.
func BenchmarkChain(b *testing.B) {
	f := newFixture(b)
	cfg := parseConfig(b, "rate_limits:\n  send: {limit: 1000000000, window: 1m}\n")
	c := f.chain(cfg, metrics.New(metrics.Options{}))
	h := c.Wrap(middleware.Policy{Pattern: "POST /api/convs/{id}/messages", Bucket: "send", Access: middleware.Identified, Activity: []int{201}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest("POST", "/api/convs/c1/messages", nil)
			r.Header.Set("Authorization", "Bearer "+f.ana)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}
