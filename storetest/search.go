package storetest

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of full-text search (search.go in the root package): one fixture
// corpus with a table of queries and the hits each caller must get (the
// same table on every store, so both give identical hits), then the
// derived-state rules: edits, recalls, former members, purge and rollback
// change what matches in the transaction that changes what is read; a page
// is filtered before its limit; paging neither repeats nor skips; a
// conversation whose index is not built answers UNAVAILABLE until
// RebuildSearch, and a rebuild gives what the incremental index gave.

// searchPage runs one search that must succeed and checks the page's size.
func (e *env) searchPage(t *testing.T, p parley.Principal, r parley.SearchRequest) parley.SearchPage {
	t.Helper()
	pg, err := e.st.Search(ctx(t), p, r)
	ok(t, err, fmt.Sprintf("search %q (conv %q, from %q) by %s", r.Query, r.Conv, r.From, p.User))
	limit := r.Limit
	if limit == 0 {
		limit = parley.DefaultSearchPage
	}
	limit = min(limit, parley.MaxSearchPage)
	if len(pg.Hits) > limit {
		t.Fatalf("search %q by %s: %d hits for limit %d", r.Query, p.User, len(pg.Hits), limit)
	}
	if pg.Next != "" && len(pg.Hits) != limit {
		t.Errorf("search %q by %s: a page of %d (limit %d) with a next: the filter ran after the limit", r.Query, p.User, len(pg.Hits), limit)
	}
	if pg.Next != "" && len(pg.Hits) > 0 {
		if want := parley.CursorOf(pg.Hits[len(pg.Hits)-1].Event).String(); pg.Next != want {
			t.Errorf("search %q by %s: next %q, want the cursor of the last hit %q", r.Query, p.User, pg.Next, want)
		}
	}
	return pg
}

// searchAll walks every page of a search with r's limit: each page but the
// last full, each hit strictly after the one before it in the order of
// results.
func (e *env) searchAll(t *testing.T, p parley.Principal, r parley.SearchRequest) []parley.SearchHit {
	t.Helper()
	var all []parley.SearchHit
	for range 10000 {
		pg := e.searchPage(t, p, r)
		all = append(all, pg.Hits...)
		if pg.Next == "" {
			wantOrdered(t, fmt.Sprintf("search %q by %s", r.Query, p.User), all)
			return all
		}
		if pg.Next == r.Cursor {
			t.Fatalf("search %q by %s: next without progress", r.Query, p.User)
		}
		r.Cursor = pg.Next
	}
	t.Fatalf("search %q by %s: no end after 10000 pages", r.Query, p.User)
	return nil
}

// wantOrdered checks that hits are in the order of results, no hit twice.
func wantOrdered(t *testing.T, what string, hits []parley.SearchHit) {
	t.Helper()
	for i := 1; i < len(hits); i++ {
		a, b := parley.CursorOf(hits[i-1].Event), parley.CursorOf(hits[i].Event)
		if !b.Before(a) {
			t.Errorf("%s: hit %d %+v does not come after hit %d %+v", what, i, b, i-1, a)
		}
	}
}

// marked renders a body with its highlights in brackets: "我明天去[上海]出差".
func marked(body string, hs []parley.Highlight) string {
	rs := []rune(body)
	var b strings.Builder
	at := 0
	for _, h := range hs {
		if h.Start < at || h.End <= h.Start || h.End > len(rs) {
			return fmt.Sprintf("%q with bad highlights %v", body, hs)
		}
		b.WriteString(string(rs[at:h.Start]) + "[" + string(rs[h.Start:h.End]) + "]")
		at = h.End
	}
	b.WriteString(string(rs[at:]))
	return b.String()
}

// hitLines renders hits as "seq marked-body" (conv/seq when the hits span
// conversations).
func hitLines(hits []parley.SearchHit, withConv bool) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		ref := fmt.Sprint(h.Event.Seq)
		if withConv {
			ref = h.Event.Conv + "/" + ref
		}
		out[i] = ref + " " + marked(h.Event.Body, h.Highlights)
	}
	return out
}

// wantHits walks a search in one conversation and compares its hits, in
// order, with want ("seq marked-body", newest first).
func (e *env) wantHits(t *testing.T, p parley.Principal, r parley.SearchRequest, want ...string) []parley.SearchHit {
	t.Helper()
	hits := e.searchAll(t, p, r)
	if got := hitLines(hits, false); !slices.Equal(got, want) {
		t.Errorf("search %q (conv %q) by %s:\ngot  %q\nwant %q", r.Query, r.Conv, p.User, got, want)
	}
	e.wantAsRead(t, p, hits)
	return hits
}

// wantAsRead checks that every hit is the message as p reads it (Fetch):
// same body, derived state and time.
func (e *env) wantAsRead(t *testing.T, p parley.Principal, hits []parley.SearchHit) {
	t.Helper()
	for _, h := range hits {
		ev := h.Event
		if ev.Kind != parley.EventMessage || ev.Recalled || ev.Derived == nil {
			t.Errorf("hit %s derived %s: want a message not recalled with derived state", describe(ev), describeDerived(ev.Derived))
			continue
		}
		f := e.fetch(t, p, ev.Conv, ev.Seq)
		if describe(ev) != describe(f) || describeDerived(ev.Derived) != describeDerived(f.Derived) || !ev.At.Equal(f.At) || ev.MID != f.MID {
			t.Errorf("hit %s/%s (%s, at %v) is not the message as %s reads it: %s/%s (%s, at %v)",
				ev.Conv, describe(ev), describeDerived(ev.Derived), ev.At, p.User, f.Conv, describe(f), describeDerived(f.Derived), f.At)
		}
	}
}

// searchRows is what a store's index holds for a conversation, as far as
// the shared column names let the suite see it.
type searchRows struct {
	Rows, Seqs, VSeqs, Ats, Pending int64
}

func (e *env) searchRows(t *testing.T, conv string) searchRows {
	t.Helper()
	q := func(query string) int64 { t.Helper(); return e.db.Int(t, query, conv) }
	return searchRows{
		Rows:    q("SELECT count(*) FROM search_docs WHERE conv_id = ?"),
		Seqs:    q("SELECT CAST(sum(seq) AS BIGINT) FROM search_docs WHERE conv_id = ?"),
		VSeqs:   q("SELECT CAST(sum(vseq) AS BIGINT) FROM search_docs WHERE conv_id = ?"),
		Ats:     q("SELECT CAST(sum(at) AS BIGINT) FROM search_docs WHERE conv_id = ?"),
		Pending: q("SELECT count(*) FROM search_pending WHERE conv_id = ?"),
	}
}

// versionRows counts the index rows of one message.
func (e *env) versionRows(t *testing.T, conv string, seq int64) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM search_docs WHERE conv_id = ? AND seq = ?", conv, seq)
}

