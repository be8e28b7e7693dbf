package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// Search on PostgreSQL (migration 0013): search_docs holds one row per
// version of a message with a tsvector cast from a literal built here from
// parley.SearchDocTokens, in a GIN index; a query is a tsquery literal
// built from the parsed parley.SearchQuery. Neither passes through a text
// search parser or configuration: the tokens are the root package's, so
// SQLite's FTS5 index finds the same hits.

// maxPosition is the largest position a tsvector holds; PostgreSQL clamps
// larger ones to it. A body of at most parley.MaxBodyChars code points
// makes fewer tokens than that. (PostgreSQL also keeps at most 256
// positions of one lexeme: a word repeated more often in one message is
// found, but a phrase that needs one of its later occurrences is not,
// where SQLite finds it.)
const maxPosition = 16383

// appendLexeme appends tok as a quoted lexeme of a tsvector or tsquery
// literal: in single quotes, with ' and \ doubled, so every byte of tok,
// spaces, colons and operators included, is part of the lexeme.
func appendLexeme(b []byte, tok string) []byte {
	b = append(b, '\'')
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c == '\'' || c == '\\' {
			b = append(b, c)
		}
		b = append(b, tok[i])
	}
	return append(b, '\'')
}

// docLiteral is the tsvector literal of one version of a message: what
// search_docs.tsv holds for it: each token of parley.SearchDocTokens as a
// lexeme, token i (from 0) at position i+1 (at most maxPosition), built
// in one buffer without the token list.
func docLiteral(conv, sender, body string) string {
	b := make([]byte, 0, 2*len(body)+2*(len(conv)+len(sender))+40)
	pos := 0
	for tok := range parley.SearchTokensSeq(body) {
		pos++
		b = appendLexeme(b, tok)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(min(pos, maxPosition)), 10)
		b = append(b, ' ')
	}
	// The conversation's and the sender's tokens hold no quote or
	// backslash: no doubling needed.
	b = append(parley.AppendConvToken(append(b, '\''), conv), "':"...)
	b = strconv.AppendInt(b, int64(min(pos+1, maxPosition)), 10)
	b = append(parley.AppendSenderToken(append(b, " '"...), sender), "':"...)
	b = strconv.AppendInt(b, int64(min(pos+2, maxPosition)), 10)
	return string(b)
}

