package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// searchEnv is a store with users ana, ben and cy, the group c-x (ana and
// ben: seqs 1, 2 are the joins) and the group c-y (ana and cy), and a raw
// pool on the same database.
type searchEnv struct {
	dsn          string
	db           *postgres.DB
	raw          *pgxpool.Pool
	ana, ben, cy parley.Principal
}

func newSearchEnv(t *testing.T) *searchEnv {
	t.Helper()
	ctx := context.Background()
	e := &searchEnv{dsn: pgtest.DSN(t)}
	e.db = e.open(t)
	raw, err := pgxpool.New(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	e.raw = raw
	for _, u := range []string{"ana", "ben", "cy"} {
		if _, err := e.db.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			t.Fatal(err)
		}
	}
	e.ana = parley.Principal{User: "ana", DeviceID: "d", InstallID: "i"}
	e.ben = parley.Principal{User: "ben", DeviceID: "d", InstallID: "i"}
	e.cy = parley.Principal{User: "cy", DeviceID: "d", InstallID: "i"}
	for conv, peer := range map[string]string{"c-x": "ben", "c-y": "cy"} {
		nc := parley.NewConversation{ID: conv, Kind: parley.KindGroup, Members: []string{peer}}
		if _, err := e.db.CreateConversation(ctx, e.ana, nc); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *searchEnv) open(t *testing.T) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), e.dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// These tests read search_docs: every send's row is moved there
	// before the send returns (searchqueue_test.go tests the queue).
	postgres.SetSearchMoveSync(db)
	return db
}

func (e *searchEnv) send(t *testing.T, p parley.Principal, r parley.SendRequest) int64 {
	t.Helper()
	if r.CMID == "" {
		r.CMID = parley.NewID()
	}
	s, err := e.db.Send(context.Background(), p, r)
	if err != nil {
		t.Fatalf("send %+v: %v", r, err)
	}
	return s.Seq
}

func (e *searchEnv) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := e.raw.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// hits searches as p and describes the hits as "conv/seq body" (with
// "@edit" when the body is an edit's), newest first.
func (e *searchEnv) hits(t *testing.T, p parley.Principal, r parley.SearchRequest) []string {
	t.Helper()
	page, err := e.db.Search(context.Background(), p, r)
	if err != nil {
		t.Fatalf("search %+v as %s: %v", r, p.User, err)
	}
	out := []string{}
	for _, h := range page.Hits {
		s := fmt.Sprintf("%s/%d %s", h.Event.Conv, h.Event.Seq, h.Event.Body)
		if h.Event.Derived != nil && h.Event.Derived.EditSeq != 0 {
			s += fmt.Sprintf(" @%d", h.Event.Derived.EditSeq)
		}
		if len(h.Highlights) == 0 {
			s += " (no highlight)"
		}
		out = append(out, s)
	}
	return out
}

func (e *searchEnv) wantHits(t *testing.T, p parley.Principal, query string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := e.hits(t, p, parley.SearchRequest{Query: query}); !slices.Equal(got, want) {
		t.Errorf("%s searches %q:\n got %q\nwant %q", p.User, query, got, want)
	}
}

