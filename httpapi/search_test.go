package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sqlite"
)

// searchFixture starts a server with ana, ben and cy, the group g of ana
// and ben, and three messages of ana's; it returns the server and the
// three tokens.
func searchFixture(t *testing.T, store parley.Store) (s *server, ana, ben, cy string) {
	t.Helper()
	s = start(t, store, serverOptions{})
	ana, ben, cy = s.user("ana", parley.RoleUser), s.user("ben", parley.RoleUser), s.user("cy", parley.RoleUser)
	s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "title": "G", "members": []string{"ben"}}).want(201)
	for i, body := range []string{"the blue boat", "a red car", "🚤 naïve blue sky"} {
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": body}, "Idempotency-Key", fmt.Sprint("k", i)).want(201)
	}
	return s, ana, ben, cy
}

// TestSearchRoute: GET /api/search answers the results frame without t
// and rid — hits newest first, each event as sync reads it with its
// highlights in code points, next while more follow — and counts each
// outcome in parley_search_total.
func TestSearchRoute(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s, _, ben, cy := searchFixture(t, open(t, parley.Options{}))
		r := s.do("GET", "/api/search?q=blue&limit=1", ben, nil).want(200)
		if ct, cc := r.header.Get("Content-Type"), r.header.Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
			t.Errorf("Content-Type %q, Cache-Control %q", ct, cc)
		}
		var raw map[string]json.RawMessage
		r.decode(&raw)
		if len(raw) != 2 || raw["hits"] == nil || raw["next"] == nil {
			t.Errorf("body %s, want exactly hits and next", r)
		}
		f := r.frame()
		if len(f.Hits) != 1 || f.Next == "" {
			t.Fatalf("first page %s", r)
		}
		if h := f.Hits[0]; h.Ev.Conv != "g" || h.Ev.Seq != 5 || h.Ev.Sender != "ana" || h.Ev.Body != "🚤 naïve blue sky" ||
			fmt.Sprint(h.Highlights) != "[{8 12}]" || h.Ev.AsOf == nil || !strings.HasSuffix(h.Ev.At, "Z") {
			t.Errorf("hit %s, want seq 5 with blue at code points [8, 12) and its derived state", r)
		}
		r = s.do("GET", "/api/search?q=blue&limit=1&cursor="+url.QueryEscape(f.Next), ben, nil).want(200)
		if r.String() != `{"hits":[{"ev":`+string(mustJSON(t, r.frame().Hits[0].Ev))+`,"highlights":[{"start":4,"end":8}]}]}`+"\n" ||
			r.frame().Hits[0].Ev.Seq != 3 || r.frame().Hits[0].Ev.Body != "the blue boat" {
			t.Fatalf("second page %s: want the oldest blue message and no next", r)
		}
		if f := s.do("GET", "/api/search?q=red+car", ben, nil).want(200); f.String() != `{"hits":[{"ev":`+string(mustJSON(t, f.frame().Hits[0].Ev))+`,"highlights":[{"start":2,"end":5},{"start":6,"end":9}]}]}`+"\n" {
			t.Errorf("two words: %s, want a highlight each", f)
		}
		if f := s.do("GET", "/api/search?q=%22red+car%22", ben, nil).want(200); f.String() != `{"hits":[{"ev":`+string(mustJSON(t, f.frame().Hits[0].Ev))+`,"highlights":[{"start":2,"end":9}]}]}`+"\n" {
			t.Errorf("a phrase: %s, want one highlight over it", f)
		}
		if f := s.do("GET", "/api/search?q=green", ben, nil).want(200); f.String() != `{"hits":[]}`+"\n" {
			t.Errorf("no match: %s, want {\"hits\":[]}", f)
		}
		r = s.do("GET", "/api/search?"+url.Values{"q": {`"blue boat"`}, "conv": {"g"}, "from": {"ana"}, "before": {"2999-01-01T00:00:00+01:00"}}.Encode(), ben, nil).want(200)
		if f := r.frame(); len(f.Hits) != 1 || f.Hits[0].Ev.Seq != 3 || fmt.Sprint(f.Hits[0].Highlights) != "[{4 13}]" || f.Next != "" {
			t.Errorf("a phrase in g from ana: %s", r)
		}
		if f := s.do("GET", "/api/search?q=blue&before=2001-01-01T00:00:00Z", ben, nil).want(200).frame(); len(f.Hits) != 0 {
			t.Errorf("before 2001: %+v, want no hits", f.Hits)
		}
		if f := s.do("GET", "/api/search?q=blue", cy, nil).want(200).frame(); len(f.Hits) != 0 {
			t.Errorf("cy, in no conversation, found %+v", f.Hits)
		}
		s.do("GET", "/api/search?q=blue&conv=g", cy, nil).want(404, parley.CodeNotMember)
		s.do("GET", "/api/search?q=blue", "", nil).want(401, parley.CodeUnauthenticated)
		s.do("GET", "/api/search?q=blue&limit=0", ben, nil).want(400, parley.CodeInvalidArgument)

		for _, c := range []struct {
			series string
			want   float64
		}{
			{`parley_search_total{outcome="ok",transport="http"}`, 8},
			{`parley_search_total{outcome="NOT_MEMBER",transport="http"}`, 1},
			{`parley_search_total{outcome="INVALID_ARGUMENT",transport="http"}`, 1},
		} {
			if got := metricValue(t, s, c.series); got != c.want {
				t.Errorf("%s = %v, want %v", c.series, got, c.want)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSearchRouteRefused: parameters that do not make a search are 400
// INVALID_ARGUMENT saying which and why, before the store is asked.
func TestSearchRouteRefused(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s, _, ben, _ := searchFixture(t, open(t, parley.Options{}))
		for _, c := range []struct{ query, detail string }{
			{"", "q is required"},
			{"conv=g", "q is required"},
			{"q=a&q=b", "q must be given once"},
			{"q=a&conv=g&conv=h", "conv must be given once"},
			{"q=", "query must be 1–256 characters"},
			{"q=" + strings.Repeat("x", 257), "query must be 1–256 characters"},
			{"q=%22blue", "query has an unbalanced quote"},
			{"q=b*", "a prefix needs at least two letters"},
			{"q=%3F%21", "query has nothing to search for"},
			{"q=from%3AAna", "from: must name a user id"},
			{"q=blue+in%3Ag+in%3Ah", "query has two different in: filters"},
			{"q=blue&from=Not+A+User", "from must be a user id"},
			{"q=blue&conv=%2F", "conv must match [A-Za-z0-9._:-]{1,64}"},
			{"q=blue&limit=0", "limit must be at least 1"},
			{"q=blue&limit=-3", "limit must be at least 1"},
			{"q=blue&limit=x", "limit must be an integer"},
			{"q=blue&limit=", "limit must be an integer"},
			{"q=blue&before=2026-12-02", "before must be a time in RFC 3339, such as 2026-12-02T21:40:00Z"},
			// An unescaped + is a space in a query string: the offset is lost.
			{"q=blue&before=2026-12-02T22:40:00+01:00", "before must be a time in RFC 3339, such as 2026-12-02T21:40:00Z"},
			{"q=blue&before=1969-12-31T23:59:59Z", "before must be later than 1970-01-01T00:00:00.001Z"},
			{"q=blue&cursor=nope", "cursor must be the next of an earlier search reply"},
			{"q=%FF", "query must be valid UTF-8"},
		} {
			p := s.do("GET", "/api/search?"+c.query, ben, nil).want(400, parley.CodeInvalidArgument).problem()
			if p.Detail != c.detail {
				t.Errorf("?%s: detail %q, want %q", c.query, p.Detail, c.detail)
			}
		}
	})
}

