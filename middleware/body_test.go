package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/middleware"
)

// TestBodyDeadlineAfterBody: the body deadline ends with the body. A
// handler that read its body and then works longer than the deadline keeps
// its request context (net/http's background read must not hit the
// deadline and cancel it), and so does a request without a body.
func TestBodyDeadlineAfterBody(t *testing.T) {
	t.Parallel()
	const d = 100 * time.Millisecond
	h := middleware.BodyDeadline(func() time.Duration { return d })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(5 * d)
		if err := r.Context().Err(); err != nil {
			http.Error(w, "context: "+err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "got "+string(b))
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, method, body, want string
	}{
		{"with a body", http.MethodPost, "hello", "got hello"},
		{"without a body", http.MethodGet, "", "got "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || string(got) != tc.want {
				t.Errorf("%d %q; want 200 %q", res.StatusCode, got, tc.want)
			}
		})
	}
}
