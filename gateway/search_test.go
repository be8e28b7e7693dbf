package gateway_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// TestSearchFrame: a search frame answers results with the hits the
// caller may read, newest first, each event as sync reads it (derived
// state: the edited text, as_of) with its highlights in code points; next
// pages through the rest; a conversation without the caller is NOT_MEMBER.
func TestSearchFrame(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		twoInG1(t, srv)
		user(t, s, "cy")
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		ben := dial(t, srv.url, login(t, s, "ben", "d1", "i1").Token)
		cy := dial(t, srv.url, login(t, s, "cy", "d1", "i1").Token)
		send(ana, "g1", "m1", "the blue boat")    // 3
		send(ana, "g1", "m2", "a red car")        // 4
		send(ana, "g1", "m3", "🚤 naïve blue sky") // 5
		if f := ana.do(map[string]any{"t": "edit", "conv": "g1", "target": 4, "cmid": "e1", "body": "a blue car"}); f.T != wire.TEdited {
			t.Fatalf("edit: %+v", f)
		}

		f := ben.do(map[string]any{"t": "search", "q": "blue", "limit": 2})
		if f.T != wire.TResults || len(f.Hits) != 2 || f.Next == "" {
			t.Fatalf("first page: %+v", f)
		}
		if h := f.Hits[0]; h.Ev.Seq != 5 || h.Ev.Body != "🚤 naïve blue sky" || fmt.Sprint(h.Highlights) != "[{8 12}]" || h.Ev.AsOf == nil {
			t.Errorf("newest hit %+v, want seq 5 with blue at code points [8, 12) (UTF-16 units would say 9) and its derived state", h)
		}
		if h := f.Hits[1]; h.Ev.Seq != 4 || h.Ev.Body != "a blue car" || h.Ev.EditSeq != 6 || fmt.Sprint(h.Highlights) != "[{2 6}]" {
			t.Errorf("edited hit %+v, want seq 4 read as its edit", h)
		}
		more := ben.do(map[string]any{"t": "search", "q": "blue", "limit": 2, "cursor": f.Next})
		if more.T != wire.TResults || len(more.Hits) != 1 || more.Hits[0].Ev.Seq != 3 || more.Next != "" {
			t.Fatalf("second page: %+v", more)
		}
		if f := ben.do(map[string]any{"t": "search", "q": "red"}); f.T != wire.TResults || f.Hits == nil || len(f.Hits) != 0 {
			t.Errorf("the edited-away text: %+v, want no hits (an empty list)", f)
		}
		if f := ben.do(map[string]any{"t": "search", "q": "boat", "conv": "g1", "from": "ana"}); len(f.Hits) != 1 || f.Hits[0].Ev.Seq != 3 {
			t.Errorf("conv and from: %+v", f)
		}
		if f := cy.do(map[string]any{"t": "search", "q": "blue"}); f.T != wire.TResults || len(f.Hits) != 0 {
			t.Errorf("cy, in no conversation: %+v, want no hits", f)
		}
		wantCode(t, cy.do(map[string]any{"t": "search", "q": "blue", "conv": "g1"}), parley.CodeNotMember)
		wantCode(t, cy.do(map[string]any{"t": "search", "q": "blue in:g1"}), parley.CodeNotMember)
	})
}

