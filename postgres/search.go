package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

// maxConvTokens is how many conversations a tsquery names: a search over
// more leaves the conversation group out of the tsquery (the SQL filter on
// conv_id alone narrows to them; a long OR costs the index more than it
// saves).
const maxConvTokens = 64

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

// tsvectorLiteral is the tsvector literal of tokens: token i (from 0) at
// position i+1 (at most maxPosition). An empty token, which no text
// yields, is left out and keeps its position.
func tsvectorLiteral(tokens []string) string {
	n := 0
	for _, t := range tokens {
		n += len(t) + 8
	}
	b := make([]byte, 0, n)
	for i, tok := range tokens {
		if tok == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = appendLexeme(b, tok)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(min(i+1, maxPosition)), 10)
	}
	return string(b)
}

// docLiteral is the tsvector literal of one version of a message: what
// search_docs.tsv holds for it.
func docLiteral(conv, sender, body string) string {
	return tsvectorLiteral(parley.SearchDocTokens(conv, sender, body))
}

// tsqueryLiteral is the tsquery literal of q over the conversations convs:
// each term a phrase of its tokens (<->), the last a prefix (:*) when the
// term is one; the terms, the conversation group (when it names at most
// maxConvTokens) and the sender joined by &. Empty when there is nothing
// to match by (no terms, too many conversations, no sender): the caller
// refuses that.
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
	if len(convs) > 0 && len(convs) <= maxConvTokens {
		b := []byte("( ")
		for i, c := range convs {
			if i > 0 {
				b = append(b, " | "...)
			}
			b = appendLexeme(b, parley.ConvToken(c))
		}
		parts = append(parts, append(b, " )"...))
	}
	if q.From != "" {
		parts = append(parts, appendLexeme(nil, parley.SenderToken(q.From)))
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return strings.Join(out, " & ")
}

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

// searchSQL reads the hits of tsquery $1 for user $3 among the
// conversations $2: the conv, seq and vseq of each search_docs row whose
// seq and vseq are inside the user's periods and that no newer version
// inside them replaces (rule 2 of search.go, inside the query, before the
// limit); sent by $4 (NULL: anyone), before $5 ms (NULL: no bound), after
// the cursor ($6, $7, $8; NULL: the first page) in the order of results;
// at most $9 rows.
const searchSQL = `SELECT d.conv_id, d.seq, d.vseq
FROM search_docs d
WHERE d.tsv @@ $1::text::tsquery
	AND d.conv_id = ANY ($2::text[])
	AND ($4::text IS NULL OR d.sender_user = $4::text)
	AND ($5::bigint IS NULL OR d.at < $5::bigint)
	AND ($6::bigint IS NULL OR (d.at, d.conv_id COLLATE "C", d.seq) < ($6::bigint, $7::text COLLATE "C", $8::bigint))
	AND EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = d.conv_id AND p.user_id = $3
		AND p.from_seq <= d.seq AND (p.to_seq IS NULL OR d.seq <= p.to_seq))
	AND EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = d.conv_id AND p.user_id = $3
		AND p.from_seq <= d.vseq AND (p.to_seq IS NULL OR d.vseq <= p.to_seq))
	AND NOT EXISTS (SELECT 1 FROM search_docs n
		WHERE n.conv_id = d.conv_id AND n.seq = d.seq AND n.vseq > d.vseq
			AND EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = n.conv_id AND p.user_id = $3
				AND p.from_seq <= n.vseq AND (p.to_seq IS NULL OR n.vseq <= p.to_seq)))
ORDER BY d.at DESC, d.conv_id COLLATE "C" DESC, d.seq DESC
LIMIT $9`

// searchHit is a row of searchSQL.
type searchHit struct {
	conv      string
	seq, vseq int64
}