// tsqueryLiteral is the tsquery literal of q over the conversations convs:
// each term a phrase of its tokens (<->), the last a prefix (:*) when the
// term is one, and the sender's token, joined by &. The conversations are
// named only when there is nothing else to match by (in: alone): the SQL
// filter on conv_id narrows to them, and an OR of many conversation tokens
// costs the GIN index more than it saves. Empty when there is nothing to
// match by at all: the caller refuses that.
func tsqueryLiteral(q parley.SearchQuery, convs []string) string {
	var parts [][]byte
	for _, t := range q.Terms {
		var b []byte
		if len(t.Tokens) > 1 {
			b = append(b, "( "...)
		}
		for i, tok := range t.Tokens {
			if i > 0 {
				b = append(b, " <-> "...)
			}
			b = appendLexeme(b, tok)
		}
		if t.Prefix {
			b = append(b, ":*"...)
		}
		if len(t.Tokens) > 1 {
			b = append(b, " )"...)
		}
		parts = append(parts, b)
	}
	if q.From != "" {
		parts = append(parts, appendLexeme(nil, parley.SenderToken(q.From)))
	}
	if len(parts) == 0 && len(convs) > 0 && len(convs) <= maxConvTokens {
		b := []byte("( ")
		for i, c := range convs {
			if i > 0 {
				b = append(b, " | "...)
			}
			b = appendLexeme(b, parley.ConvToken(c))
		}
		parts = append(parts, append(b, " )"...))
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return strings.Join(out, " & ")
}

// maxConvTokens is how many conversations a tsquery of conversations alone
// names (a query of in: alone names one).
const maxConvTokens = 64

// searchView is one conversation a search covers, as the caller sees it:
// their periods, the head capped by them (the AsOf of the hits'
// decoration), the epoch.
type searchView struct {
	ps          parley.Periods
	head, epoch int64
}

// searchConvsSQL reads the conversations user $1 has a period in (only $2
// when it is not empty): their periods, capped head, epoch, and whether
// their index is still pending. Over periods_by_user.
const searchConvsSQL = `SELECT p.conv_id, c.next_seq - 1, c.epoch,
	array_agg(p.from_seq ORDER BY p.from_seq), array_agg(coalesce(p.to_seq, 0) ORDER BY p.from_seq),
	EXISTS (SELECT 1 FROM search_pending s WHERE s.conv_id = p.conv_id)
FROM periods p JOIN conversations c ON c.id = p.conv_id
WHERE p.user_id = $1 AND ($2 = '' OR p.conv_id = $2)
GROUP BY p.conv_id, c.next_seq, c.epoch
ORDER BY p.conv_id COLLATE "C"`

// searchVisible is rule 2 of search.go for the search_docs row d and user
// $3: its seq and vseq inside the user's periods, and no newer version of
// the message inside them.
const searchVisible = `EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = d.conv_id AND p.user_id = $3
		AND p.from_seq <= d.seq AND (p.to_seq IS NULL OR d.seq <= p.to_seq))
	AND EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = d.conv_id AND p.user_id = $3
		AND p.from_seq <= d.vseq AND (p.to_seq IS NULL OR d.vseq <= p.to_seq))
	AND NOT EXISTS (SELECT 1 FROM search_docs n
		WHERE n.conv_id = d.conv_id AND n.seq = d.seq AND n.vseq > d.vseq
			AND EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = n.conv_id AND p.user_id = $3
				AND p.from_seq <= n.vseq AND (p.to_seq IS NULL OR n.vseq <= p.to_seq)))`

// searchWalkSQL walks the rows of the conversations $2 newest first over
// search_docs_at (migration 0015), from the position ($5, $6, $7, $8) on
// (exclusive; the order of results, then vseq), at most $9 of them, and
// returns those that are hits of tsquery $1 for user $3 sent by $4 (NULL:
// anyone), each with its place n in the walk, and the walk's last row
// (n = $9) whether it is a hit or not; at most $10 rows. The walk reads the
// index alone (conv_id is in it) and the row of each of the caller's
// entries by its primary key: a common word is found after a few dozen
// rows instead of after reading all of its matches. (hit is a scalar
// subquery, not EXISTS: the planner may run an EXISTS once for every row
// of the table, hashed, which reads all the matches again.)
const searchWalkSQL = `SELECT w.conv_id, w.seq, w.vseq, w.at, w.n, w.hit FROM (
	SELECT k.conv_id, k.seq, k.vseq, k.at, k.n,
		coalesce((SELECT d.tsv @@ $1::text::tsquery AND ($4::text IS NULL OR d.sender_user = $4::text)
				AND ` + searchVisible + `
			FROM search_docs d WHERE d.conv_id = k.conv_id AND d.seq = k.seq AND d.vseq = k.vseq), false) AS hit
	FROM (
		SELECT k.conv_id, k.seq, k.vseq, k.at,
			row_number() OVER (ORDER BY k.at DESC, k.conv_id COLLATE "C" DESC, k.seq DESC, k.vseq DESC) AS n
		FROM search_docs k
		WHERE k.conv_id = ANY ($2::text[])
			AND (k.at, k.conv_id COLLATE "C", k.seq, k.vseq) < ($5::bigint, $6::text COLLATE "C", $7::bigint, $8::bigint)
		ORDER BY k.at DESC, k.conv_id COLLATE "C" DESC, k.seq DESC, k.vseq DESC
		LIMIT $9) k
	OFFSET 0) w
WHERE w.hit OR w.n = $9
LIMIT $10`

// searchSQL reads the hits of tsquery $1 for user $3 among the
// conversations $2 over the GIN index: the conv, seq, vseq and time of
// each search_docs row that matches, is visible to the user
// (searchVisible, inside the query, before the limit) and was sent by $4
// (NULL: anyone), after the position ($5, $6, $7, $8) (exclusive) in the
// order of results; at most $9 rows. The order is by at + 0, an expression
// no index holds: a walk of search_docs_at until enough rare matches
// turned up would be unbounded; searchWalkSQL does the bounded walk.
const searchSQL = `SELECT d.conv_id, d.seq, d.vseq, d.at
FROM search_docs d
WHERE d.tsv @@ $1::text::tsquery
	AND d.conv_id = ANY ($2::text[])
	AND ($4::text IS NULL OR d.sender_user = $4::text)
	AND (d.at, d.conv_id COLLATE "C", d.seq, d.vseq) < ($5::bigint, $6::text COLLATE "C", $7::bigint, $8::bigint)
	AND ` + searchVisible + `
ORDER BY d.at + 0 DESC, d.conv_id COLLATE "C" DESC, d.seq DESC
LIMIT $9`

// searchQueuedSQL is searchSQL over the queued rows (searchqueue.go), each
// an original (vseq = seq): the same tsquery, filters and order. The queue
// has no index and a few hundred rows: its matches are read whole and
// sorted, then checked against the caller's periods newest first until
// the page is full (OFFSET 0 keeps the planner from checking every match
// before the sort). A newer version of a queued message is never queued
// (edits are indexed at once), so searchVisible's check of newer versions
// in search_docs holds for it, and no indexed row has a newer version in
// the queue.
const searchQueuedSQL = `SELECT d.conv_id, d.seq, d.vseq, d.at
FROM (SELECT q.conv_id, q.seq, q.seq AS vseq, q.at FROM search_queue q
	WHERE q.tsv @@ $1::text::tsquery
		AND q.conv_id = ANY ($2::text[])
		AND ($4::text IS NULL OR q.sender_user = $4::text)
		AND (q.at, q.conv_id COLLATE "C", q.seq, q.seq) < ($5::bigint, $6::text COLLATE "C", $7::bigint, $8::bigint)
	ORDER BY q.at DESC, q.conv_id COLLATE "C" DESC, q.seq DESC
	OFFSET 0) d
WHERE ` + searchVisible + `
ORDER BY d.at DESC, d.conv_id COLLATE "C" DESC, d.seq DESC
LIMIT $9`

// searchWalk is how many of the caller's index rows a search examines
// newest first (searchWalkSQL) before it turns to the GIN index for the
// rest of the page (searchSQL): a word in more than about one in fifty of
// the caller's messages fills a page inside the walk.
const searchWalk = 1000

// searchWalkFreq is the share of index rows a query must be expected to
// match for the search to walk first: below it (a page would need more
// than searchWalk rows) the GIN query alone is cheaper, as for a word no
// statistics list as common (DB.tokenFreq).
const searchWalkFreq = 0.02

// searchStatsSQL reads the statistics of search_docs.tsv: its most common
// lexemes and the share of rows each is in.
const searchStatsSQL = `SELECT x.e, x.f FROM pg_stats s,
	unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS x (e, f)
WHERE s.schemaname = current_schema() AND s.tablename = 'search_docs' AND s.attname = 'tsv' AND x.e IS NOT NULL`

// searchStatsAge is how long the statistics are kept before a search
// reads them again (autovacuum's ANALYZE changes them slowly).
const searchStatsAge = 5 * time.Minute

// searchStats are search_docs' statistics as a search weighs its tokens:
// the most common lexemes and their share of rows, read again after
// searchStatsAge.
type searchStats struct {
	mu   sync.Mutex
	read time.Time
	freq map[string]float64 // nil: no statistics
}

// tokenFreq is the least share of rows among tokens by the statistics: 0
// for a token they do not list (rarer than all they do); 1 for no tokens
// or no statistics (a walk is bounded; a GIN query for a common word on a
// large table is not). A failure to read them counts as none, and the
// next search reads them again.
func (db *DB) tokenFreq(ctx context.Context, tokens []string) float64 {
	if len(tokens) == 0 {
		return 1
	}
	s := &db.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.read) > searchStatsAge {
		s.read, s.freq = now, nil
		freq := map[string]float64{}
		var e string
		var f float64
		rows, err := db.pool.Query(ctx, searchStatsSQL)
		if err == nil {
			_, err = pgx.ForEachRow(rows, []any{&e, &f}, func() error { freq[e] = f; return nil })
		}
		switch {
		case err != nil:
			s.read = time.Time{} // the next search tries again
		case len(freq) > 0:
			s.freq = freq
		}
	}
	if s.freq == nil {
		return 1
	}
	least := 1.0
	for _, t := range tokens {
		least = min(least, s.freq[t])
	}
	return least
}