// TestSearchFrameRefused: a search frame the server cannot take is an
// INVALID_ARGUMENT error frame that keeps its rid and says what is wrong,
// and the socket stays usable.
func TestSearchFrameRefused(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		for _, tc := range []struct{ name, frame, msg string }{
			{"no q", `{"t":"search","rid":"x"}`, "search needs q"},
			{"a date for before", `{"t":"search","rid":"x","q":"blue","before":"2026-12-02"}`, "before must be a time in RFC 3339, such as 2026-12-02T21:40:00Z"},
			{"limit 0", `{"t":"search","rid":"x","q":"blue","limit":0}`, "limit must be at least 1"},
			{"blank query", `{"t":"search","rid":"x","q":"   "}`, "query must be 1–256 characters"},
			{"unbalanced quote", `{"t":"search","rid":"x","q":"\"blue boat"}`, "query has an unbalanced quote"},
			{"a prefix of one letter", `{"t":"search","rid":"x","q":"b*"}`, "a prefix needs at least two letters"},
			{"punctuation only", `{"t":"search","rid":"x","q":"?!"}`, "query has nothing to search for"},
			{"bad in:", `{"t":"search","rid":"x","q":"blue in:"}`, "in: must name a conversation id"},
			{"bad cursor", `{"t":"search","rid":"x","q":"blue","cursor":"nope"}`, "cursor must be the next of an earlier search reply"},
			{"bad from", `{"t":"search","rid":"x","q":"blue","from":"Not A User"}`, "from must be a user id"},
		} {
			ana.raw(websocket.MessageText, []byte(tc.frame))
			f := ana.next()
			if f.T != wire.TError || f.Code != parley.CodeInvalidArgument || f.Msg != tc.msg || string(f.RID) != `"x"` {
				t.Errorf("%s: %+v, want INVALID_ARGUMENT %q with rid x", tc.name, f, tc.msg)
			}
		}
		if f := ana.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
			t.Fatalf("socket after refused searches: %+v", f)
		}
	})
}

// TestSearchFrameBucket: a search frame asks the search bucket (its HTTP
// twin's, GET /api/search); a refused one is RATE_LIMITED with
// retry_after_ms.
func TestSearchFrameBucket(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		var mu sync.Mutex
		var asked []string
		limit := func(_ context.Context, bucket, user string) (bool, time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, bucket)
			return bucket != "search", 2 * time.Second
		}
		srv := newServer(t, s, gateway.Options{Limit: limit})
		twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		mu.Lock()
		asked = nil
		mu.Unlock()
		f := ana.do(map[string]any{"t": "search", "q": "blue"})
		if f.Code != parley.CodeRateLimited || f.RetryAfterMS != 2000 {
			t.Fatalf("search over its limit: %+v", f)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(asked) != "[search]" {
			t.Errorf("buckets asked %v, want [search]", asked)
		}
	})
}

// TestSearchFrameUnavailable: a store that fails is a retryable
// UNAVAILABLE error frame with the generic message and a request id, never
// an empty page that would read as "no such message".
func TestSearchFrameUnavailable(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "g1", "m1", "the blue boat")
		s.Close() // the socket is open; the store goes away under it
		f := ana.do(map[string]any{"t": "search", "q": "blue"})
		if f.T != wire.TError || f.Code != parley.CodeUnavailable || f.Msg != parley.InternalMessage || f.RequestID == "" || f.Hits != nil {
			t.Fatalf("search on a closed store: %+v", f)
		}
	})
}

// TestSearchFrameBuilding: while a conversation's index is not built, a
// search touching it is an UNAVAILABLE error frame saying so (retryable,
// no request id: nothing failed); after the rebuild it is answered.
func TestSearchFrameBuilding(t *testing.T) {
	file := filepath.Join(t.TempDir(), "parley.db")
	s, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv := newServer(t, s, gateway.Options{})
	twoInG1(t, srv)
	ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
	send(ana, "g1", "m1", "the blue boat")
	side, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	if _, err := side.Exec(`INSERT INTO search_pending (conv_id) VALUES ('g1')`); err != nil {
		t.Fatal(err)
	}
	f := ana.do(map[string]any{"t": "search", "q": "blue"})
	if f.T != wire.TError || f.Code != parley.CodeUnavailable || f.Msg != "the search index is being built; try again later" || f.RequestID != "" {
		t.Fatalf("while building: %+v", f)
	}
	if _, err := s.RebuildSearch(context.Background(), "", nil); err != nil {
		t.Fatal(err)
	}
	if f := ana.do(map[string]any{"t": "search", "q": "blue"}); f.T != wire.TResults || len(f.Hits) != 1 {
		t.Fatalf("after the rebuild: %+v", f)
	}
}
