package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// walkEnv is a store with a history for the walk's tests: ana and ben in
// the groups w-a, w-b, w-c; ben leaves w-b half way and comes back; some
// messages edited (into and out of a match), one while ben is away,
// some recalled. The index rows of the messages from queueFrom on stay in
// the search queue (searchqueue.go); the others are moved into
// search_docs as they are written.
func walkEnv(t *testing.T, queueFrom int) *postgres.DB {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.DSN(t), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	postgres.StopSearchMover(db)
	ana := parley.Principal{User: "ana", DeviceID: "d", InstallID: "i"}
	ben := parley.Principal{User: "ben", DeviceID: "d", InstallID: "i"}
	for _, u := range []string{"ana", "ben"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			t.Fatal(err)
		}
	}
	convs := []string{"w-a", "w-b", "w-c"}
	for _, c := range convs {
		if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: c, Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
			t.Fatal(err)
		}
	}
	var kept int64
	words := []string{"alpha", "beta", "alpha beta", "gamma", "alphabet"}
	for i := range 90 {
		p := []parley.Principal{ana, ben}[i%2]
		c := convs[i%3]
		if i == 30 {
			if _, err := db.RemoveMember(ctx, ana, "w-b", "ben"); err != nil {
				t.Fatal(err)
			}
		}
		if i == 45 {
			// An edit ben does not see of a message he does: he finds
			// the original, the row after the edit's in the walk.
			if _, err := db.Edit(ctx, ana, parley.EditRequest{Conv: "w-b", Target: kept, CMID: "e-kept", Body: "alpha edited"}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 60 {
			if _, err := db.AddMember(ctx, ana, "w-b", "ben"); err != nil {
				t.Fatal(err)
			}
		}
		if c == "w-b" && i >= 30 && i < 60 {
			p = ana
		}
		s, err := db.Send(ctx, p, parley.SendRequest{Conv: c, CMID: fmt.Sprintf("m%d", i), Body: fmt.Sprintf("%s %d", words[i%len(words)], i)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 28 {
			kept = s.Seq
		}
		switch i % 7 {
		case 1, 4:
			if _, err := db.Edit(ctx, p, parley.EditRequest{Conv: c, Target: s.Seq, CMID: fmt.Sprintf("e%d", i), Body: words[(i+1)%len(words)]}); err != nil {
				t.Fatal(err)
			}
		case 5:
			if _, err := db.Recall(ctx, p, parley.RecallRequest{Conv: c, Target: s.Seq, CMID: fmt.Sprintf("r%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if i < queueFrom {
			if err := postgres.MoveSearchQueue(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Many rows to one millisecond, across conversations: the walk may
	// stop between rows of one time, and between versions of one message.
	for _, table := range []string{"search_docs", "search_queue"} {
		if _, err := postgres.Pool(db).Exec(ctx, `UPDATE `+table+` SET at = 1700000000000 + seq / 4`); err != nil {
			t.Fatal(err)
		}
	}
	var queued int
	if err := postgres.Pool(db).QueryRow(ctx, `SELECT count(*) FROM search_queue`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if want := queueFrom < 90; (queued > 0) != want {
		t.Fatalf("%d rows queued, want some: %v", queued, want)
	}
	return db
}

// searchHitsIn runs searchHits in a snapshot as Search does.
func searchHitsIn(t *testing.T, db *postgres.DB, user string, q parley.SearchQuery, convs []string, walk int) []string {
	t.Helper()
	hits, err := postgres.SearchHits(context.Background(), db, user, q, convs, walk)
	if err != nil {
		t.Fatalf("searchHits walk %d: %v", walk, err)
	}
	return hits
}

// The walk newest first and the GIN query from where it stopped give the
// same hits as the GIN query alone, wherever the walk stops: at every
// bound from one row to past the last, for each user, query, page size and
// starting position.
func TestSearchWalkHandOver(t *testing.T) {
	for _, queueFrom := range []int{90, 60} {
		t.Run(fmt.Sprintf("queued_from_%d", queueFrom), func(t *testing.T) {
			testSearchWalkHandOver(t, walkEnv(t, queueFrom))
		})
	}
}

func testSearchWalkHandOver(t *testing.T, db *postgres.DB) {
	var rows int
	if err := postgres.Pool(db).QueryRow(context.Background(), `SELECT count(*) FROM search_docs`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	convs := []string{"w-a", "w-b", "w-c"}
	queries := walkQueries()
	for _, user := range []string{"ana", "ben"} {
		for qi, q := range queries {
			for _, limit := range []int{1, 4, 50} {
				q.Limit = limit
				want := searchHitsIn(t, db, user, q, convs, 0)
				if qi == 0 && limit == 50 && len(want) < 10 {
					t.Fatalf("%s finds %d hits of alpha: the history is too small to test with", user, len(want))
				}
				for walk := 1; walk <= rows+1; walk++ {
					if got := searchHitsIn(t, db, user, q, convs, walk); !slices.Equal(got, want) {
						t.Fatalf("%s, query %d, limit %d, walk %d:\n got %v\nwant %v", user, qi, limit, walk, got, want)
					}
				}
			}
		}
	}
}

// A search weighs its words by the table's statistics: a word in every
// row walks first, a word the statistics do not list (or list as rare)
// goes to the GIN index at once; with no words, or no statistics, it walks.
func TestSearchWalkByStatistics(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db, err := postgres.Open(ctx, dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Pool(db).Exec(ctx, `INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
		SELECT 'c' || (i % 50), i, i, 'ana', 1700000000000 + i, ('''w' || i || ''':1 ''common'':2')::tsvector
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if f := postgres.TokenFreq(ctx, db, []string{"common"}); f != 1 {
		t.Fatalf("before ANALYZE: %v, want 1 (no statistics)", f)
	}
	db.Close() // a new store reads the statistics again
	if db, err = postgres.Open(ctx, dsn, parley.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := postgres.Pool(db).Exec(ctx, `ANALYZE search_docs`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tokens []string
		walk   bool
	}{
		{[]string{"common"}, true},
		{[]string{"w17"}, false},
		{[]string{"common", "w17"}, false},
		{[]string{"nowhere"}, false},
		{nil, true},
	} {
		f := postgres.TokenFreq(ctx, db, tc.tokens)
		if got := postgres.WalkFor(f) > 0; got != tc.walk {
			t.Errorf("%q: share %v, walk %v; want walk %v", tc.tokens, f, got, tc.walk)
		}
	}
}

// walkQueries are the queries of the walk's tests over walkEnv.
func walkQueries() []parley.SearchQuery {
	cursor := &parley.SearchCursor{At: 1700000000000 + 40/4, Conv: "w-b", Seq: 40}
	terms := func(tok string, prefix bool) []parley.SearchTerm {
		return []parley.SearchTerm{{Tokens: []string{tok}, Prefix: prefix}}
	}
	return []parley.SearchQuery{
		{Terms: terms("alpha", false)},
		{Terms: terms("al", true)},
		{Terms: []parley.SearchTerm{{Tokens: []string{"alpha", "beta"}}}},
		{Terms: terms("gamma", false), From: "ben"},
		{Terms: terms("gamma", false)},
		{Terms: terms("beta", false), After: cursor},
		{Terms: terms("alpha", false), Before: time.UnixMilli(1700000000000 + 50/4)},
		{Terms: terms("al", true), After: cursor, Before: time.UnixMilli(1700000000000 + 20/4)},
		{From: "ana"},
		{Terms: terms("nowhere", false)},
	}
}

// A search finds the same hits whether the rows are queued or indexed:
// every query of the walk's tests, before and after the queue is moved.
func TestSearchQueueSameHits(t *testing.T) {
	ctx := context.Background()
	db := walkEnv(t, 45)
	convs := []string{"w-a", "w-b", "w-c"}
	type key struct {
		user      string
		qi, limit int
		walk      int
	}
	before := map[key][]string{}
	each := func(f func(k key, hits []string)) {
		for _, user := range []string{"ana", "ben"} {
			for qi, q := range walkQueries() {
				for _, limit := range []int{1, 4, 50} {
					for _, walk := range []int{0, 7, 1000} {
						q.Limit = limit
						f(key{user, qi, limit, walk}, searchHitsIn(t, db, user, q, convs, walk))
					}
				}
			}
		}
	}
	each(func(k key, hits []string) { before[k] = hits })
	if err := postgres.MoveSearchQueue(ctx, db); err != nil {
		t.Fatal(err)
	}
	var queued int
	if err := postgres.Pool(db).QueryRow(ctx, `SELECT count(*) FROM search_queue`).Scan(&queued); err != nil || queued != 0 {
		t.Fatalf("after the move: %d rows queued (%v)", queued, err)
	}
	each(func(k key, hits []string) {
		if !slices.Equal(hits, before[k]) {
			t.Errorf("%+v: indexed %v, queued %v", k, hits, before[k])
		}
	})
}
