package main

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// searchFixture creates ana and ben, their groups g1 and g2 with a few
// messages each (English and Chinese), and returns the store.
func searchFixture(t *testing.T, b backend) parley.Store {
	t.Helper()
	ctx := context.Background()
	s := b.store(t)
	seed(t, s)
	if _, err := s.CreateConversation(ctx, parley.Principal{User: "ben"}, parley.NewConversation{ID: "g2", Kind: parley.KindGroup, Title: "g2", Members: []string{"ana", "ben"}}); err != nil {
		t.Fatal(err)
	}
	for i, m := range []struct{ conv, user, body string }{
		{"g1", "ana", "the quarterly report is ready"},
		{"g1", "ben", "上海的会议改到明天下午"},
		{"g1", "ana", "thanks 👍"},
		{"g2", "ben", "the report for g2 is late"},
		{"g2", "ana", "明天见"},
	} {
		if _, err := s.Send(ctx, parley.Principal{User: m.user, DeviceID: "d"}, parley.SendRequest{Conv: m.conv, CMID: "m" + string(rune('a'+i)), Body: m.body}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// unbuildSearch leaves the index as an upgrade does: no rows, and every
// conversation with a message marked not built.
func unbuildSearch(t *testing.T, b backend) {
	t.Helper()
	ctx := context.Background()
	mark := `INSERT INTO search_pending (conv_id) SELECT DISTINCT conv_id FROM events WHERE kind = 'message'`
	if b.name == "sqlite" {
		raw, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(b.db, "sqlite:")+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		// The whole index, as an upgrade that must rebuild it leaves it:
		// FTS5's rows, the terms queued for it, and the rows of versions.
		for _, q := range []string{`INSERT INTO search_fts (search_fts) VALUES ('delete-all')`, `DELETE FROM search_queue`, `DELETE FROM search_docs`, mark} {
			if _, err := raw.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		return
	}
	u, err := url.Parse(b.db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_max_conns") // the store's pool setting, not PostgreSQL's
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`DELETE FROM search_queue`, `DELETE FROM search_docs`, mark} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// searchBodies returns the bodies user finds for q, newest first.
func searchBodies(t *testing.T, s parley.Store, user, q string) ([]string, error) {
	t.Helper()
	page, err := s.Search(context.Background(), parley.Principal{User: user}, parley.SearchRequest{Query: q})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range page.Hits {
		out = append(out, h.Event.Body)
	}
	return out, err
}

// TestSearchRebuild: `parley search rebuild --conv ID` and `parley search
// rebuild` build what an upgrade left unbuilt, each audited as
// search.rebuild (pending, then ok) with the operator "cli:" + the OS
// user, with progress lines on stderr; a search answers UNAVAILABLE while
// a conversation it covers is not built, and finds the messages after. A bad id is a usage error and audits
// nothing; an unknown conversation is NOT_FOUND, audited, exit status 1.
// Both stores.
func TestSearchRebuild(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := searchFixture(t, b)
		unbuildSearch(t, b)
		if _, err := searchBodies(t, s, "ben", "report"); parley.ErrorCode(err) != parley.CodeUnavailable {
			t.Fatalf("search over conversations not built: %v, want UNAVAILABLE", err)
		}
		env := map[string]string{"PARLEY_DB": b.db, "PARLEY_DATA_DIR": b.dir, "SUDO_USER": "alice"}
		cli := func(args ...string) (stdout, stderr string, err error) {
			var out, errOut strings.Builder
			getenv := func(k string) string {
				if k == "PARLEY_SECRET_KEY_FILE" {
					return testKeyFile()
				}
				return env[k]
			}
			err = run(ctx, append([]string{"parley"}, args...), getenv, strings.NewReader(""), &out, &errOut)
			return out.String(), errOut.String(), err
		}
		progress := regexp.MustCompile(`(?m)^search rebuild: (\d+)/(\d+) conversations, (\d+) rows$`)

		out, errOut, err := cli("search", "rebuild", "--conv", "g1")
		if err != nil {
			t.Fatalf("search rebuild --conv g1: %v\n%s", err, errOut)
		}
		if m := progress.FindAllStringSubmatch(errOut, -1); len(m) == 0 || m[len(m)-1][1] != "1" || m[len(m)-1][2] != "1" || m[len(m)-1][3] != "3" {
			t.Errorf("stderr %q: want a last progress line of 1/1 conversations, 3 rows", errOut)
		}
		if !strings.HasPrefix(out, "rebuilt the search index of 1 conversations (3 rows)") {
			t.Errorf("stdout %q", out)
		}
		if got, err := searchBodies(t, s, "ben", "report in:g1"); err != nil || !slices.Equal(got, []string{"the quarterly report is ready"}) {
			t.Errorf("search report in:g1 after its rebuild: %q, %v", got, err)
		}
		if got, err := searchBodies(t, s, "ana", "会议 in:g1"); err != nil || !slices.Equal(got, []string{"上海的会议改到明天下午"}) {
			t.Errorf("search 会议 in:g1 after its rebuild: %q, %v", got, err)
		}
		if _, err := searchBodies(t, s, "ben", "report"); parley.ErrorCode(err) != parley.CodeUnavailable {
			t.Errorf("search over g1 and g2, g2 not built: %v, want UNAVAILABLE", err)
		}

		out, errOut, err = cli("search", "rebuild")
		if err != nil {
			t.Fatalf("search rebuild: %v\n%s", err, errOut)
		}
		m := progress.FindAllStringSubmatch(errOut, -1)
		if len(m) == 0 || m[len(m)-1][1] != m[len(m)-1][2] || m[len(m)-1][3] != "5" {
			t.Errorf("stderr %q: want a last progress line of every conversation, 5 rows", errOut)
		}
		if !strings.Contains(out, "(5 rows)") {
			t.Errorf("stdout %q", out)
		}
		got, err := searchBodies(t, s, "ben", "report")
		if want := []string{"the report for g2 is late", "the quarterly report is ready"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("search report after rebuilding all: %q, %v; want %q", got, err, want)
		}
		if got, err := searchBodies(t, s, "ana", "明天"); err != nil || !slices.Equal(got, []string{"明天见", "上海的会议改到明天下午"}) {
			t.Errorf("search 明天 after rebuilding all: %q, %v; want both messages", got, err)
		}

		// Refusals: a malformed id changes and audits nothing; an unknown
		// one is the store's NOT_FOUND, audited.
		for _, args := range [][]string{{"search"}, {"search", "frob"}, {"search", "rebuild", "extra"}, {"search", "rebuild", "--conv", "no such id"}} {
			var ue usageError
			if _, _, err := cli(args...); !errors.As(err, &ue) {
				t.Errorf("parley %q: %v, want a usage error", args, err)
			}
		}
		if _, _, err := cli("search", "rebuild", "--conv", "ghost"); parley.ErrorCode(err) != parley.CodeNotFound {
			t.Errorf("search rebuild --conv ghost: %v, want NOT_FOUND", err)
		}

		entries, err := s.Audit(ctx, parley.AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		op := cliOperator(os.Getenv)
		type entry struct{ Operator, Action, Target, Outcome string }
		var gotAudit []entry
		for _, e := range slices.Backward(entries) { // oldest first
			gotAudit = append(gotAudit, entry{e.Operator, e.Action, e.Target, e.Outcome})
			if !strings.Contains(e.Params, `"sudo_user":"alice"`) {
				t.Errorf("entry %d params %s: no sudo_user", e.ID, e.Params)
			}
		}
		want := []entry{
			{op, "search.rebuild", "g1", "ok"},
			{op, "search.rebuild", "", "ok"},
			{op, "search.rebuild", "ghost", "NOT_FOUND"},
		}
		if !slices.Equal(gotAudit, want) {
			t.Errorf("audit log %+v, want %+v", gotAudit, want)
		}
	})
}

// TestServeBuildsPendingSearch: `parley serve` on a store an upgrade left
// with conversations not built serves at once and builds them in the
// background, logging its start and its end; then search finds their
// messages. Both stores.
func TestServeBuildsPendingSearch(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := searchFixture(t, b)
		unbuildSearch(t, b)
		p := serve(t, b.db, b.dir)
		p.waitLog("search index: built", 30*time.Second)
		log := p.stderr()
		if !strings.Contains(log, "search index: building the conversations not built yet") || !regexp.MustCompile(`search index: built"? convs=2 rows=5 `).MatchString(log) {
			t.Errorf("server log:\n%s\nwant the build's start and its end with convs=2 rows=5", log)
		}
		got, err := searchBodies(t, s, "ben", "report")
		if want := []string{"the report for g2 is late", "the quarterly report is ready"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("search report after serve's build: %q, %v; want %q", got, err, want)
		}
		// Nothing left to build: the next start says nothing about it.
		p.kill()
		p = serve(t, b.db, b.dir)
		time.Sleep(500 * time.Millisecond)
		if strings.Contains(p.stderr(), "search index:") {
			t.Errorf("a start with nothing to build logged:\n%s", p.stderr())
		}
	})
}

// TestRebuildProgress: progress lines come at most once per interval, the
// last report of a conversation count always, and flush prints a report
// held back, once.
func TestRebuildProgress(t *testing.T) {
	now := time.Unix(0, 0)
	var printed []parley.SearchRebuild
	p := &rebuildProgress{every: time.Second, now: func() time.Time { return now }, print: func(r parley.SearchRebuild) { printed = append(printed, r) }}
	steps := []struct {
		after time.Duration
		r     parley.SearchRebuild
	}{
		{time.Second, parley.SearchRebuild{Convs: 1, Total: 5, Rows: 10}},            // printed: a second since the start
		{100 * time.Millisecond, parley.SearchRebuild{Convs: 2, Total: 5, Rows: 20}}, // held
		{100 * time.Millisecond, parley.SearchRebuild{Convs: 3, Total: 5, Rows: 30}}, // held
		{time.Second, parley.SearchRebuild{Convs: 4, Total: 5, Rows: 40}},            // printed
		{time.Millisecond, parley.SearchRebuild{Convs: 5, Total: 5, Rows: 50}},       // printed: the last
	}
	for _, s := range steps {
		now = now.Add(s.after)
		p.report(s.r)
	}
	p.flush()
	want := []parley.SearchRebuild{steps[0].r, steps[3].r, steps[4].r}
	if !slices.Equal(printed, want) {
		t.Errorf("printed %+v, want %+v", printed, want)
	}
	p.report(parley.SearchRebuild{Convs: 1, Total: 2, Rows: 1}) // within the second: held
	p.flush()
	p.flush()
	if len(printed) != 4 || printed[3].Convs != 1 {
		t.Errorf("after a held report and two flushes: %+v", printed)
	}
}