// docs lists every search_docs row, tsvector as text.
func (e *searchEnv) docs(t *testing.T) []string {
	t.Helper()
	rows, err := e.raw.Query(context.Background(), `SELECT conv_id || '/' || seq || '/' || vseq || ' ' || sender_user || ' ' || at || ' ' || tsv::text
		FROM search_docs ORDER BY conv_id, seq, vseq`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameAsRebuilt checks the index the writes made incrementally against
// the one RebuildSearch makes from the events: the same rows, times and
// tokens included.
func (e *searchEnv) sameAsRebuilt(t *testing.T, step string) {
	t.Helper()
	before := e.docs(t)
	res, err := e.db.RebuildSearch(context.Background(), "", nil)
	if err != nil {
		t.Fatalf("%s: rebuild: %v", step, err)
	}
	after := e.docs(t)
	if !slices.Equal(before, after) {
		t.Errorf("%s: the index differs from a rebuild:\nincremental %q\n    rebuilt %q", step, before, after)
	}
	if res.Rows != int64(len(after)) || res.Convs != 2 || res.Total != 2 {
		t.Errorf("%s: rebuild reports %+v, want 2 conversations and %d rows", step, res, len(after))
	}
}

// Every write path keeps the index what a rebuild from the events makes:
// plain sends (parley_send_many, one and several in a batch), a reply and
// a mention (the Go-side transaction), an edit, a recall, a rollback that
// undoes a recall and an edit, a purge; replays write nothing.
func TestSearchWritePaths(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	fox := e.send(t, e.ana, parley.SendRequest{Conv: "c-x", CMID: "k1", Body: "The quick brown fox"})
	out := e.db.SendBatch(ctx, []parley.BatchSend{
		{P: e.ana, Req: parley.SendRequest{Conv: "c-x", CMID: "b1", Body: "fox one"}},
		{P: e.cy, Req: parley.SendRequest{Conv: "c-y", CMID: "b2", Body: "fox two"}},
		{P: e.ben, Req: parley.SendRequest{Conv: "c-y", CMID: "b3", Body: "fox refused"}}, // not a member
	})
	if out[0].Err != nil || out[1].Err != nil || parley.ErrorCode(out[2].Err) != parley.CodeNotMember {
		t.Fatalf("batch: %+v", out)
	}
	reply := e.send(t, e.ben, parley.SendRequest{Conv: "c-x", CMID: "r1", Body: "a fox reply", ReplyTo: fox})
	mention := e.send(t, e.ben, parley.SendRequest{Conv: "c-x", CMID: "m1", Body: "hey @ana, fox!"})
	e.wantHits(t, e.ana, "fox",
		fmt.Sprintf("c-x/%d hey @ana, fox!", mention), fmt.Sprintf("c-x/%d a fox reply", reply),
		fmt.Sprintf("c-y/%d fox two", out[1].Sent.Seq), fmt.Sprintf("c-x/%d fox one", out[0].Sent.Seq),
		fmt.Sprintf("c-x/%d The quick brown fox", fox))
	e.wantHits(t, e.cy, "fox", fmt.Sprintf("c-y/%d fox two", out[1].Sent.Seq))
	// Replays, on both paths.
	e.send(t, e.ana, parley.SendRequest{Conv: "c-x", CMID: "k1", Body: "The quick brown fox"})
	e.send(t, e.ben, parley.SendRequest{Conv: "c-x", CMID: "m1", Body: "hey @ana, fox!"})
	e.sameAsRebuilt(t, "sends")

	edit, err := e.db.Edit(ctx, e.ana, parley.EditRequest{Conv: "c-x", Target: fox, CMID: "e1", Body: "the slow green turtle"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Edit(ctx, e.ana, parley.EditRequest{Conv: "c-x", Target: fox, CMID: "e1", Body: "the slow green turtle"}); err != nil {
		t.Fatal(err)
	}
	e.wantHits(t, e.ben, "turtle", fmt.Sprintf("c-x/%d the slow green turtle @%d", fox, edit.Seq))
	e.wantHits(t, e.ben, "quick")
	e.sameAsRebuilt(t, "edit")

	_, err = e.db.Recall(ctx, e.ben, parley.RecallRequest{Conv: "c-x", Target: reply, CMID: "x1"})
	if err != nil {
		t.Fatal(err)
	}
	e.wantHits(t, e.ana, "reply")
	if n := e.count(t, `SELECT count(*) FROM search_docs WHERE conv_id = 'c-x' AND seq = $1`, reply); n != 0 {
		t.Errorf("%d index rows of the recalled message", n)
	}
	e.sameAsRebuilt(t, "recall")

	// Back to before the edit: the recall and the edit are undone.
	if _, err := e.db.Rollback(ctx, "c-x", edit.Seq-1); err != nil {
		t.Fatal(err)
	}
	e.wantHits(t, e.ana, "reply", fmt.Sprintf("c-x/%d a fox reply", reply))
	e.wantHits(t, e.ana, "quick", fmt.Sprintf("c-x/%d The quick brown fox", fox))
	e.wantHits(t, e.ana, "turtle")
	e.sameAsRebuilt(t, "rollback")

	if err := e.db.SetRetention(ctx, "c-x", parley.Retention{KeepLast: 2}); err != nil {
		t.Fatal(err)
	}
	pr, err := e.db.Purge(ctx, "c-x")
	if err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT count(*) FROM search_docs WHERE conv_id = 'c-x' AND seq < $1`, pr.MinSeq); n != 0 || pr.MinSeq <= fox {
		t.Errorf("after a purge to %d: %d index rows below it", pr.MinSeq, n)
	}
	e.wantHits(t, e.ana, "quick")
	e.sameAsRebuilt(t, "purge")
}

func (e *searchEnv) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := e.raw.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// A former member finds what they could read while a member: nothing sent
// after they left, and a message edited after they left by its old text.
func TestSearchFormerMember(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	old := e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "lunch at noon"})
	if _, err := e.db.RemoveMember(ctx, e.ana, "c-x", "ben"); err != nil {
		t.Fatal(err)
	}
	e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "lunch moved"})
	ed, err := e.db.Edit(ctx, e.ana, parley.EditRequest{Conv: "c-x", Target: old, CMID: "e", Body: "dinner at eight"})
	if err != nil {
		t.Fatal(err)
	}
	e.wantHits(t, e.ben, "lunch", fmt.Sprintf("c-x/%d lunch at noon", old))
	e.wantHits(t, e.ben, "dinner")
	e.wantHits(t, e.ana, "dinner", fmt.Sprintf("c-x/%d dinner at eight @%d", old, ed.Seq))
	e.wantHits(t, e.ana, "lunch", fmt.Sprintf("c-x/%d lunch moved", old+2))
	e.wantHits(t, e.cy, "lunch")
	if _, err := e.db.Search(ctx, e.cy, parley.SearchRequest{Query: "lunch", Conv: "c-x"}); parley.ErrorCode(err) != parley.CodeNotMember {
		t.Errorf("in: a conversation without a period: %v, want NOT_MEMBER", err)
	}
}

// Paging by cursor, two hits a page, while new matches arrive between the
// pages: every message that matched when the walk began comes exactly
// once, in order, and none that came later.
func TestSearchPaging(t *testing.T) {
	e := newSearchEnv(t)
	var sent []parley.Event
	for i := range 7 {
		conv := []string{"c-x", "c-y"}[i%2]
		seq := e.send(t, e.ana, parley.SendRequest{Conv: conv, Body: fmt.Sprintf("note %d", i)})
		ev, err := e.db.Fetch(context.Background(), e.ana, conv, seq)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, ev)
	}
	// The order of results: newest first by time, then conv and seq
	// descending (two sends may share a millisecond).
	slices.SortFunc(sent, func(a, b parley.Event) int {
		ca, cb := parley.CursorOf(a), parley.CursorOf(b)
		if cb.Before(ca) {
			return -1
		}
		return 1
	})
	var want []string
	for _, ev := range sent {
		want = append(want, fmt.Sprintf("%s/%d %s", ev.Conv, ev.Seq, ev.Body))
	}
	var got []string
	r := parley.SearchRequest{Query: "note", Limit: 2}
	for pages := 0; ; pages++ {
		page, err := e.db.Search(context.Background(), e.ana, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range page.Hits {
			got = append(got, fmt.Sprintf("%s/%d %s", h.Event.Conv, h.Event.Seq, h.Event.Body))
		}
		e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "another note"})
		if page.Next == "" || pages > 10 {
			break
		}
		if len(page.Hits) != 2 {
			t.Fatalf("a page of %d hits with more to come", len(page.Hits))
		}
		r.Cursor = page.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("walk:\n got %q\nwant %q", got, want)
	}
}

// A missing index is an internal error (UNAVAILABLE, no code of its own a
// client would take as an answer), never an empty page.
func TestSearchBrokenIndex(t *testing.T) {
	e := newSearchEnv(t)
	e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "hello"})
	e.exec(t, `DROP TABLE search_docs`)
	page, err := e.db.Search(context.Background(), e.ana, parley.SearchRequest{Query: "hello"})
	var pe *parley.Error
	if err == nil || errors.As(err, &pe) || parley.ErrorCode(err) != parley.CodeUnavailable {
		t.Fatalf("search without its table: %+v, %v; want an internal error", page, err)
	}
	if len(page.Hits) != 0 {
		t.Errorf("hits with an error: %+v", page)
	}
}

// A pending conversation answers ErrSearchBuilding to every search that
// covers it, and only to those, until RebuildSearch; the previous
// version's parley_send_many (no tokens) marks its conversation pending.
func TestSearchPending(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "alpha"})
	e.send(t, e.ana, parley.SendRequest{Conv: "c-y", Body: "alpha"})
	e.exec(t, `SELECT * FROM parley_send_many(ARRAY['c-y'], ARRAY['cy'], ARRAY['d'], ARRAY['old1'],
		ARRAY['\x00'::bytea], ARRAY['alpha from the old version'], ARRAY['mid-old-1'])`)
	building := func(p parley.Principal, conv string) {
		t.Helper()
		_, err := e.db.Search(ctx, p, parley.SearchRequest{Query: "alpha", Conv: conv})
		var pe *parley.Error
		if parley.ErrorCode(err) != parley.CodeUnavailable || !errors.As(err, &pe) {
			t.Errorf("%s searches %q: %v, want the index being built", p.User, conv, err)
		}
	}
	building(e.ana, "")
	building(e.ana, "c-y")
	building(e.cy, "")
	e.wantHits(t, e.ben, "alpha", "c-x/3 alpha")
	if got := e.hits(t, e.ana, parley.SearchRequest{Query: "alpha", Conv: "c-x"}); !slices.Equal(got, []string{"c-x/3 alpha"}) {
		t.Errorf("in c-x while c-y is pending: %q", got)
	}
	var progress []parley.SearchRebuild
	res, err := e.db.RebuildSearch(ctx, "c-y", func(r parley.SearchRebuild) { progress = append(progress, r) })
	if err != nil || res != (parley.SearchRebuild{Convs: 1, Total: 1, Rows: 2}) || len(progress) != 1 || progress[0] != res {
		t.Fatalf("rebuild c-y: %+v, %v (progress %+v)", res, err, progress)
	}
	e.wantHits(t, e.cy, "alpha", "c-y/4 alpha from the old version", "c-y/3 alpha")
	for _, conv := range []string{"c-none", "bad id!"} {
		_, err := e.db.RebuildSearch(ctx, conv, nil)
		if want := map[string]parley.Code{"c-none": parley.CodeNotFound, "bad id!": parley.CodeInvalidArgument}[conv]; parley.ErrorCode(err) != want {
			t.Errorf("rebuild %q: %v, want %s", conv, err, want)
		}
	}
}

// Migration 0013 on a database with history marks the conversations that
// have messages pending, and only those; a rebuild then indexes them.
func TestSearchMigrationMarksPending(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "from before"})
	want := e.docs(t)
	// The schema as it was before 0013, with c-x's message already there.
	e.exec(t, `DROP TABLE search_docs, search_pending`)
	e.exec(t, `DROP FUNCTION parley_send_many(TEXT[], TEXT[], TEXT[], TEXT[], BYTEA[], TEXT[], TEXT[], TEXT[])`)
	e.exec(t, `DELETE FROM schema_migrations WHERE version = 13`)
	e.db = e.open(t)
	rows, err := e.raw.Query(ctx, `SELECT conv_id FROM search_pending ORDER BY conv_id`)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(pending, []string{"c-x"}) {
		t.Fatalf("pending after the migration: %q, %v; want [c-x]", pending, err)
	}
	if _, err := e.db.Search(ctx, e.ben, parley.SearchRequest{Query: "before"}); parley.ErrorCode(err) != parley.CodeUnavailable {
		t.Errorf("search before the rebuild: %v, want UNAVAILABLE", err)
	}
	e.wantHits(t, e.cy, "before")
	if _, err := e.db.RebuildSearch(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.docs(t); !slices.Equal(got, want) {
		t.Errorf("rebuilt rows %q, want %q", got, want)
	}
	e.wantHits(t, e.ben, "before", "c-x/3 from before")
}

// The search's GIN statement is served by an index, not by a scan of
// search_docs, once the planner knows the table is large: the GIN index
// for a rare word over many conversations and for a common word (a
// prefix) in one, the primary key for conversations fewer than the
// matches; and the walk newest first reads search_docs_at alone, in its
// order, without a sort.
func TestSearchUsesGINIndex(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	e.exec(t, `INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
		SELECT 'c' || (i % 50), i, i, 'ana', 1700000000000 + i,
			('''w' || (i % 3000) || ''':1 ''common'':2 ''' || chr(57344) || 'c' || encode(convert_to('c' || (i % 50), 'UTF8'), 'hex') || ''':3 ''' || chr(57344) || 'u616e61'':4')::tsvector
		FROM generate_series(1, 30000) AS i`)
	// VACUUM also moves the rows from the GIN index's pending list
	// (fastupdate) into its tree, as autovacuum does; the planner costs a
	// long pending list as a scan of it on every search.
	e.exec(t, `VACUUM ANALYZE search_docs`)
	convs := make([]string, 50)
	for i := range convs {
		convs[i] = fmt.Sprintf("c%d", i)
	}
	for _, tc := range []struct {
		name  string
		q     parley.SearchQuery
		convs []string
		index string
	}{
		{"one word, every conversation", parley.SearchQuery{Terms: []parley.SearchTerm{{Tokens: []string{"w17"}}}, Limit: 20}, convs, "search_docs_tsv"},
		{"a prefix in one conversation", parley.SearchQuery{Terms: []parley.SearchTerm{{Tokens: []string{"w1"}, Prefix: true}}, Limit: 20}, convs[:1], "search_docs_tsv"},
		// Every row matches: the conversations narrow best.
		{"a common word and a sender", parley.SearchQuery{Terms: []parley.SearchTerm{{Tokens: []string{"common"}}}, From: "ana", Limit: 20}, convs[:5], "search_docs_pkey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := e.raw.Query(ctx, "EXPLAIN "+postgres.SearchSQL,
				postgres.TsqueryLiteral(tc.q, tc.convs), tc.convs, "ana", nil, int64(math.MaxInt64), "", 0, 0, tc.q.Limit+1)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, tc.index) || strings.Contains(text, "Seq Scan on search_docs") {
				t.Errorf("plan does not search through %s:\n%s", tc.index, text)
			}
			rows, err = e.raw.Query(ctx, "EXPLAIN "+postgres.SearchWalkSQL,
				postgres.TsqueryLiteral(tc.q, tc.convs), tc.convs, "ana", nil, int64(math.MaxInt64), "", 0, 0, 1000, tc.q.Limit+2)
			if err != nil {
				t.Fatal(err)
			}
			if plan, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				t.Fatal(err)
			}
			text = strings.Join(plan, "\n")
			if !strings.Contains(text, "Index Only Scan Backward using search_docs_at") || strings.Contains(text, "Sort") {
				t.Errorf("the walk is not an index-only walk of search_docs_at:\n%s", text)
			}
		})
	}
}

// The literal builders' output, cast by PostgreSQL itself, holds exactly
// the tokens given, quotes, backslashes, colons, operators, emoji and the
// private-use U+E000 included, at their positions; each token matches as a
// tsquery operand, adjacent ones as a phrase, a token's first bytes as a
// prefix.
func TestSearchLiteralsOnPostgres(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	tokens := []string{"it's", "''", `\`, `\\'`, "a:1", "b:*", "&|!<->()", "😀", "\ue000c632d78", "café", "上海",
		"a b", `"`, "x", strings.Repeat("é", parley.MaxSearchTokenChars), "it's"}
	lit := postgres.TsvectorLiteral(tokens)
	rows, err := e.raw.Query(ctx, `SELECT lexeme, positions FROM unnest($1::text::tsvector)`, lit)
	if err != nil {
		t.Fatalf("cast %s: %v", lit, err)
	}
	got := map[string][]int16{}
	var lex string
	var pos []int16
	if _, err := pgx.ForEachRow(rows, []any{&lex, &pos}, func() error { got[lex] = pos; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int16{}
	for i, tok := range tokens {
		want[tok] = append(want[tok], int16(i+1))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("read back %v\n     want %v", got, want)
	}
	var arr []string
	if err := e.raw.QueryRow(ctx, `SELECT tsvector_to_array($1::text::tsvector)`, lit).Scan(&arr); err != nil {
		t.Fatal(err)
	}
	slices.Sort(arr)
	uniq := slices.Compact(slices.Sorted(slices.Values(tokens)))
	if !slices.Equal(arr, uniq) {
		t.Errorf("tsvector_to_array: %q, want %q", arr, uniq)
	}
	for i, tok := range tokens {
		queries := []parley.SearchTerm{{Tokens: []string{tok}}}
		if i+1 < len(tokens) {
			queries = append(queries, parley.SearchTerm{Tokens: []string{tok, tokens[i+1]}})
		}
		if r := []rune(tok); len(r) > 1 {
			queries = append(queries, parley.SearchTerm{Tokens: []string{string(r[:1])}, Prefix: true})
		}
		for _, term := range queries {
			q := postgres.TsqueryLiteral(parley.SearchQuery{Terms: []parley.SearchTerm{term}}, nil)
			var match bool
			if err := e.raw.QueryRow(ctx, `SELECT $1::text::tsvector @@ $2::text::tsquery`, lit, q).Scan(&match); err != nil || !match {
				t.Errorf("query %s: %v, %v; want a match", q, match, err)
			}
		}
	}
	var match bool
	q := postgres.TsqueryLiteral(parley.SearchQuery{Terms: []parley.SearchTerm{{Tokens: []string{"x", "it's"}}}}, nil)
	if err := e.raw.QueryRow(ctx, `SELECT $1::text::tsvector @@ $2::text::tsquery`, lit, q).Scan(&match); err != nil || match {
		t.Errorf("phrase %s of tokens apart: %v, %v; want no match", q, match, err)
	}
}

// Migration 0015 indexes the rows already there: a store of 0014 with
// messages (and an edit) opens with search_docs_at over all of them, and a
// search finds them by the walk and by the GIN query alike.
func TestSearchMigrationWalkIndex(t *testing.T) {
	e := newSearchEnv(t)
	ctx := context.Background()
	first := e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "kept from before"})
	e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "also from before"})
	if _, err := e.db.Edit(ctx, e.ana, parley.EditRequest{Conv: "c-x", Target: first, CMID: "e", Body: "edited before"}); err != nil {
		t.Fatal(err)
	}
	// The schema as 0014 left it, with the rows already there.
	e.exec(t, `DROP INDEX search_docs_at`)
	e.exec(t, `DELETE FROM schema_migrations WHERE version = 15`)
	e.db = e.open(t)
	if n := e.count(t, `SELECT count(*) FROM pg_indexes WHERE indexname = 'search_docs_at'`); n != 1 {
		t.Fatalf("search_docs_at after the migration: %d indexes", n)
	}
	e.wantHits(t, e.ben, "before", "c-x/4 also from before", "c-x/3 edited before @5")
	e.wantHits(t, e.ben, "kept")
	for _, walk := range []int{0, 1, 2, 1000} {
		got, err := postgres.SearchHits(ctx, e.db, "ben", parley.SearchQuery{Terms: []parley.SearchTerm{{Tokens: []string{"before"}}}, Limit: 20}, []string{"c-x"}, walk)
		if err != nil || !slices.Equal(got, []string{"c-x/4/4", "c-x/3/5"}) {
			t.Errorf("walk %d: %q, %v", walk, got, err)
		}
	}
}