// walkFor is the walk of a search for q whose least frequent exact token
// has share freq of the rows: searchWalk when it is expected to fill a
// page that way, else none.
func walkFor(freq float64) int {
	if freq >= searchWalkFreq {
		return searchWalk
	}
	return 0
}

// exactTokens are the tokens of q's terms that must match exactly (all but
// the last of a prefix term): the ones statistics can weigh.
func exactTokens(q parley.SearchQuery) []string {
	var out []string
	for _, t := range q.Terms {
		n := len(t.Tokens)
		if t.Prefix {
			n--
		}
		out = append(out, t.Tokens[:n]...)
	}
	return out
}

// searchHit is a hit: a row of searchSQL.
type searchHit struct {
	conv      string
	seq, vseq int64
	at        int64
}

// after reports whether h comes after o in the order of results (newest
// first by time, then conversation and seq, descending; then vseq).
func (h searchHit) after(o searchHit) bool {
	return cmp.Or(cmp.Compare(h.at, o.at), strings.Compare(h.conv, o.conv), cmp.Compare(h.seq, o.seq), cmp.Compare(h.vseq, o.vseq)) < 0
}

// searchPos is a position in the walk: the order of results, then vseq
// (descending); a search reads the rows strictly after it.
type searchPos struct {
	at        int64
	conv      string
	seq, vseq int64
}