// Search implements parley.Store: in one read-only REPEATABLE READ
// transaction, the caller's conversations and periods, the hits
// (searchSQL, over the GIN index), their events, and their derived state
// as Sync decorates it; one snapshot, so the hits, the events and the
// versions shown agree.
func (db *DB) Search(ctx context.Context, p parley.Principal, r parley.SearchRequest) (parley.SearchPage, error) {
	q, err := parley.ParseSearch(r)
	if err != nil {
		return parley.SearchPage{}, err
	}
	var evs []parley.Event
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		views, convs, err := searchViews(ctx, tx, p.User, q.Conv)
		if err != nil || len(convs) == 0 {
			return err
		}
		hits, err := searchHits(ctx, tx, p.User, q, convs)
		if err != nil || len(hits) == 0 {
			return err
		}
		evs, err = db.searchEvents(ctx, tx, p.User, hits, views)
		return err
	})
	if err != nil {
		return parley.SearchPage{}, wrap("search", err)
	}
	return parley.NewSearchPage(q, evs), nil
}

// searchViews reads the conversations a search covers (conv, or every one
// user has a period in) in id order. NOT_MEMBER when conv is named and user
// has no period in it; ErrSearchBuilding when one of them is pending.
func searchViews(ctx context.Context, tx pgx.Tx, user, conv string) (map[string]searchView, []string, error) {
	rows, err := tx.Query(ctx, searchConvsSQL, user, conv)
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

// searchHits runs searchSQL for q over convs: at most q.Limit+1 hits.
func searchHits(ctx context.Context, tx pgx.Tx, user string, q parley.SearchQuery, convs []string) ([]searchHit, error) {
	tsq := tsqueryLiteral(q, convs)
	if tsq == "" {
		return nil, errors.New("a query with nothing to match by")
	}
	var from *string
	var before, afterAt, afterSeq *int64
	var afterConv *string
	if q.From != "" {
		from = &q.From
	}
	if !q.Before.IsZero() {
		ms := q.Before.UnixMilli()
		before = &ms
	}
	if q.After != nil {
		afterAt, afterConv, afterSeq = &q.After.At, &q.After.Conv, &q.After.Seq
	}
	rows, err := tx.Query(ctx, searchSQL, tsq, convs, user, from, before, afterAt, afterConv, afterSeq, q.Limit+1)
	if err != nil {
		return nil, err
	}
	var hits []searchHit
	var h searchHit
	_, err = pgx.ForEachRow(rows, []any{&h.conv, &h.seq, &h.vseq}, func() error {
		hits = append(hits, h)
		return nil
	})
	return hits, err
}

// searchEventsSQL reads the events of the hits ($1, $2 pairs of conv and
// seq) over the primary key.
var searchEventsSQL = `SELECT h.conv, ` + eventCols("e") + `
FROM unnest($1::text[], $2::bigint[]) AS h (conv, seq)
JOIN events e ON e.conv_id = h.conv AND e.seq = h.seq`

// searchEvents reads the hits' message events and decorates them as user
// reads them (decorate, per conversation, AsOf the capped head): each
// Body is then the version that matched, which it checks. They come back
// in the order of hits.
func (db *DB) searchEvents(ctx context.Context, tx pgx.Tx, user string, hits []searchHit, views map[string]searchView) ([]parley.Event, error) {
	convs, seqs := make([]string, len(hits)), make([]int64, len(hits))
	for i, h := range hits {
		convs[i], seqs[i] = h.conv, h.seq
	}
	rows, err := tx.Query(ctx, searchEventsSQL, convs, seqs)
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
	if err != nil {
		return nil, err
	}
	type key struct {
		conv string
		seq  int64
	}
	found := make(map[key]parley.Event, len(hits))
	for c, evs := range byConv {
		v := views[c]
		slices.SortFunc(evs, func(a, b parley.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		if _, err := db.decorate(ctx, tx, c, v.ps, user, v.head, v.epoch, evs); err != nil {
			return nil, err
		}
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
	if _, err := tx.Exec(ctx, `DELETE FROM search_docs WHERE conv_id = $1`, conv); err != nil {
		return 0, err
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