// TestSearchRouteUnavailable: a store that fails under a search is 503
// UNAVAILABLE with Retry-After and a request id (retry later), never an
// empty page that would read as "no such message".
func TestSearchRouteUnavailable(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		store := open(t, parley.Options{})
		s, _, ben, _ := searchFixture(t, store)
		s.do("GET", "/api/me", ben, nil).want(200) // the token's lookup is cached for 5 s
		store.Close()
		r := s.do("GET", "/api/search?q=blue", ben, nil).want(503, parley.CodeUnavailable)
		if p := r.problem(); p.Detail != parley.InternalMessage || p.RequestID == "" || r.header.Get("Retry-After") != "1" {
			t.Errorf("503 %s, Retry-After %q: want the generic detail, a request id and Retry-After 1", r, r.header.Get("Retry-After"))
		}
		if got := metricValue(t, s, `parley_search_total{outcome="UNAVAILABLE",transport="http"}`); got != 1 {
			t.Errorf("UNAVAILABLE searches counted %v, want 1", got)
		}
	})
}

// TestSearchRouteBuilding: while a conversation's index is not built (after
// an upgrade, until the rebuild), a search that touches it is 503
// UNAVAILABLE saying so, with Retry-After: retryable, and no request id
// since nothing failed; a search that does not touch it is answered. Once
// rebuilt, the same search finds the messages.
func TestSearchRouteBuilding(t *testing.T) {
	file := filepath.Join(t.TempDir(), "parley.db")
	store, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s, _, ben, cy := searchFixture(t, store)
	side, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	if _, err := side.Exec(`INSERT INTO search_pending (conv_id) VALUES ('g')`); err != nil {
		t.Fatal(err)
	}
	r := s.do("GET", "/api/search?q=blue", ben, nil).want(503, parley.CodeUnavailable)
	if p := r.problem(); p.Detail != "the search index is being built; try again later" || p.RequestID != "" || r.header.Get("Retry-After") != "1" {
		t.Errorf("while building: %s, Retry-After %q", r, r.header.Get("Retry-After"))
	}
	if f := s.do("GET", "/api/search?q=blue", cy, nil).want(200).frame(); len(f.Hits) != 0 {
		t.Errorf("cy, who is not in g: %+v", f.Hits)
	}
	if _, err := store.RebuildSearch(context.Background(), "g", nil); err != nil {
		t.Fatal(err)
	}
	if f := s.do("GET", "/api/search?q=blue", ben, nil).want(200).frame(); len(f.Hits) != 2 {
		t.Errorf("after the rebuild: %+v, want both blue messages", f.Hits)
	}
}