// searchWorld is the fixture corpus: three conversations of English,
// Chinese, Japanese, mixed text, emoji and punctuation, with an edit and a
// recall, read by members of different conversations.
type searchWorld struct {
	users map[string]parley.Principal
	refs  map[string]msgRef // label -> message
	split time.Time         // the time of m1: the first message of c-mix
}

type msgRef struct {
	conv string
	seq  int64
}

func (e *env) searchWorld(t *testing.T) *searchWorld {
	t.Helper()
	ps := e.users(t, "ana", "ben", "cy", "dan")
	w := &searchWorld{users: map[string]parley.Principal{}, refs: map[string]msgRef{}}
	for _, p := range ps {
		w.users[p.User] = p
	}
	ana, ben, cy := ps[0], ps[1], ps[2]
	e.group(t, ana, "c-en", "ben")       // 1, 2
	e.group(t, ana, "c-zh", "ben", "cy") // 1..3
	e.group(t, ana, "c-mix", "cy")       // 1, 2
	msgs := []struct {
		label string
		p     parley.Principal
		conv  string
		body  string
	}{
		{"e1", ana, "c-en", "The quick brown fox jumps over the lazy dog"},
		{"e2", ben, "c-en", "Deploy the release candidate tonight, please!"},
		{"e3", ana, "c-en", "Release notes: deploying v2.3 to production"},
		{"e4", ben, "c-en", "quick question about the deployment"},
		{"e5", ana, "c-en", "Café au lait at 10:30?"},
		{"e6", ben, "c-en", "don't panic — it's fine"},
		{"e7", ana, "c-en", "xylophone practice"},
		{"z1", ana, "c-zh", "我明天去上海出差"},
		{"z2", ben, "c-zh", "上海的天气怎么样？"},
		{"z3", cy, "c-zh", "海上生明月"},
		{"z4", ana, "c-zh", "明天见"},
		{"z5", ben, "c-zh", "東京タワーに行きたい"},
		{"m1", ana, "c-mix", "Meeting at 3pm 在上海office开会 🎉"},
		{"m2", cy, "c-mix", "🎉🎉 party time 🍕"},
		{"m3", ana, "c-mix", "用Go写server很快"},
		{"m4", cy, "c-mix", "the fox says 你好"},
	}
	for _, m := range msgs {
		if m.label == "m1" {
			time.Sleep(3 * time.Millisecond) // the Before cases split here
		}
		s := e.send(t, m.p, m.conv, "k-"+m.label, m.body)
		w.refs[m.label] = msgRef{m.conv, s.Seq}
	}
	e.edit(t, ben, "c-en", w.refs["e4"].seq, "k-e4-edit", "quick question about deployment timing")
	e.recall(t, ana, "c-en", w.refs["e7"].seq, "k-e7-recall")
	z5, m1 := e.fetch(t, ana, "c-zh", w.refs["z5"].seq), e.fetch(t, ana, "c-mix", w.refs["m1"].seq)
	if z5.At.UnixMilli() >= m1.At.UnixMilli() {
		t.Fatalf("z5 at %v is not a millisecond before m1 at %v", z5.At, m1.At)
	}
	w.split = time.UnixMilli(m1.At.UnixMilli())
	return w
}

// searchCase is one query of the corpus table and its hits in any order
// ("label marked-body"); the check orders them by the messages' times.
type searchCase struct {
	who    string
	query  string
	conv   string
	from   string
	before int // 0: none; 1: m1's time (m1 excluded); 2: just after it
	want   []string
}