// searchStart is where q's search begins: before q.Before and after
// q.After, whichever comes later in the order of results.
func searchStart(q parley.SearchQuery) searchPos {
	pos := searchPos{at: math.MaxInt64}
	if !q.Before.IsZero() {
		pos = searchPos{at: q.Before.UnixMilli()} // at < Before: no conv is < ""
	}
	if a := q.After; a != nil {
		c := searchPos{at: a.At, conv: a.Conv, seq: a.Seq} // vseq 0: none of a's versions
		if c.at < pos.at || c.at == pos.at && c.conv < pos.conv {
			pos = c
		}
	}
	return pos
}

// searchConn is what a search runs on: a connection of the pool, in the
// transaction searchViews begins (or a pgx.Tx, for tests).
type searchConn interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Search implements parley.Store: in one read-only REPEATABLE READ
// transaction, the caller's conversations and periods, the hits
// (searchHits), their events, and their derived state as Sync decorates
// it; one snapshot, so the hits, the events and the versions shown agree.
// The transaction's BEGIN travels with the first statements and its COMMIT
// with the last (a search is two or three round trips): on a busy machine
// every round trip waits for the server to be scheduled.
func (db *DB) Search(ctx context.Context, p parley.Principal, r parley.SearchRequest) (parley.SearchPage, error) {
	q, err := parley.ParseSearch(r)
	if err != nil {
		return parley.SearchPage{}, err
	}
	walk := walkFor(db.tokenFreq(ctx, exactTokens(q)))
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return parley.SearchPage{}, wrap("search", err)
	}
	defer conn.Release()
	evs, err := search(ctx, conn, p.User, q, walk, true)
	if err != nil {
		// A refusal (NOT_MEMBER, a conversation not built) leaves the
		// transaction open: end it, so the connection goes back to the
		// pool (one left inside a transaction, the pool closes).
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, `ROLLBACK`)
		}
		return parley.SearchPage{}, wrap("search", err)
	}
	return parley.NewSearchPage(q, evs), nil
}

// search reads the events of a page of q's hits for user on c; with begin,
// it begins the transaction in its first round trip and commits it in its
// last.
func search(ctx context.Context, c searchConn, user string, q parley.SearchQuery, walk int, begin bool) ([]parley.Event, error) {
	views, convs, err := searchViews(ctx, c, user, q.Conv, begin)
	if err != nil {
		return nil, err
	}
	var hits []searchHit
	if len(convs) > 0 {
		if hits, err = searchHits(ctx, c, user, q, convs, walk); err != nil {
			return nil, err
		}
	}
	return searchEvents(ctx, c, user, hits, views, begin)
}

