package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/storetest"
)

// searchEnv is a fresh store with ana and ben in c-ab, and raw access.
func searchEnv(t *testing.T) (*handle, parley.Principal, parley.Principal) {
	t.Helper()
	h := backend{}.New(t, parley.Options{}).(*handle)
	ctx := context.Background()
	for _, id := range []string{"ana", "ben"} {
		if _, err := h.store.CreateUser(ctx, parley.NewUser{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	ana := parley.Principal{User: "ana", Role: parley.RoleUser, DeviceID: "d1", InstallID: "i1"}
	ben := parley.Principal{User: "ben", Role: parley.RoleUser, DeviceID: "d1", InstallID: "i1"}
	if _, err := h.store.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-ab", Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
		t.Fatal(err)
	}
	return h, ana, ben
}

func send(t *testing.T, s parley.Store, p parley.Principal, conv, cmid, body string) int64 {
	t.Helper()
	r, err := s.Send(context.Background(), p, parley.SendRequest{Conv: conv, CMID: cmid, Body: body})
	if err != nil {
		t.Fatalf("send %s: %v", cmid, err)
	}
	return r.Seq
}

// hitSeqs searches and returns the seqs of the hits, which must succeed.
func hitSeqs(t *testing.T, s parley.Store, p parley.Principal, query string) []int64 {
	t.Helper()
	pg, err := s.Search(context.Background(), p, parley.SearchRequest{Query: query, Limit: parley.MaxSearchPage})
	if err != nil {
		t.Fatalf("search %q: %v", query, err)
	}
	out := make([]int64, len(pg.Hits))
	for i, h := range pg.Hits {
		out[i] = h.Event.Seq
	}
	return out
}

// TestSearchBrokenIndex: a search over a missing index table, or an index
// that names a message the log no longer has, fails with an internal error
// (no protocol code: UNAVAILABLE to clients, who retry), never an empty
// page that would read as "no such message".
func TestSearchBrokenIndex(t *testing.T) {
	for _, tc := range []struct{ name, breakIt string }{
		{"fts_dropped", "DROP TABLE search_fts"},
		{"docs_dropped", "DROP TABLE search_docs"},
		{"event_gone", "DELETE FROM events WHERE conv_id = 'c-ab' AND seq = 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ana, _ := searchEnv(t)
			sqlite.SetSearchFlushAt(h.store, 1) // the row in FTS5, not queued
			send(t, h.store, ana, "c-ab", "k3", "hello world")
			if got := hitSeqs(t, h.store, ana, "hello"); len(got) != 1 {
				t.Fatalf("before: hits %v", got)
			}
			h.Exec(t, tc.breakIt)
			pg, err := h.store.Search(context.Background(), ana, parley.SearchRequest{Query: "hello"})
			var pe *parley.Error
			if err == nil || errors.As(err, &pe) || parley.ErrorCode(err) != parley.CodeUnavailable {
				t.Fatalf("search over a broken index: %+v, %v (code %s); want an internal error", pg, err, parley.ErrorCode(err))
			}
			if len(pg.Hits) != 0 || pg.Next != "" {
				t.Errorf("an error with a page: %+v", pg)
			}
			if msg := parley.ErrorMessage(err); msg != parley.InternalMessage {
				t.Errorf("client message %q leaks the cause", msg)
			}
			if tc.name != "event_gone" {
				return
			}
			// A rebuild of the conversation drops the row its log no longer
			// names, and keeps its id from being given again.
			if _, err := h.store.RebuildSearch(context.Background(), "c-ab", nil); err != nil {
				t.Fatal(err)
			}
			if got := hitSeqs(t, h.store, ana, "hello"); len(got) != 0 {
				t.Errorf("after the rebuild: hits %v", got)
			}
			if n := h.Int(t, "SELECT count(*) FROM search_lost"); n != 1 {
				t.Errorf("%d lost ids, want 1", n)
			}
		})
	}
}

// TestSearchPending: a conversation marked not built answers
// ErrSearchBuilding until RebuildSearch; the migration marks every
// conversation that had a message before the index existed.
func TestSearchPending(t *testing.T) {
	h, ana, ben := searchEnv(t)
	ctx := context.Background()
	send(t, h.store, ana, "c-ab", "k3", "before the index")
	if _, err := h.store.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-empty", Kind: parley.KindGroup}); err != nil {
		t.Fatal(err)
	}
	// Undo migrations 0011 and 0013 and reopen: the database is one from
	// before them.
	h.store.Close()
	for _, table := range []string{"search_fts", "search_docs", "search_pending", "search_queue", "search_lost"} {
		h.Exec(t, "DROP TABLE "+table)
	}
	h.Exec(t, "DELETE FROM schema_migrations WHERE version IN (11, 13)")
	db, err := sqlite.Open(ctx, h.file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := h.Text(t, "SELECT group_concat(conv_id) FROM search_pending"); got != "c-ab" {
		t.Fatalf("pending after the migration: %q, want c-ab (c-empty has no message)", got)
	}
	for _, r := range []parley.SearchRequest{{Query: "index"}, {Query: "index", Conv: "c-ab"}, {Query: "from:ana"}} {
		_, err := db.Search(ctx, ben, r)
		var pe *parley.Error
		if !errors.As(err, &pe) || pe.Code != parley.CodeUnavailable || pe.Msg != parley.ErrorMessage(parley.ErrSearchBuilding()) {
			t.Errorf("search %+v of a pending conversation: %v, want ErrSearchBuilding", r, err)
		}
	}
	if got := hitSeqs(t, db, ana, "in:c-empty"); len(got) != 0 {
		t.Errorf("c-empty: %v", got)
	}
	send(t, db, ana, "c-ab", "k4", "after the index")
	res, err := db.RebuildSearch(ctx, "", nil)
	if err != nil || res != (parley.SearchRebuild{Convs: 2, Total: 2, Rows: 2}) {
		t.Fatalf("rebuild: %+v %v", res, err)
	}
	if got := fmt.Sprint(hitSeqs(t, db, ben, "index")); got != "[4 3]" {
		t.Errorf("after the rebuild: %s, want [4 3]", got)
	}
}

// TestSearchSecureDelete: a recall takes the recalled text's tokens (every
// version's) out of the FTS5 index at once, as fts5vocab reads it; the
// tokens of other messages stay. Queued versions (not yet in FTS5) lose
// their terms with their queue row.
func TestSearchSecureDelete(t *testing.T) {
	t.Run("flushed", func(t *testing.T) {
		h, ana, ben := searchEnv(t)
		sqlite.SetSearchFlushAt(h.store, 1)
		testSecureDelete(t, h, ana, ben)
	})
	t.Run("queued", func(t *testing.T) {
		h, ana, ben := searchEnv(t)
		seq := send(t, h.store, ana, "c-ab", "k3", "xylophone quartz 上海")
		send(t, h.store, ben, "c-ab", "k4", "quartz stays")
		if n := h.Int(t, `SELECT count(*) FROM search_queue WHERE instr(terms, 'xylophone') > 0`); n != 1 {
			t.Fatalf("the message is queued %d times, want 1", n)
		}
		if _, err := h.store.Recall(context.Background(), ana, parley.RecallRequest{Conv: "c-ab", Target: seq, CMID: "r5"}); err != nil {
			t.Fatal(err)
		}
		if got := h.Text(t, `SELECT group_concat(terms, '|') FROM search_queue`); strings.Contains(got, "xylophone") || !strings.Contains(got, "stays") {
			t.Errorf("queued terms after the recall: %q", got)
		}
		if got := hitSeqs(t, h.store, ben, "quartz"); fmt.Sprint(got) != "[4]" {
			t.Errorf("quartz after the recall: %v, want [4]", got)
		}
	})
}

func testSecureDelete(t *testing.T, h *handle, ana, ben parley.Principal) {
	t.Helper()
	ctx := context.Background()
	seq := send(t, h.store, ana, "c-ab", "k3", "xylophone quartz 上海")
	send(t, h.store, ben, "c-ab", "k4", "quartz stays")
	if _, err := h.store.Edit(ctx, ana, parley.EditRequest{Conv: "c-ab", Target: seq, CMID: "e5", Body: "zeppelin"}); err != nil {
		t.Fatal(err)
	}
	conn, err := h.raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE VIRTUAL TABLE temp.search_vocab USING fts5vocab(main, search_fts, row)`); err != nil {
		t.Fatal(err)
	}
	docs := func(term string) int64 {
		t.Helper()
		var n sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT doc FROM temp.search_vocab WHERE term = ?`, term).Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return n.Int64
	}
	want := func(when string, counts map[string]int64) {
		t.Helper()
		for term, n := range counts {
			if got := docs(term); got != n {
				t.Errorf("%s: %q in %d index rows, want %d", when, term, got, n)
			}
		}
	}
	want("before the recall", map[string]int64{"xylophone": 1, "zeppelin": 1, "上海": 1, "quartz": 2, "stays": 1})
	for _, term := range []string{"xylophone", "zeppelin", "上海"} {
		if n := h.Int(t, `SELECT count(*) FROM search_fts_data WHERE instr(block, ?) > 0`, []byte(term)); n == 0 {
			t.Fatalf("%q is in no page of the index before the recall", term)
		}
	}
	if _, err := h.store.Recall(ctx, ana, parley.RecallRequest{Conv: "c-ab", Target: seq, CMID: "r6"}); err != nil {
		t.Fatal(err)
	}
	want("after the recall", map[string]int64{"xylophone": 0, "zeppelin": 0, "上海": 0, "海": 0, "quartz": 1, "stays": 1})
	// fts5vocab hides a deleted row either way; the index's own pages show
	// whether the tokens left them (secure-delete) or wait for a merge.
	for _, term := range []string{"xylophone", "zeppelin", "上海"} {
		if n := h.Int(t, `SELECT count(*) FROM search_fts_data WHERE instr(block, ?) > 0`, []byte(term)); n != 0 {
			t.Errorf("%q is still in %d pages of the index", term, n)
		}
	}
	if n := h.Int(t, `SELECT count(*) FROM search_fts_data WHERE instr(block, ?) > 0`, []byte("stays")); n != 1 {
		t.Errorf("the kept text's token in %d pages of the index, want 1", n)
	}
	if n := docs(parley.SenderToken("ana")); n != 0 {
		t.Errorf("ana's sender token in %d index rows; her only message is recalled", n)
	}
	if n := docs(parley.SenderToken("ben")); n != 1 {
		t.Errorf("ben's sender token in %d index rows, want 1", n)
	}
}