// searchTable is the corpus table: the same queries and hits on every
// store.
var searchTable = []searchCase{
	// Chinese: any substring of two or more characters, one character as a
	// prefix; 海上 is not 上海.
	{who: "ana", query: "上海", want: []string{"z1 我明天去[上海]出差", "z2 [上海]的天气怎么样？", "m1 Meeting at 3pm 在[上海]office开会 🎉"}},
	{who: "ana", query: "海上", want: []string{"z3 [海上]生明月"}},
	{who: "ana", query: "上", want: []string{"z1 我明天去[上海]出差", "z2 [上海]的天气怎么样？", "z3 海[上生]明月", "m1 Meeting at 3pm 在[上海]office开会 🎉"}},
	{who: "ana", query: "明天", want: []string{"z1 我[明天]去上海出差", "z4 [明天]见"}},
	{who: "ana", query: "天气", want: []string{"z2 上海的[天气]怎么样？"}},
	{who: "ana", query: "上海出差", want: []string{"z1 我明天去[上海出差]"}},
	{who: "ana", query: "出差上海"},
	{who: "ana", query: "东京"},
	{who: "ana", query: "東京", want: []string{"z5 [東京]タワーに行きたい"}},
	{who: "ana", query: "タワー", want: []string{"z5 東京[タワー]に行きたい"}},
	{who: "ana", query: "你好", want: []string{"m4 the fox says [你好]"}},
	// Mixed Chinese and English.
	{who: "ana", query: "上海 office", want: []string{"m1 Meeting at 3pm 在[上海office]开会 🎉"}},
	{who: "ana", query: `"上海office"`, want: []string{"m1 Meeting at 3pm 在[上海office]开会 🎉"}},
	{who: "ana", query: "写server", want: []string{"m3 用Go[写server]很快"}},
	{who: "ana", query: "go", want: []string{"m3 用[Go]写server很快"}},
	{who: "ana", query: "很快", want: []string{"m3 用Go写server[很快]"}},
	{who: "ana", query: "3pm", want: []string{"m1 Meeting at [3pm] 在上海office开会 🎉"}},
	// Emoji.
	{who: "ana", query: "🎉", want: []string{"m1 Meeting at 3pm 在上海office开会 [🎉]", "m2 [🎉🎉] party time 🍕"}},
	{who: "ana", query: "🍕 party", want: []string{"m2 🎉🎉 [party] time [🍕]"}},
	{who: "ben", query: "🎉"},
	// English words: case folded, accents kept, punctuation separates.
	{who: "ana", query: "QUICK", want: []string{"e1 The [quick] brown fox jumps over the lazy dog", "e4 [quick] question about deployment timing"}},
	{who: "ana", query: "café", want: []string{"e5 [Café] au lait at 10:30?"}},
	{who: "ana", query: "cafe"},
	{who: "ana", query: "10", want: []string{"e5 Café au lait at [10]:30?"}},
	{who: "ana", query: "don't", want: []string{"e6 [don't] panic — it's fine"}},
	{who: "ana", query: "zzz"},
	{who: "ana", query: "fox", want: []string{"e1 The quick brown [fox] jumps over the lazy dog", "m4 the [fox] says 你好"}},
	// Prefixes.
	{who: "ana", query: "deploy", want: []string{"e2 [Deploy] the release candidate tonight, please!"}},
	{who: "ana", query: "deploy*", want: []string{
		"e2 [Deploy] the release candidate tonight, please!",
		"e3 Release notes: [deploying] v2.3 to production",
		"e4 quick question about [deployment] timing",
	}},
	{who: "ana", query: "lazy* dog", want: []string{"e1 The quick brown fox jumps over the [lazy] [dog]"}},
	{who: "ana", query: "xylo*"},
	// Phrases.
	{who: "ana", query: `"release candidate"`, want: []string{"e2 Deploy the [release candidate] tonight, please!"}},
	{who: "ana", query: `"candidate release"`},
	{who: "ana", query: "release", want: []string{"e2 Deploy the [release] candidate tonight, please!", "e3 [Release] notes: deploying v2.3 to production"}},
	{who: "ana", query: `"brown fox"`, want: []string{"e1 The quick [brown fox] jumps over the lazy dog"}},
	{who: "ana", query: `"brown fo"*`, want: []string{"e1 The quick [brown fox] jumps over the lazy dog"}},
	{who: "ana", query: `"quick brown" fox`, want: []string{"e1 The [quick brown] [fox] jumps over the lazy dog"}},
	{who: "ana", query: `"the fox"`, want: []string{"m4 [the fox] says 你好"}},
	// The edit and the recall of the corpus.
	{who: "ana", query: `"the deployment"`},
	{who: "ben", query: `"the deployment"`},
	{who: "ben", query: "timing", want: []string{"e4 quick question about deployment [timing]"}},
	{who: "ana", query: "xylophone"},
	{who: "ana", query: "practice"},
	// from:, in:, before.
	{who: "ana", query: "from:ben deploy*", want: []string{"e2 [Deploy] the release candidate tonight, please!", "e4 quick question about [deployment] timing"}},
	{who: "ana", query: "🎉", from: "cy", want: []string{"m2 [🎉🎉] party time 🍕"}},
	{who: "ana", query: "from:cy", want: []string{"z3 海上生明月", "m2 🎉🎉 party time 🍕", "m4 the fox says 你好"}},
	{who: "ana", query: "from:nobody fox"},
	{who: "ana", query: "in:c-zh", want: []string{"z1 我明天去上海出差", "z2 上海的天气怎么样？", "z3 海上生明月", "z4 明天见", "z5 東京タワーに行きたい"}},
	{who: "ana", query: "in:c-zh 上海", want: []string{"z1 我明天去[上海]出差", "z2 [上海]的天气怎么样？"}},
	{who: "ana", query: "上海", conv: "c-mix", want: []string{"m1 Meeting at 3pm 在[上海]office开会 🎉"}},
	{who: "ana", query: "in:c-mix from:ana", want: []string{"m1 Meeting at 3pm 在上海office开会 🎉", "m3 用Go写server很快"}},
	{who: "ana", query: "上海", before: 1, want: []string{"z1 我明天去[上海]出差", "z2 [上海]的天气怎么样？"}},
	{who: "ana", query: "上海", before: 2, want: []string{"z1 我明天去[上海]出差", "z2 [上海]的天气怎么样？", "m1 Meeting at 3pm 在[上海]office开会 🎉"}},
	// Other callers see their own conversations only.
	{who: "ben", query: "上海", want: []string{"z1 我明天去[上海]出差", "z2 [上海]的天气怎么样？"}},
	{who: "ben", query: "fox", want: []string{"e1 The quick brown [fox] jumps over the lazy dog"}},
	{who: "ben", query: "from:cy", want: []string{"z3 海上生明月"}},
	{who: "cy", query: "fox", want: []string{"m4 the [fox] says 你好"}},
	{who: "cy", query: "quick"},
	{who: "dan", query: "fox"},
}

// run checks every case of the table against the store.
func (w *searchWorld) run(t *testing.T, e *env) {
	t.Helper()
	times := map[string]parley.SearchCursor{}
	labels := map[msgRef]string{}
	for label, ref := range w.refs {
		labels[ref] = label
		times[label] = parley.CursorOf(e.fetch(t, w.users["ana"], ref.conv, ref.seq))
	}
	for _, tc := range searchTable {
		name := tc.who + "_" + tc.query
		if tc.conv != "" || tc.from != "" || tc.before != 0 {
			name += fmt.Sprintf("_conv%s_from%s_before%d", tc.conv, tc.from, tc.before)
		}
		t.Run(name, func(t *testing.T) {
			r := parley.SearchRequest{Query: tc.query, Conv: tc.conv, From: tc.from, Limit: 3}
			switch tc.before {
			case 1:
				r.Before = w.split
			case 2:
				r.Before = w.split.Add(time.Millisecond)
			}
			p := w.users[tc.who]
			hits := e.searchAll(t, p, r)
			got := make([]string, len(hits))
			for i, h := range hits {
				got[i] = labels[msgRef{h.Event.Conv, h.Event.Seq}] + " " + marked(h.Event.Body, h.Highlights)
			}
			want := slices.Clone(tc.want)
			slices.SortFunc(want, func(a, b string) int {
				ca, cb := times[strings.Fields(a)[0]], times[strings.Fields(b)[0]]
				switch {
				case cb.Before(ca):
					return -1
				case ca.Before(cb):
					return 1
				}
				return 0
			})
			if !slices.Equal(got, want) {
				t.Errorf("search %q by %s:\ngot  %q\nwant %q", tc.query, tc.who, got, want)
			}
			e.wantAsRead(t, p, hits)
		})
	}
}

// testSearchCorpus: the fixture corpus and its table of queries; then
// RebuildSearch of every conversation gives the same rows and the same
// hits, and so does a rebuild of one.
func testSearchCorpus(t *testing.T, e *env) {
	w := e.searchWorld(t)
	convs := []string{"c-en", "c-zh", "c-mix"}
	before := map[string]searchRows{}
	for _, c := range convs {
		before[c] = e.searchRows(t, c)
	}
	if r := before["c-en"]; r.Rows != 7 || r.Pending != 0 {
		t.Errorf("c-en index: %+v, want 7 rows (six messages, one of them edited; the recalled one none), not pending", r)
	}
	if r := before["c-zh"]; r.Rows != 5 {
		t.Errorf("c-zh index: %+v, want 5 rows", r)
	}
	t.Run("incremental", func(t *testing.T) { w.run(t, e) })

	var calls []parley.SearchRebuild
	res, err := e.st.RebuildSearch(ctx(t), "", func(r parley.SearchRebuild) { calls = append(calls, r) })
	ok(t, err, "rebuild")
	total := e.db.Int(t, "SELECT count(*) FROM conversations")
	rows := e.db.Int(t, "SELECT count(*) FROM search_docs")
	if res.Convs != int(total) || res.Total != int(total) || res.Rows != rows || rows != 16 {
		t.Errorf("rebuild: %+v, want %d of %d conversations and %d rows (16)", res, total, total, rows)
	}
	if len(calls) != int(total) || len(calls) > 0 && calls[len(calls)-1] != res {
		t.Errorf("rebuild progress: %+v, want %d calls ending in %+v", calls, total, res)
	}
	for i, c := range calls {
		if c.Convs != i+1 || c.Total != int(total) || i > 0 && c.Rows < calls[i-1].Rows {
			t.Errorf("rebuild progress call %d: %+v", i, c)
		}
	}
	for _, c := range convs {
		if got := e.searchRows(t, c); got != before[c] {
			t.Errorf("%s index after the rebuild %+v, incremental %+v", c, got, before[c])
		}
	}
	t.Run("rebuilt", func(t *testing.T) { w.run(t, e) })

	res, err = e.st.RebuildSearch(ctx(t), "c-zh", nil)
	ok(t, err, "rebuild c-zh")
	if want := (parley.SearchRebuild{Convs: 1, Total: 1, Rows: 5}); res != want {
		t.Errorf("rebuild c-zh: %+v, want %+v", res, want)
	}
	if got := e.searchRows(t, "c-zh"); got != before["c-zh"] {
		t.Errorf("c-zh index after its rebuild %+v, incremental %+v", got, before["c-zh"])
	}
	t.Run("rebuilt_one", func(t *testing.T) { w.run(t, e) })
}