// searchViews reads the conversations a search covers (conv, or every one
// user has a period in) in id order. NOT_MEMBER when conv is named and user
// has no period in it; ErrSearchBuilding when one of them is pending. In
// the same round trip it begins the transaction (with begin) and sets its
// plans to custom ones: a generic plan of searchWalkSQL or searchSQL,
// which PostgreSQL would switch a prepared statement to after five runs,
// cannot weigh the word searched for or the caller's conversations and
// walks the wrong index.
func searchViews(ctx context.Context, c searchConn, user, conv string, begin bool) (map[string]searchView, []string, error) {
	b := &pgx.Batch{}
	if begin {
		b.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	}
	b.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
	b.Queue(searchConvsSQL, user, conv)
	br := c.SendBatch(ctx, b)
	defer br.Close()
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, err
		}
	}
	views, convs, err := readViews(br, conv)
	if err != nil {
		return nil, nil, err
	}
	return views, convs, br.Close()
}

// readViews reads searchConvsSQL's rows from br (searchViews).
func readViews(br pgx.BatchResults, conv string) (map[string]searchView, []string, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	views := map[string]searchView{}
	var convs []string
	var id string
	var v searchView
	var from, to []int64
	var pending, anyPending bool
	_, err = pgx.ForEachRow(rows, []any{&id, &v.head, &v.epoch, &from, &to, &pending}, func() error {
		v.ps = toPeriods(from, to)
		v.head = v.ps.Head(v.head)
		views[id] = v
		convs = append(convs, id)
		anyPending = anyPending || pending
		return nil
	})
	switch {
	case err != nil:
		return nil, nil, err
	case conv != "" && len(convs) == 0:
		return nil, nil, parley.ErrNotMember
	case anyPending:
		return nil, nil, parley.ErrSearchBuilding()
	}
	return views, convs, nil
}