// TestSearchRebuildChunks: a rebuild reads and writes a conversation in
// chunks; one much longer than a chunk is indexed whole, edits included.
func TestSearchRebuildChunks(t *testing.T) {
	h, ana, ben := searchEnv(t)
	ctx := context.Background()
	const n = 1234
	first, last := storetest.Fill(t, h, ana, "c-ab", n)
	if _, err := h.store.Edit(ctx, ana, parley.EditRequest{Conv: "c-ab", Target: first + 700, CMID: "e", Body: "fill edited"}); err != nil {
		t.Fatal(err)
	}
	res, err := h.store.RebuildSearch(ctx, "c-ab", nil)
	if err != nil || res.Rows != n+1 {
		t.Fatalf("rebuild: %+v %v, want %d rows", res, err, n+1)
	}
	for _, tc := range []struct {
		query string
		want  []int64
	}{
		{"fill 0", []int64{first}},
		{"fill 499", []int64{first + 499}},
		{"fill 500", []int64{first + 500}},
		{"fill 1233", []int64{last}},
		{"edited", []int64{first + 700}},
		{"fill 700", nil},
	} {
		if got := hitSeqs(t, h.store, ben, tc.query); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("search %q: %v, want %v", tc.query, got, tc.want)
		}
	}
}

// TestSearchPlan asks SQLite's planner how it runs a search: FTS5 first,
// in rowid order (newest first, with no sort: a search stops after a
// page), then each row it found by search_docs' rowid, and a message's
// other versions by the id range of its millisecond, never a scan of the
// docs table (whose size is every version of every message); and how
// unindex finds the rows of messages: by the same id range.
func TestSearchPlan(t *testing.T) {
	file := filepath.Join(t.TempDir(), "parley.db")
	db, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw, err := sql.Open("sqlite", "file:"+file)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, tc := range []struct {
		name, query string
		args        []any
		first       string
		want        []string
	}{
		{"search", sqlite.SearchSQL, []any{`"x"`, 0, int64(math.MaxInt64), "", "", nil, "", 0, "ana"}, "SCAN search_fts VIRTUAL TABLE",
			[]string{"SEARCH d USING INTEGER PRIMARY KEY (rowid=?)", "SEARCH n USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"}},
		{"unindex", sqlite.UnindexSQL, []any{"c", 1, 9, 500}, "SEARCH m USING INDEX events_messages",
			[]string{"SEARCH d USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"}},
	} {
		plan := explain(t, raw, tc.query, tc.args)
		text := strings.Join(plan, "\n")
		if len(plan) == 0 || !strings.HasPrefix(plan[0], tc.first) {
			t.Errorf("%s: the plan does not start with %q:\n%s", tc.name, tc.first, text)
		}
		if tc.name == "search" && strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s: the plan sorts the matches:\n%s", tc.name, text)
		}
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the plan has no %q:\n%s", tc.name, w, text)
			}
		}
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN") && !strings.HasPrefix(line, "SCAN search_fts") {
				t.Errorf("%s: the plan scans a table: %q in\n%s", tc.name, line, text)
			}
		}
	}
}