// testSearchRejections: malformed requests are INVALID_ARGUMENT before the
// conversation is looked at; a conversation without a period of the
// caller (or none at all) is NOT_MEMBER, whether named by the request or
// by in:; neither changes anything. A caller in no conversation finds
// nothing.
func testSearchRejections(t *testing.T, e *env) {
	w := e.searchWorld(t)
	ana, ben, dan := w.users["ana"], w.users["ben"], w.users["dan"]
	terms17 := strings.TrimSpace(strings.Repeat("word ", 17))
	cases := []struct {
		name string
		p    parley.Principal
		r    parley.SearchRequest
		want parley.Code
	}{
		{"empty", ana, parley.SearchRequest{Query: ""}, parley.CodeInvalidArgument},
		{"blank", ana, parley.SearchRequest{Query: " \t\n "}, parley.CodeInvalidArgument},
		{"1000_chars", ana, parley.SearchRequest{Query: strings.Repeat("fox ", 250)}, parley.CodeInvalidArgument},
		{"1000_chars_one_word", ana, parley.SearchRequest{Query: strings.Repeat("x", 1000)}, parley.CodeInvalidArgument},
		{"257_chars", ana, parley.SearchRequest{Query: strings.Repeat("上", 257)}, parley.CodeInvalidArgument},
		{"unbalanced_quote", ana, parley.SearchRequest{Query: `"quick brown`}, parley.CodeInvalidArgument},
		{"unbalanced_quote_after_phrase", ana, parley.SearchRequest{Query: `"quick" "brown`}, parley.CodeInvalidArgument},
		{"invalid_utf8", ana, parley.SearchRequest{Query: "quick \xff"}, parley.CodeInvalidArgument},
		{"invalid_utf8_cjk", ana, parley.SearchRequest{Query: "上\xe6\xb5"}, parley.CodeInvalidArgument},
		{"one_letter_prefix", ana, parley.SearchRequest{Query: "q*"}, parley.CodeInvalidArgument},
		{"punctuation_only", ana, parley.SearchRequest{Query: "!!! ... ？"}, parley.CodeInvalidArgument},
		{"17_terms", ana, parley.SearchRequest{Query: terms17}, parley.CodeInvalidArgument},
		{"bad_from", ana, parley.SearchRequest{Query: "from:a/b fox"}, parley.CodeInvalidArgument},
		{"bad_in", ana, parley.SearchRequest{Query: "in:c/en fox"}, parley.CodeInvalidArgument},
		{"two_in", ana, parley.SearchRequest{Query: "in:c-en in:c-zh fox"}, parley.CodeInvalidArgument},
		{"two_from", ana, parley.SearchRequest{Query: "from:ana from:ben fox"}, parley.CodeInvalidArgument},
		{"from_conflicts_request", ana, parley.SearchRequest{Query: "from:ana fox", From: "ben"}, parley.CodeInvalidArgument},
		{"in_conflicts_request", ana, parley.SearchRequest{Query: "in:c-en fox", Conv: "c-zh"}, parley.CodeInvalidArgument},
		{"request_from_malformed", ana, parley.SearchRequest{Query: "fox", From: "a b"}, parley.CodeInvalidArgument},
		{"request_conv_malformed", ana, parley.SearchRequest{Query: "fox", Conv: "c en"}, parley.CodeInvalidArgument},
		{"negative_limit", ana, parley.SearchRequest{Query: "fox", Limit: -1}, parley.CodeInvalidArgument},
		{"cursor_garbage", ana, parley.SearchRequest{Query: "fox", Cursor: "not a cursor"}, parley.CodeInvalidArgument},
		{"cursor_wrong_shape", ana, parley.SearchRequest{Query: "fox", Cursor: base64.RawURLEncoding.EncodeToString([]byte("1.2"))}, parley.CodeInvalidArgument},
		{"bad_query_unknown_conv", ana, parley.SearchRequest{Query: "", Conv: "c-none"}, parley.CodeInvalidArgument},
		{"bad_query_not_member", ben, parley.SearchRequest{Query: `"x`, Conv: "c-mix"}, parley.CodeInvalidArgument},
		{"not_member_request_conv", ben, parley.SearchRequest{Query: "上海", Conv: "c-mix"}, parley.CodeNotMember},
		{"not_member_in", ben, parley.SearchRequest{Query: "in:c-mix 上海"}, parley.CodeNotMember},
		{"not_member_in_alone", ben, parley.SearchRequest{Query: "in:c-mix"}, parley.CodeNotMember},
		{"unknown_conv", ana, parley.SearchRequest{Query: "fox", Conv: "c-none"}, parley.CodeNotMember},
		{"unknown_conv_in", ana, parley.SearchRequest{Query: "in:c-none fox"}, parley.CodeNotMember},
		{"no_conversations_in", dan, parley.SearchRequest{Query: "in:c-en fox"}, parley.CodeNotMember},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]fullSnapshot{}
			rows := map[string]searchRows{}
			for _, c := range []string{"c-en", "c-zh", "c-mix"} {
				before[c], rows[c] = e.full(t, c), e.searchRows(t, c)
			}
			pg, err := e.st.Search(ctx(t), tc.p, tc.r)
			wantCode(t, err, tc.want)
			if len(pg.Hits) != 0 || pg.Next != "" {
				t.Errorf("a rejected search returned %d hits, next %q", len(pg.Hits), pg.Next)
			}
			for c, b := range before {
				e.fullUnchanged(t, c, b)
				if got := e.searchRows(t, c); got != rows[c] {
					t.Errorf("a rejected search changed the index of %s: %+v, was %+v", c, got, rows[c])
				}
			}
		})
	}
	// The bounds themselves are accepted.
	for _, q := range []string{strings.Repeat("x", parley.MaxSearchQueryChars), strings.TrimSpace(strings.Repeat("word ", parley.MaxSearchTerms))} {
		e.wantHits(t, ana, parley.SearchRequest{Query: q})
	}
	e.wantHits(t, ana, parley.SearchRequest{Query: "fo*", Limit: 1}, "6 the [fox] says 你好", "3 The quick brown [fox] jumps over the lazy dog")
	e.wantHits(t, dan, parley.SearchRequest{Query: "from:ana"})
}