// searchHits reads at most q.Limit+1 hits of q over convs, in the order of
// results: the queued rows' (searchQueuedSQL) merged with the indexed
// rows'. Those are read first by a walk of at most walk rows newest first
// (searchWalkSQL; none when walk is 0), then, when the page is not full
// and the walk stopped before the end, over the GIN index from where the
// walk stopped (searchSQL). Either way gives the same hits (a test walks
// every stop point). A row is queued or indexed, never both, in the
// transaction's snapshot: the queue's first hits and the index's are the
// first of all. The queue's statement travels with the first of the index.
func searchHits(ctx context.Context, tx searchConn, user string, q parley.SearchQuery, convs []string, walk int) ([]searchHit, error) {
	tsq := tsqueryLiteral(q, convs)
	if tsq == "" {
		return nil, errors.New("a query with nothing to match by")
	}
	var from *string
	if q.From != "" {
		from = &q.From
	}
	want := q.Limit + 1
	pos := searchStart(q)
	args := []any{tsq, convs, user, from, pos.at, pos.conv, pos.seq, pos.vseq}
	b := &pgx.Batch{}
	b.Queue(searchQueuedSQL, append(args, want)...)
	if walk > 0 {
		b.Queue(searchWalkSQL, append(args, walk, want+1)...)
	} else {
		b.Queue(searchSQL, append(args, want)...)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	queued, err := readHits(br)
	if err != nil {
		return nil, err
	}
	var hits []searchHit
	more := false // the GIN query's result is complete
	if walk > 0 {
		hits, pos, more, err = walkHits(br, pos, walk, want)
	} else {
		hits, err = readHits(br)
	}
	if err == nil {
		err = br.Close()
	}
	if err != nil || !more {
		return mergeHits(queued, hits, want), err
	}
	rows, err := tx.Query(ctx, searchSQL, tsq, convs, user, from, pos.at, pos.conv, pos.seq, pos.vseq, want-len(hits))
	if err != nil {
		return nil, err
	}
	hits, err = scanHits(rows, hits)
	return mergeHits(queued, hits, want), err
}

// readHits reads the next statement's hits (searchSQL's columns) from br.
func readHits(br pgx.BatchResults) ([]searchHit, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return scanHits(rows, nil)
}

// scanHits appends rows' hits (searchSQL's columns) to hits.
func scanHits(rows pgx.Rows, hits []searchHit) ([]searchHit, error) {
	var h searchHit
	_, err := pgx.ForEachRow(rows, []any{&h.conv, &h.seq, &h.vseq, &h.at}, func() error {
		hits = append(hits, h)
		return nil
	})
	return hits, err
}

// mergeHits merges two lists of hits, each in the order of results, and
// keeps the first want.
func mergeHits(a, b []searchHit, want int) []searchHit {
	if len(a) == 0 {
		return b
	}
	out := make([]searchHit, 0, min(len(a)+len(b), want))
	for len(out) < want && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || len(a) > 0 && b[0].after(a[0]) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// walkHits reads searchWalkSQL's rows (run from pos for at most walk rows)
// from br: the hits found, up to want, and, when the page is not full and
// the walk ended at its bound rather than at the end of the rows, more
// and the position of its last row.
func walkHits(br pgx.BatchResults, pos searchPos, walk, want int) ([]searchHit, searchPos, bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, pos, false, err
	}
	var hits []searchHit
	var r searchPos
	var n, last int64
	var hit, more bool
	_, err = pgx.ForEachRow(rows, []any{&r.conv, &r.seq, &r.vseq, &r.at, &n, &hit}, func() error {
		if n <= last {
			return fmt.Errorf("search walk row %d after row %d", n, last)
		}
		last = n
		if len(hits) == want {
			return nil
		}
		if hit {
			hits = append(hits, searchHit{conv: r.conv, seq: r.seq, vseq: r.vseq, at: r.at})
		}
		if n == int64(walk) {
			pos, more = r, true
		}
		return nil
	})
	return hits, pos, more && len(hits) < want, err
}

// searchEventsSQL reads the events of the hits ($1, $2 pairs of conv and
// seq) over the primary key.
var searchEventsSQL = `SELECT h.conv, ` + eventCols("e") + `
FROM unnest($1::text[], $2::bigint[]) AS h (conv, seq)
JOIN events e ON e.conv_id = h.conv AND e.seq = h.seq`

// searchDerivedSQL reads the DerivedRows of the hits ($4, $5 pairs of
// conv and seq), each conversation's inside its ranges ($1, $2, $3 triples
// of conv and [lo, hi]: the caller's periods capped at the read's AsOf,
// rule 2 in the query): edits and reactions over events_targets, replies
// over events_replies. derivedSQL for every conversation of the page in
// one statement (the epoch is the snapshot's, read with the periods).
const searchDerivedSQL = `SELECT r.conv, e.seq, e.kind, e.sender_user, coalesce(e.body, ''), e.created_at,
	coalesce(e.target, 0), coalesce(e.reply_to, 0), coalesce(e.emoji, ''), coalesce(e.react_on, false),
	e.recall_seq IS NOT NULL
FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r (conv, lo, hi)
JOIN unnest($4::text[], $5::bigint[]) AS h (conv, seq) ON h.conv = r.conv AND h.seq < r.hi
CROSS JOIN LATERAL (
	SELECT * FROM events
	WHERE conv_id = r.conv AND target = h.seq AND kind IN ('edit', 'reaction')
		AND seq >= greatest(r.lo, h.seq + 1) AND seq <= r.hi
	UNION ALL
	SELECT * FROM events
	WHERE conv_id = r.conv AND reply_to = h.seq
		AND seq >= greatest(r.lo, h.seq + 1) AND seq <= r.hi) e`

// searchEvents reads the hits' message events and decorates them as user
// reads them (parley.Decorate, per conversation, AsOf the capped head),
// in one round trip: the events (searchEventsSQL) and their derived rows
// (searchDerivedSQL), and with commit the transaction's COMMIT. Each Body
// is then the version that matched, which it checks. They come back in
// the order of hits.
func searchEvents(ctx context.Context, c searchConn, user string, hits []searchHit, views map[string]searchView, commit bool) ([]parley.Event, error) {
	b := &pgx.Batch{}
	if len(hits) > 0 {
		queueSearchEvents(b, hits, views)
	}
	if commit {
		b.Queue(`COMMIT`)
	}
	if b.Len() == 0 {
		return nil, nil
	}
	br := c.SendBatch(ctx, b)
	defer br.Close()
	if len(hits) == 0 {
		return nil, br.Close()
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	byConv, err := readSearchEvents(br)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	derived := map[string][]parley.DerivedRow{}
	var conv string
	var d parley.DerivedRow
	_, err = pgx.ForEachRow(rows, []any{&conv, &d.Seq, &d.Kind, &d.Sender, &d.Body, &d.At, &d.Target, &d.ReplyTo, &d.Emoji, &d.On, &d.Recalled}, func() error {
		finish(&d, conv)
		derived[conv] = append(derived[conv], d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return orderHits(hits, byConv, derived, views, user)
}

// queueSearchEvents queues the statements of searchEvents for hits: plans
// back to ordinary (searchViews set them to custom), the events, the
// derived rows of each conversation's hits inside its ranges.
func queueSearchEvents(b *pgx.Batch, hits []searchHit, views map[string]searchView) {
	convs, seqs := make([]string, len(hits)), make([]int64, len(hits))
	first := map[string]int64{} // each conversation's first hit
	for i, h := range hits {
		convs[i], seqs[i] = h.conv, h.seq
		if f, ok := first[h.conv]; !ok || h.seq < f {
			first[h.conv] = h.seq
		}
	}
	var rConv []string
	var rLo, rHi []int64
	for c, f := range first {
		v := views[c]
		// Everything that concerns a message comes after it.
		for _, rg := range v.ps.Ranges(f, v.head) {
			rConv, rLo, rHi = append(rConv, c), append(rLo, rg[0]), append(rHi, rg[1])
		}
	}
	b.Queue(`SET LOCAL plan_cache_mode = auto`)
	b.Queue(searchEventsSQL, convs, seqs)
	b.Queue(searchDerivedSQL, rConv, rLo, rHi, convs, seqs)
}

// readSearchEvents reads searchEventsSQL's rows from br: the events by
// conversation.
func readSearchEvents(br pgx.BatchResults) (map[string][]parley.Event, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	byConv := map[string][]parley.Event{}
	var conv string
	var ev parley.Event
	_, err = pgx.ForEachRow(rows, append([]any{&conv}, eventDest(&ev)...), func() error {
		finish(&ev, conv)
		byConv[conv] = append(byConv[conv], ev)
		return nil
	})
	return byConv, err
}

// orderHits decorates each conversation's events with its derived rows
// and returns them in the order of hits, each checked against its hit.
func orderHits(hits []searchHit, byConv map[string][]parley.Event, derived map[string][]parley.DerivedRow, views map[string]searchView, user string) ([]parley.Event, error) {
	type key struct {
		conv string
		seq  int64
	}
	found := make(map[key]parley.Event, len(hits))
	for c, evs := range byConv {
		slices.SortFunc(evs, func(a, b parley.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		parley.Decorate(evs, derived[c], user, views[c].head)
		for _, e := range evs {
			found[key{c, e.Seq}] = e
		}
	}
	out := make([]parley.Event, len(hits))
	for i, h := range hits {
		e, ok := found[key{h.conv, h.seq}]
		if err := checkHit(h, e, ok); err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// checkHit refuses a hit whose event does not show the version that
// matched: a message missing, recalled, or decorated with another version
// means the index has drifted from the events, which the store reports
// (UNAVAILABLE) rather than show text the caller would not read.
func checkHit(h searchHit, ev parley.Event, ok bool) error {
	if !ok || ev.Kind != parley.EventMessage || ev.Recalled || ev.Derived == nil {
		return fmt.Errorf("search index row %s/%d has no message to show", h.conv, h.seq)
	}
	want := h.vseq // the edit shown; 0 for the original
	if h.vseq == h.seq {
		want = 0
	}
	if ev.Derived.EditSeq != want {
		return fmt.Errorf("search index row %s/%d/%d is not the version shown (edit %d)", h.conv, h.seq, h.vseq, ev.Derived.EditSeq)
	}
	return nil
}

// rebuildBatch is how many events RebuildSearch reads and indexes per
// statement pair: memory stays bounded on a conversation of any length.
const rebuildBatch = 2000

// rebuildReadSQL reads the versions of conversation $1 after event seq $2,
// at most $3: each message not recalled and each edit of such a message,
// with the message's seq, sender and time (ms, as Event.At reads back).
const rebuildReadSQL = `SELECT e.seq, m.seq, m.sender_user, floor(extract(epoch FROM m.created_at) * 1000)::bigint, e.body
FROM events e JOIN events m ON m.conv_id = e.conv_id AND m.seq = coalesce(e.target, e.seq)
WHERE e.conv_id = $1 AND e.seq > $2 AND e.kind IN ('message', 'edit') AND e.recall_seq IS NULL
	AND m.kind = 'message' AND m.recall_seq IS NULL
ORDER BY e.seq
LIMIT $3`

// rebuildWriteSQL inserts search rows of conversation $1 from arrays.
const rebuildWriteSQL = `INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
SELECT $1, x.seq, x.vseq, x.sender, x.at, x.tsv::tsvector
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::text[]) AS x (seq, vseq, sender, at, tsv)`

// rebuildSearchConv rebuilds conv's search rows from its events inside tx,
// which holds the conversation's row lock, and clears its pending mark; it
// returns the rows written.
func rebuildSearchConv(ctx context.Context, tx pgx.Tx, conv string) (int64, error) {
	// The queue first (searchqueue.go); the rows are written to
	// search_docs directly.
	for _, q := range []string{`DELETE FROM search_queue WHERE conv_id = $1`, `DELETE FROM search_docs WHERE conv_id = $1`} {
		if _, err := tx.Exec(ctx, q, conv); err != nil {
			return 0, err
		}
	}
	var total, after int64
	for {
		var seqs, vseqs, ats []int64
		var senders, tsvs []string
		rows, err := tx.Query(ctx, rebuildReadSQL, conv, after, rebuildBatch)
		if err != nil {
			return total, err
		}
		var vseq, seq, at int64
		var sender, body string
		_, err = pgx.ForEachRow(rows, []any{&vseq, &seq, &sender, &at, &body}, func() error {
			seqs, vseqs, ats = append(seqs, seq), append(vseqs, vseq), append(ats, at)
			senders, tsvs = append(senders, sender), append(tsvs, docLiteral(conv, sender, body))
			return nil
		})
		if err != nil {
			return total, err
		}
		if len(seqs) > 0 {
			if _, err := tx.Exec(ctx, rebuildWriteSQL, conv, seqs, vseqs, senders, ats, tsvs); err != nil {
				return total, err
			}
		}
		total += int64(len(seqs))
		if len(seqs) < rebuildBatch {
			break
		}
		after = vseqs[len(vseqs)-1]
	}
	_, err := tx.Exec(ctx, `DELETE FROM search_pending WHERE conv_id = $1`, conv)
	return total, err
}

// RebuildSearch implements parley.Store: each conversation in its own
// transaction, under the row lock appenders take, so no send, edit or
// recall of it commits between the read of its events and the write of
// its rows.
func (db *DB) RebuildSearch(ctx context.Context, conv string, progress parley.SearchProgress) (parley.SearchRebuild, error) {
	ids := []string{conv}
	if conv != "" {
		if err := parley.CheckConvID(conv); err != nil {
			return parley.SearchRebuild{}, err
		}
	} else {
		rows, err := db.pool.Query(ctx, `SELECT id FROM conversations ORDER BY id COLLATE "C"`)
		if err != nil {
			return parley.SearchRebuild{}, wrap("rebuild search", err)
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return parley.SearchRebuild{}, wrap("rebuild search", err)
		}
	}
	return parley.RebuildEach(ids, progress, func(id string) (n int64, err error) {
		err = db.write(ctx, "rebuild search", func(tx pgx.Tx) error {
			if _, err := lockConv(ctx, tx, id, lockAppend, parley.ErrConvNotFound); err != nil {
				return err
			}
			n, err = rebuildSearchConv(ctx, tx, id)
			return err
		})
		return n, err
	})
}

// SearchPending implements parley.Store.
func (db *DB) SearchPending(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT conv_id FROM search_pending ORDER BY conv_id COLLATE "C"`)
	if err != nil {
		return nil, wrap("search pending", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, wrap("search pending", err)
}