// explain returns the lines of query's plan.
func explain(t *testing.T, raw *sql.DB, query string, args []any) []string {
	t.Helper()
	rows, err := raw.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestSearchUpgrade: a database whose index was built in the layout of
// migration 0011 (ids given in order of writing) is upgraded by 0013: its
// conversations are marked not built, a search over them answers
// ErrSearchBuilding, and after RebuildSearch every row's id is its
// message's time and a slot, and the hits are those of before.
func TestSearchUpgrade(t *testing.T) {
	h, ana, ben := searchEnv(t)
	ctx := context.Background()
	s3 := send(t, h.store, ana, "c-ab", "k3", "upgrade alpha")
	send(t, h.store, ben, "c-ab", "k4", "upgrade beta 上海")
	if _, err := h.store.Edit(ctx, ana, parley.EditRequest{Conv: "c-ab", Target: s3, CMID: "e5", Body: "upgrade gamma"}); err != nil {
		t.Fatal(err)
	}
	h.store.Close()
	// The index as 0011 wrote it: ids 1, 2, 3 in order of writing.
	for _, table := range []string{"search_fts", "search_docs", "search_queue", "search_lost"} {
		h.Exec(t, "DROP TABLE "+table)
	}
	h.Exec(t, `CREATE TABLE search_docs (id INTEGER PRIMARY KEY AUTOINCREMENT, conv_id TEXT NOT NULL, seq INTEGER NOT NULL,
		vseq INTEGER NOT NULL, sender_user TEXT NOT NULL, at INTEGER NOT NULL, UNIQUE (conv_id, seq, vseq)) STRICT`)
	h.Exec(t, `CREATE VIRTUAL TABLE search_fts USING fts5(terms, content='', tokenize='ascii')`)
	for i, v := range []struct {
		seq, vseq int64
		sender    string
	}{{3, 3, "ana"}, {4, 4, "ben"}, {3, 5, "ana"}} {
		h.Exec(t, `INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at)
			SELECT conv_id, ?, seq, ?, created_at FROM events WHERE conv_id = 'c-ab' AND seq = ?`, v.seq, v.sender, v.vseq)
		body := h.Text(t, `SELECT body FROM events WHERE conv_id = 'c-ab' AND seq = ?`, v.vseq)
		h.Exec(t, `INSERT INTO search_fts (rowid, terms) VALUES (?, ?)`, i+1,
			strings.Join(parley.SearchDocTokens("c-ab", v.sender, body), " "))
	}
	h.Exec(t, "DELETE FROM schema_migrations WHERE version = 13")
	db, err := sqlite.Open(ctx, h.file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := h.Text(t, "SELECT group_concat(conv_id) FROM search_pending"); got != "c-ab" {
		t.Fatalf("pending after the upgrade: %q, want c-ab", got)
	}
	if _, err := db.Search(ctx, ben, parley.SearchRequest{Query: "upgrade"}); parley.ErrorCode(err) != parley.CodeUnavailable {
		t.Fatalf("search before the rebuild: %v, want ErrSearchBuilding", err)
	}
	if res, err := db.RebuildSearch(ctx, "", nil); err != nil || res.Rows != 3 {
		t.Fatalf("rebuild: %+v %v, want 3 rows", res, err)
	}
	if n := h.Int(t, "SELECT count(*) FROM search_docs WHERE id >> 20 <> at OR id < 1 << 20"); n != 0 {
		t.Errorf("%d rows whose id is not their time and a slot", n)
	}
	for q, want := range map[string]string{"upgrade": "[4 3]", "alpha": "[]", "gamma": "[3]", "上海": "[4]", "from:ben": "[4]"} {
		if got := fmt.Sprint(hitSeqs(t, db, ben, q)); got != want {
			t.Errorf("search %q after the upgrade: %s, want %s", q, got, want)
		}
	}
}

// TestSearchTies: many messages of several conversations in one
// millisecond (the index yields them in the order they were written),
// some found in FTS5 and some queued, an edit among them: a walk of small
// pages returns them in the order of results — time, then conversation
// and seq, all descending — each once.
func TestSearchTies(t *testing.T) {
	for _, flushAt := range []int{1, 0} {
		t.Run(fmt.Sprintf("flush_at_%d", flushAt), func(t *testing.T) {
			h, ana, ben := searchEnv(t)
			if flushAt > 0 {
				sqlite.SetSearchFlushAt(h.store, flushAt)
			}
			ctx := context.Background()
			for _, c := range []string{"c-cd", "c-ef"} {
				if _, err := h.store.CreateConversation(ctx, ana, parley.NewConversation{ID: c, Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []string{"c-ab", "c-cd", "c-ef"} {
				storetest.Fill(t, h, ana, c, 40)
			}
			h.Exec(t, "UPDATE events SET created_at = (SELECT min(created_at) FROM events WHERE kind = 'message') WHERE kind = 'message'")
			if _, err := h.store.RebuildSearch(ctx, "", nil); err != nil {
				t.Fatal(err)
			}
			for i, c := range []string{"c-cd", "c-ab", "c-ef", "c-cd"} {
				send(t, h.store, ben, c, fmt.Sprintf("late-%d", i), fmt.Sprintf("fill late %d", i))
			}
			if _, err := h.store.Edit(ctx, ana, parley.EditRequest{Conv: "c-cd", Target: 20, CMID: "e", Body: "fill edited"}); err != nil {
				t.Fatal(err)
			}
			rows, err := h.raw.Query(`SELECT conv_id, seq FROM events WHERE kind = 'message' AND body LIKE 'fill%'
				ORDER BY created_at DESC, conv_id DESC, seq DESC`)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for rows.Next() {
				var c string
				var seq int64
				if err := rows.Scan(&c, &seq); err != nil {
					t.Fatal(err)
				}
				want = append(want, fmt.Sprintf("%s/%d", c, seq))
			}
			rows.Close()
			var got []string
			for r := (parley.SearchRequest{Query: "fill", Limit: 7}); ; {
				pg, err := h.store.Search(ctx, ben, r)
				if err != nil {
					t.Fatal(err)
				}
				for _, hit := range pg.Hits {
					got = append(got, fmt.Sprintf("%s/%d", hit.Event.Conv, hit.Event.Seq))
				}
				if r.Cursor = pg.Next; r.Cursor == "" {
					break
				}
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("walk of %d hits:\n got %v\nwant %v", len(got), got, want)
			}
		})
	}
}