// testSearchEdit: a message matches by the version the caller reads, once
// however many versions match, at the message's time (not the edit's);
// every version has its row.
func testSearchEdit(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")                    // 1, 2
	e.send(t, ana, c, "k3", "colour of the sky") // 3
	time.Sleep(2 * time.Millisecond)
	e.send(t, ben, c, "k4", "the sky is grey") // 4
	if a, b := e.fetch(t, ana, c, 3).At, e.fetch(t, ana, c, 4).At; a.UnixMilli() >= b.UnixMilli() {
		t.Fatalf("message 3 at %v is not a millisecond before 4 at %v", a, b)
	}
	all := parley.SearchRequest{Query: `"of the"`}
	e.wantHits(t, ben, all, "3 colour [of the] sky")
	e.edit(t, ana, c, 3, "e5", "color of the sea") // 5
	if n := e.versionRows(t, c, 3); n != 2 {
		t.Errorf("%d index rows of the edited message, want 2 (one per version)", n)
	}
	for _, p := range []parley.Principal{ana, ben} {
		e.wantHits(t, p, parley.SearchRequest{Query: "colour"})
		e.wantHits(t, p, parley.SearchRequest{Query: "color"}, "3 [color] of the sea")
		e.wantHits(t, p, parley.SearchRequest{Query: "sea"}, "3 color of the [sea]")
		e.wantHits(t, p, parley.SearchRequest{Query: "sky"}, "4 the [sky] is grey")
		e.wantHits(t, p, all, "3 color [of the] sea")
		// By the message's time: 4 was sent after 3, though 3 was edited later.
		e.wantHits(t, p, parley.SearchRequest{Query: "the"}, "4 [the] sky is grey", "3 color of [the] sea")
	}
	e.edit(t, ana, c, 3, "e6", "colour of the sky again") // 6
	e.wantHits(t, ben, parley.SearchRequest{Query: "colour sky"}, "3 [colour] of the [sky] again")
	e.wantHits(t, ben, parley.SearchRequest{Query: "sea"})
	e.wantHits(t, ben, parley.SearchRequest{Query: "color"})
	if n := e.versionRows(t, c, 3); n != 3 {
		t.Errorf("%d index rows of the twice edited message, want 3", n)
	}
}

// testSearchRecall: a recalled message is never found, by its text or by
// an edit's; its rows leave the index in the recall's transaction.
func testSearchRecall(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")                          // 1, 2
	e.send(t, ana, c, "k3", "the secret launch code")  // 3
	e.send(t, ana, c, "k4", "original wording here")   // 4
	e.edit(t, ana, c, 4, "e5", "revised wording here") // 5
	e.send(t, ben, c, "k6", "launch party tomorrow")   // 6
	e.wantHits(t, ben, parley.SearchRequest{Query: "secret"}, "3 the [secret] launch code")
	e.wantHits(t, ben, parley.SearchRequest{Query: "revised"}, "4 [revised] wording here")
	e.recall(t, ana, c, 3, "r7")
	e.recall(t, ana, c, 4, "r8")
	for _, p := range []parley.Principal{ana, ben} {
		for _, q := range []string{"secret", `"secret launch"`, "code", "original", "revised", "wording", "here", "secr*"} {
			e.wantHits(t, p, parley.SearchRequest{Query: q})
		}
		e.wantHits(t, p, parley.SearchRequest{Query: "launch"}, "6 [launch] party tomorrow")
		e.wantHits(t, p, parley.SearchRequest{Query: "from:ana"})
		e.wantHits(t, p, parley.SearchRequest{Query: "in:c-ab"}, "6 launch party tomorrow")
	}
	for _, seq := range []int64{3, 4} {
		if n := e.versionRows(t, c, seq); n != 0 {
			t.Errorf("%d index rows of recalled message %d", n, seq)
		}
	}
	res, err := e.st.RebuildSearch(ctx(t), c, nil)
	ok(t, err, "rebuild")
	if res.Rows != 1 || e.searchRows(t, c).Rows != 1 {
		t.Errorf("rebuild after the recalls: %+v, %d rows; want 1", res, e.searchRows(t, c).Rows)
	}
	e.wantHits(t, ben, parley.SearchRequest{Query: "wording"})
}

