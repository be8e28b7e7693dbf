package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/sqlite"
)

// searchCount is the value of parley_search_total for transport and
// outcome in m's exposition (0 when the series is absent).
func searchCount(t *testing.T, m *metrics.Metrics, transport, outcome string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	series := fmt.Sprintf(`parley_search_total{outcome=%q,transport=%q} `, outcome, transport)
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			return v
		}
	}
	return "0"
}

// TestSearchCounted: Service.Search answers the store's page and counts
// every outcome by transport: a page ("ok"), a refused query
// (INVALID_ARGUMENT, refused by the store's parse before any storage
// work: it answers so even with the store closed), a conversation without the caller
// (NOT_MEMBER), a store that fails (UNAVAILABLE, the error kept for the
// transport to explain).
func TestSearchCounted(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, u := range []string{"ana", "bob", "cy"} {
		if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "g", Title: "g", Members: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{})
	svc := app.New(app.Options{Store: st, Metrics: m})
	for i, body := range []string{"the blue boat", "a red car", "the blue sky"} {
		if _, err := svc.Send(ctx, app.HTTP, ana, parley.SendRequest{Conv: "g", CMID: fmt.Sprint("m", i), Body: body}); err != nil {
			t.Fatal(err)
		}
	}

	page, err := svc.Search(ctx, app.WebSocket, bob, parley.SearchRequest{Query: "blue", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Hits) != 1 || page.Hits[0].Event.Body != "the blue sky" || page.Next == "" {
		t.Fatalf("first page = %+v, want the newest blue message and a next cursor", page)
	}
	if got := page.Hits[0].Highlights; len(got) != 1 || got[0] != (parley.Highlight{Start: 4, End: 8}) {
		t.Errorf("highlights %+v, want [4, 8)", got)
	}
	page, err = svc.Search(ctx, app.HTTP, bob, parley.SearchRequest{Query: "blue", Limit: 1, Cursor: page.Next})
	if err != nil || len(page.Hits) != 1 || page.Hits[0].Event.Body != "the blue boat" {
		t.Fatalf("second page = %+v, %v", page, err)
	}
	if _, err := svc.Search(ctx, app.HTTP, parley.Principal{User: "cy", DeviceID: "d1"}, parley.SearchRequest{Query: "blue", Conv: "g"}); parley.ErrorCode(err) != parley.CodeNotMember {
		t.Errorf("cy in g: %v, want NOT_MEMBER", err)
	}

	st.Close()
	if _, err := svc.Search(ctx, app.HTTP, bob, parley.SearchRequest{Query: `"unbalanced`}); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("bad query with the store closed: %v, want INVALID_ARGUMENT", err)
	}
	_, err = svc.Search(ctx, app.WebSocket, bob, parley.SearchRequest{Query: "blue"})
	var pe *parley.Error
	if err == nil || parley.ErrorCode(err) != parley.CodeUnavailable {
		t.Errorf("closed store: %v, want an internal error", err)
	} else if errors.As(err, &pe) {
		t.Errorf("closed store: %v is a protocol error; want the internal error, for Explain to log", err)
	}

	for _, c := range []struct{ transport, outcome, want string }{
		{"ws", "ok", "1"}, {"http", "ok", "1"}, {"http", "NOT_MEMBER", "1"},
		{"http", "INVALID_ARGUMENT", "1"}, {"ws", "UNAVAILABLE", "1"}, {"http", "UNAVAILABLE", "0"},
	} {
		if got := searchCount(t, m, c.transport, c.outcome); got != c.want {
			t.Errorf("parley_search_total{transport=%q,outcome=%q} = %s, want %s", c.transport, c.outcome, got, c.want)
		}
	}
}