// testSearchFormerMember: a member who left finds the messages as they
// read at their leave (an edit made after it does not match, the version
// they saw does), nothing sent after; one who left and came back finds
// what lies in their periods; one who joined later finds nothing sent
// before they joined, not even by an edit made after.
func testSearchFormerMember(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan")
	ana, ben, cy, dan := ps[0], ps[1], ps[2], ps[3]
	const c = "c-all"
	e.group(t, ana, c, "ben", "dan")                // 1..3
	e.send(t, ana, c, "k4", "apple pie recipe")     // 4
	e.edit(t, ana, c, 4, "e5", "banana pie recipe") // 5
	e.send(t, ben, c, "k6", "ben was here")         // 6
	change := func(add bool, user string, seq int64) {
		t.Helper()
		var ch parley.MemberChange
		var err error
		if add {
			ch, err = e.st.AddMember(ctx(t), ana, c, user)
		} else {
			ch, err = e.st.RemoveMember(ctx(t), ana, c, user)
		}
		if err != nil || ch.Seq != seq {
			t.Fatalf("membership change of %s: %+v %v, want seq %d", user, ch, err, seq)
		}
	}
	change(false, "ben", 7)
	change(false, "dan", 8)
	e.edit(t, ana, c, 4, "e9", "cherry pie recipe")    // 9
	e.send(t, ana, c, "k10", "durian after they left") // 10
	change(true, "cy", 11)
	e.edit(t, ana, c, 4, "e12", "elderberry pie recipe") // 12
	e.send(t, cy, c, "k13", "fig from cy")               // 13
	change(true, "ben", 14)
	e.send(t, ana, c, "k15", "grape with ben back") // 15

	type q = parley.SearchRequest
	for _, tc := range []struct {
		p    parley.Principal
		r    q
		want []string
	}{
		{dan, q{Query: "banana"}, []string{"4 [banana] pie recipe"}},
		{dan, q{Query: "pie"}, []string{"4 banana [pie] recipe"}},
		{dan, q{Query: "recipe", Conv: c}, []string{"4 banana pie [recipe]"}},
		{dan, q{Query: "apple"}, nil},
		{dan, q{Query: "cherry"}, nil},
		{dan, q{Query: "elderberry"}, nil},
		{dan, q{Query: "durian"}, nil},
		{dan, q{Query: "grape"}, nil},
		{dan, q{Query: "from:ana"}, []string{"4 banana pie recipe"}},
		{dan, q{Query: "from:ben"}, []string{"6 ben was here"}},
		{ben, q{Query: "banana"}, []string{"4 [banana] pie recipe"}},
		{ben, q{Query: "pie"}, []string{"4 banana [pie] recipe"}},
		{ben, q{Query: "cherry"}, nil},
		{ben, q{Query: "elderberry"}, nil},
		{ben, q{Query: "durian"}, nil},
		{ben, q{Query: "fig"}, nil},
		{ben, q{Query: "grape"}, []string{"15 [grape] with ben back"}},
		{cy, q{Query: "pie"}, nil},
		{cy, q{Query: "elderberry"}, nil},
		{cy, q{Query: "durian"}, nil},
		{cy, q{Query: "fig"}, []string{"13 [fig] from cy"}},
		{cy, q{Query: "from:ana"}, []string{"15 grape with ben back"}},
		{ana, q{Query: "pie"}, []string{"4 elderberry [pie] recipe"}},
		{ana, q{Query: "banana"}, nil},
		{ana, q{Query: "apple"}, nil},
		{ana, q{Query: "cherry"}, nil},
		{ana, q{Query: "durian"}, []string{"10 [durian] after they left"}},
		{ana, q{Query: "from:ana"}, []string{"15 grape with ben back", "10 durian after they left", "4 elderberry pie recipe"}},
	} {
		t.Run(tc.p.User+"_"+tc.r.Query, func(t *testing.T) {
			e.wantHits(t, tc.p, tc.r, tc.want...)
		})
	}
	pg := e.searchPage(t, dan, q{Query: "banana"})
	if len(pg.Hits) == 1 && describeDerived(pg.Hits[0].Event.Derived) != "as_of 8 edit 5" {
		t.Errorf("dan's hit derived %s, want as_of 8 edit 5", describeDerived(pg.Hits[0].Event.Derived))
	}
	if n := e.versionRows(t, c, 4); n != 4 {
		t.Errorf("%d index rows of the message edited three times, want 4", n)
	}
}

// testSearchPurge: a purge deletes the rows of the messages it deletes in
// its transaction, including the versions of a purged message made by an
// edit the purge keeps; kept messages still match.
func testSearchPurge(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")                         // 1, 2
	e.send(t, ana, c, "k3", "kiwi one")               // 3
	e.send(t, ana, c, "k4", "lemon two")              // 4
	e.send(t, ana, c, "k5", "mango three")            // 5
	e.edit(t, ana, c, 3, "e6", "kiwi one again")      // 6
	e.edit(t, ana, c, 5, "e7", "mango three ripe")    // 7
	e.send(t, ben, c, "k8", "nectarine four")         // 8
	e.edit(t, ben, c, 8, "e9", "nectarine four ripe") // 9
	e.wantHits(t, ben, parley.SearchRequest{Query: "kiwi"}, "3 [kiwi] one again")
	e.wantHits(t, ben, parley.SearchRequest{Query: "ripe"}, "8 nectarine four [ripe]", "5 mango three [ripe]")
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 4}), "keep last 4")
	pr, err := e.st.Purge(ctx(t), c)
	ok(t, err, "purge")
	if pr.MinSeq != 6 {
		t.Fatalf("purge: %+v, want min_seq 6", pr)
	}
	for _, p := range []parley.Principal{ana, ben} {
		for _, q := range []string{"kiwi", "lemon", "mango", "again", "from:ana"} {
			e.wantHits(t, p, parley.SearchRequest{Query: q})
		}
		e.wantHits(t, p, parley.SearchRequest{Query: "ripe"}, "8 nectarine four [ripe]")
		e.wantHits(t, p, parley.SearchRequest{Query: "in:c-ab"}, "8 nectarine four ripe")
	}
	if r := e.searchRows(t, c); r.Rows != 2 || r.Seqs != 16 {
		t.Errorf("index after the purge: %+v, want the two versions of 8 only", r)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM search_docs WHERE conv_id = ? AND seq < 6", c); n != 0 {
		t.Errorf("%d index rows of purged messages", n)
	}
	res, err := e.st.RebuildSearch(ctx(t), c, nil)
	ok(t, err, "rebuild")
	if res.Rows != 2 || e.searchRows(t, c).Rows != 2 {
		t.Errorf("rebuild after the purge: %+v, want 2 rows", res)
	}
	e.wantHits(t, ben, parley.SearchRequest{Query: "kiwi"})
}

// testSearchRollback: a rollback rebuilds the conversation's rows from
// the events it keeps: a recall it undoes makes the message (and its
// kept edit) findable again, an edit it removes makes the old text match
// again, a message it removes is gone, and the seqs it frees are reused
// without the removed events' rows matching.
func testSearchRollback(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")                 // 1, 2
	e.send(t, ana, c, "k3", "rollback alpha") // 3
	time.Sleep(2 * time.Millisecond)
	e.send(t, ana, c, "k4", "rollback gamma")          // 4
	e.edit(t, ana, c, 4, "e5", "rollback gamma prime") // 5: the restore point
	e.edit(t, ana, c, 3, "e6", "rollback beta")        // 6
	e.recall(t, ana, c, 4, "r7")                       // 7
	e.send(t, ana, c, "k8", "rollback delta")          // 8
	type q = parley.SearchRequest
	e.wantHits(t, ben, q{Query: "alpha"})
	e.wantHits(t, ben, q{Query: "gamma"})
	e.wantHits(t, ben, q{Query: "rollback"}, "8 [rollback] delta", "3 [rollback] beta")

	rr, err := e.st.Rollback(ctx(t), c, 5)
	ok(t, err, "rollback")
	if rr.Head != 5 {
		t.Fatalf("rollback: %+v, want head 5", rr)
	}
	for _, p := range []parley.Principal{ana, ben} {
		e.wantHits(t, p, q{Query: "alpha"}, "3 rollback [alpha]")
		e.wantHits(t, p, q{Query: "beta"})
		e.wantHits(t, p, q{Query: "gamma"}, "4 rollback [gamma] prime")
		e.wantHits(t, p, q{Query: "prime"}, "4 rollback gamma [prime]")
		e.wantHits(t, p, q{Query: "delta"})
		e.wantHits(t, p, q{Query: "rollback"}, "4 [rollback] gamma prime", "3 [rollback] alpha")
	}
	e.send(t, ben, c, "k6b", "rollback epsilon") // 6 again
	e.edit(t, ana, c, 3, "e7b", "rollback zeta") // 7 again
	e.wantHits(t, ben, q{Query: "beta"})
	e.wantHits(t, ben, q{Query: "alpha"})
	e.wantHits(t, ben, q{Query: "epsilon"}, "6 rollback [epsilon]")
	e.wantHits(t, ben, q{Query: "zeta"}, "3 rollback [zeta]")
	if r := e.searchRows(t, c); r.Rows != 5 || r.Seqs != 3+3+4+4+6 || r.VSeqs != 3+7+4+5+6 {
		t.Errorf("index after the rollback and two writes: %+v, want rows (3,3) (3,7) (4,4) (4,5) (6,6)", r)
	}
}

// testSearchPaging: pages of two over three conversations whose messages
// share one millisecond (so the order falls to conversation and seq),
// with recalled and edited messages between them and new messages sent
// while the walk goes on: every message that matched when the walk
// started comes exactly once, in order, each page full but the last.
// The limit defaults to DefaultSearchPage and is capped at MaxSearchPage.
func testSearchPaging(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	e.group(t, ana, "c-a", "ben")
	e.group(t, ana, "c-b", "ben")
	e.group(t, cy, "c-x", "ben") // ana is not in c-x
	for _, f := range []struct {
		p    parley.Principal
		conv string
	}{{ana, "c-a"}, {ana, "c-b"}, {cy, "c-x"}} {
		if first, last := e.fill(t, f.p, f.conv, 20); first != 3 || last != 22 {
			t.Fatalf("fill %s: %d..%d", f.conv, first, last)
		}
	}
	e.db.Exec(t, "UPDATE events SET created_at = (SELECT created_at FROM events WHERE conv_id = ? AND seq = 3) WHERE kind = 'message'", "c-a")
	// The copies Fill made are not indexed: the rebuild indexes them.
	_, err := e.st.RebuildSearch(ctx(t), "", nil)
	ok(t, err, "rebuild")
	e.recall(t, ana, "c-a", 5, "r1")
	e.recall(t, ana, "c-a", 9, "r2")
	e.edit(t, ana, "c-b", 7, "e1", "edited fill")
	e.edit(t, ana, "c-b", 8, "e2", "changed")
	e.edit(t, cy, "c-x", 6, "e3", "gone")
	time.Sleep(2 * time.Millisecond) // what is sent from now on is newer

	var want []string
	for _, conv := range []string{"c-b", "c-a"} {
		for seq := int64(22); seq >= 3; seq-- {
			switch {
			case conv == "c-a" && (seq == 5 || seq == 9), conv == "c-b" && seq == 8:
				continue
			case conv == "c-b" && seq == 7:
				want = append(want, "c-b/7 edited [fill]")
			default:
				want = append(want, fmt.Sprintf("%s/%d [fill] %d", conv, seq, seq-3))
			}
		}
	}
	r := parley.SearchRequest{Query: "fill", Limit: 2}
	var walked []parley.SearchHit
	for i := range 100 {
		pg := e.searchPage(t, ana, r)
		walked = append(walked, pg.Hits...)
		if pg.Next == "" {
			break
		}
		if len(pg.Hits) != 2 {
			t.Fatalf("page %d: %d hits with a next", i, len(pg.Hits))
		}
		r.Cursor = pg.Next
		e.send(t, ana, "c-a", fmt.Sprint("late-a-", i), "fill late")
		e.send(t, ana, "c-b", fmt.Sprint("late-b-", i), "fill late")
	}
	if got := hitLines(walked, true); !slices.Equal(got, want) {
		t.Errorf("walk under writes:\ngot  %q\nwant %q", got, want)
	}
	wantOrdered(t, "walk under writes", walked)

	pg := e.searchPage(t, ana, parley.SearchRequest{Query: "fill late", Limit: 1})
	if len(pg.Hits) != 1 || pg.Hits[0].Event.Conv != "c-b" || pg.Hits[0].Event.Seq != e.conv(t, "c-b").Head || pg.Next == "" {
		t.Errorf("the newest late message first: %q next %q", hitLines(pg.Hits, true), pg.Next)
	}
	pg = e.searchPage(t, ana, parley.SearchRequest{Query: "fill"})
	if len(pg.Hits) != parley.DefaultSearchPage || pg.Next == "" {
		t.Errorf("limit 0: %d hits next %q, want %d and a next", len(pg.Hits), pg.Next, parley.DefaultSearchPage)
	}
	// ben reads c-x too: 56 old matches and the late ones.
	if got := hitLines(e.searchAll(t, ben, parley.SearchRequest{Query: "fill 1"}), true); !slices.Equal(got, []string{"c-x/4 [fill] [1]", "c-b/4 [fill] [1]", "c-a/4 [fill] [1]"}) {
		t.Errorf("ben's fill 1: %q", got)
	}
	all := e.searchAll(t, ben, parley.SearchRequest{Query: "fill", Limit: 1000})
	if late := 2 * int(e.conv(t, "c-b").Head-22-2); len(all) != 56+late {
		t.Errorf("ben's walk of fill: %d hits, want %d", len(all), 56+late)
	}
	pg = e.searchPage(t, ben, parley.SearchRequest{Query: "fill", Limit: 1000})
	if len(pg.Hits) != parley.MaxSearchPage || pg.Next == "" {
		t.Errorf("limit 1000: %d hits, want %d and a next", len(pg.Hits), parley.MaxSearchPage)
	}
	e.wantHits(t, ben, parley.SearchRequest{Query: "gone"}, "6 [gone]")
}

// testSearchPending: a conversation marked not built answers UNAVAILABLE
// to a search that touches it (named, or among the caller's when none is
// named) after the checks of the request and of membership, never an
// empty page; RebuildSearch clears the mark. New conversations are never
// marked. RebuildSearch rejects a malformed id and an unknown
// conversation.
func testSearchPending(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan")
	ana, ben, cy, dan := ps[0], ps[1], ps[2], ps[3]
	for _, c := range []struct {
		owner parley.Principal
		id    string
	}{{ana, "c-a"}, {ana, "c-b"}, {cy, "c-x"}} {
		e.group(t, c.owner, c.id, "ben")
		e.send(t, c.owner, c.id, "k", "pending apple")
	}
	if n := e.db.Int(t, "SELECT count(*) FROM search_pending"); n != 0 {
		t.Fatalf("%d new conversations marked not built", n)
	}
	e.db.Exec(t, "INSERT INTO search_pending (conv_id) VALUES (?)", "c-a")
	e.db.Exec(t, "INSERT INTO search_pending (conv_id) VALUES (?)", "c-x")
	type q = parley.SearchRequest
	for _, tc := range []struct {
		name string
		p    parley.Principal
		r    q
		want parley.Code
	}{
		{"all_of_ana", ana, q{Query: "apple"}, parley.CodeUnavailable},
		{"all_of_ben", ben, q{Query: "apple"}, parley.CodeUnavailable},
		{"all_of_cy", cy, q{Query: "apple"}, parley.CodeUnavailable},
		{"named", ana, q{Query: "apple", Conv: "c-a"}, parley.CodeUnavailable},
		{"in", ana, q{Query: "in:c-a apple"}, parley.CodeUnavailable},
		{"filters_only", ana, q{Query: "from:ana"}, parley.CodeUnavailable},
		{"not_member_first", ana, q{Query: "apple", Conv: "c-x"}, parley.CodeNotMember},
		{"invalid_first", ana, q{Query: `"apple`, Conv: "c-a"}, parley.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg, err := e.st.Search(ctx(t), tc.p, tc.r)
			wantCode(t, err, tc.want)
			if len(pg.Hits) != 0 {
				t.Errorf("%d hits with an error", len(pg.Hits))
			}
		})
	}
	e.wantHits(t, ana, q{Query: "apple", Conv: "c-b"}, "3 pending [apple]")
	e.wantHits(t, dan, q{Query: "apple"})

	var calls []parley.SearchRebuild
	res, err := e.st.RebuildSearch(ctx(t), "c-a", func(r parley.SearchRebuild) { calls = append(calls, r) })
	ok(t, err, "rebuild c-a")
	want := parley.SearchRebuild{Convs: 1, Total: 1, Rows: 1}
	if res != want || len(calls) != 1 || calls[0] != want {
		t.Errorf("rebuild c-a: %+v, progress %+v; want %+v once", res, calls, want)
	}
	if a, x := e.searchRows(t, "c-a").Pending, e.searchRows(t, "c-x").Pending; a != 0 || x != 1 {
		t.Errorf("pending after rebuilding c-a: c-a %d, c-x %d; want 0, 1", a, x)
	}
	hits := e.searchAll(t, ana, q{Query: "apple"})
	if got := hitLines(hits, true); !slices.Equal(got, []string{"c-b/3 pending [apple]", "c-a/3 pending [apple]"}) && !slices.Equal(got, []string{"c-a/3 pending [apple]", "c-b/3 pending [apple]"}) {
		t.Errorf("ana after the rebuild: %q", got)
	}
	_, err = e.st.Search(ctx(t), ben, q{Query: "apple"})
	wantCode(t, err, parley.CodeUnavailable)

	for _, tc := range []struct {
		name, conv string
		want       parley.Code
	}{{"malformed", "c x", parley.CodeInvalidArgument}, {"unknown", "c-none", parley.CodeNotFound}} {
		t.Run("rebuild_"+tc.name, func(t *testing.T) {
			before := e.searchRows(t, "c-x")
			called := false
			_, err := e.st.RebuildSearch(ctx(t), tc.conv, func(parley.SearchRebuild) { called = true })
			wantCode(t, err, tc.want)
			if called || e.searchRows(t, "c-x") != before {
				t.Errorf("a rejected rebuild reported progress or changed the index")
			}
		})
	}
	res, err = e.st.RebuildSearch(ctx(t), "", nil)
	ok(t, err, "rebuild all")
	if res != (parley.SearchRebuild{Convs: 3, Total: 3, Rows: 3}) {
		t.Errorf("rebuild all: %+v", res)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM search_pending"); n != 0 {
		t.Errorf("%d conversations still marked after rebuilding all", n)
	}
	e.wantHits(t, cy, q{Query: "apple"}, "3 pending [apple]")
	if hits := e.searchAll(t, ben, q{Query: "apple"}); len(hits) != 3 {
		t.Errorf("ben after rebuilding all: %q", hitLines(hits, true))
	}
}

// testSearchManyConvs: a caller in more conversations than a store puts in
// its text query still gets exactly the hits of their own.
func testSearchManyConvs(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const n = 70
	for i := range n {
		id := fmt.Sprintf("c-%02d", i)
		if i%2 == 0 {
			e.group(t, ana, id, "ben")
		} else {
			e.group(t, ana, id)
		}
		e.send(t, ana, id, "k", fmt.Sprintf("common word %d", i))
	}
	if hits := e.searchAll(t, ana, parley.SearchRequest{Query: "common", Limit: parley.MaxSearchPage}); len(hits) != n {
		t.Errorf("ana: %d hits, want %d", len(hits), n)
	}
	hits := e.searchAll(t, ben, parley.SearchRequest{Query: "common", Limit: 7})
	if len(hits) != n/2 {
		t.Errorf("ben: %d hits, want %d", len(hits), n/2)
	}
	for _, h := range hits {
		var i int
		if _, err := fmt.Sscanf(h.Event.Conv, "c-%d", &i); err != nil || i%2 != 0 {
			t.Errorf("ben found %s/%d outside his conversations", h.Event.Conv, h.Event.Seq)
		}
	}
	e.wantHits(t, ben, parley.SearchRequest{Query: "common 68"}, "3 [common] word [68]")
	_, err := e.st.Search(ctx(t), ben, parley.SearchRequest{Query: "common", Conv: "c-69"})
	wantCode(t, err, parley.CodeNotMember)
}

// testSearchBatch: sends committed by group commit are indexed in their
// batch's transaction; a replay in the batch or alone writes no row.
func testSearchBatch(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	e.group(t, ana, "c-a", "ben") // 1, 2
	e.group(t, ana, "c-b", "ben") // 1, 2
	e.runBatch(t, []batchItem{
		{p: ana, conv: "c-a", cmid: "k1", body: "batch kumquat", seq: 3},
		{p: ben, conv: "c-b", cmid: "k1", body: "batch quince", seq: 3},
		{p: ana, conv: "c-a", cmid: "k1", body: "batch kumquat", seq: 3, dup: true, sameMIDAs: 1},
		{p: ben, conv: "c-a", cmid: "k2", body: "batch quince too", seq: 4},
		{p: ana, conv: "c-none", cmid: "k3", body: "batch nothing", code: parley.CodeNotMember},
	})
	e.wantHits(t, ben, parley.SearchRequest{Query: "kumquat"}, "3 batch [kumquat]")
	hits := e.searchAll(t, ana, parley.SearchRequest{Query: "quince"})
	if len(hits) != 2 {
		t.Errorf("quince: %q, want c-a/4 and c-b/3", hitLines(hits, true))
	}
	before := e.searchRows(t, "c-a")
	if before.Rows != 2 {
		t.Errorf("c-a index: %+v, want 2 rows", before)
	}
	e.runBatch(t, []batchItem{{p: ana, conv: "c-a", cmid: "k1", body: "batch kumquat", seq: 3, dup: true}})
	s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: "c-a", CMID: "k1", Body: "batch kumquat"})
	if wantCode(t, err, "") && (!s.Dup || s.Seq != 3) {
		t.Errorf("replay: %+v", s)
	}
	if got := e.searchRows(t, "c-a"); got != before {
		t.Errorf("a replay changed the index: %+v, was %+v", got, before)
	}
	e.wantHits(t, ben, parley.SearchRequest{Query: "kumquat"}, "3 batch [kumquat]")
}
