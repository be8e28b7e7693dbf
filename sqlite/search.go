package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/parleychat/parley"
)

// Full-text search (search.go in the root package; migration 0011).
//
// search_docs holds one row per version of a message's text; search_fts,
// an FTS5 table keyed by the same rowid, holds its tokens (the
// SearchDocTokens of the version, joined by spaces). A search asks FTS5
// for the rows whose tokens match, then keeps those the caller may read
// (rule 2 of derived state) in the same statement, before its LIMIT.

// The statements that write one version (the send path: DB.prepared).
const (
	qInsertDoc = `INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at) VALUES (?, ?, ?, ?, ?) RETURNING id`
	qInsertFTS = `INSERT INTO search_fts (rowid, terms) VALUES (?, ?)`
)

// searchTerms is what search_fts holds for one version of a message:
// computed before the write transaction, so a send's tokenizing costs
// nothing inside the writer's turn.
func searchTerms(convID, sender, body string) string {
	return strings.Join(parley.SearchDocTokens(convID, sender, body), " ")
}

// indexVersion writes the index row of one version of message seq of conv
// (vseq: seq for the original, the edit's seq for an edit; at: the
// message's time).
func indexVersion(ctx context.Context, tx *txn, convID string, seq, vseq int64, sender string, at int64, terms string) error {
	var id int64
	if err := tx.QueryRowContext(ctx, qInsertDoc, convID, seq, vseq, sender, at).Scan(&id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, qInsertFTS, id, terms)
	return err
}

// qUnindexRows reads up to ?4 index rows of the messages of conversation
// ?1 with ?2 <= seq <= ?3, each with what its terms were made of: its
// sender and the body of its version's event (none: the event is gone).
const qUnindexRows = `SELECT d.id, d.sender_user, e.seq IS NOT NULL, coalesce(e.body, '')
	FROM search_docs d LEFT JOIN events e ON e.conv_id = d.conv_id AND e.seq = d.vseq
	WHERE d.conv_id = ?1 AND d.seq >= ?2 AND d.seq <= ?3 ORDER BY d.seq, d.vseq LIMIT ?4`

// unindexChunk is how many index rows unindex deletes per statement.
const unindexChunk = 500

// unindex deletes the index rows of the messages of conv with from <= seq
// <= to, every version, before their events leave the log (recall keeps
// them; purge and rollback call it first). Each FTS5 row is deleted by the
// 'delete' command with the terms it was written with, computed again from
// its event, so secure-delete takes its tokens out of the index's pages;
// then the docs rows go. A row whose event is already gone (an index out
// of step with its log) loses its docs row only: its FTS5 entries can
// match no row again, as ids are never reused.
func unindex(ctx context.Context, tx *txn, convID string, from, to int64) error {
	for {
		var ids []int64
		var ftsArgs []any
		rows, err := tx.QueryContext(ctx, qUnindexRows, convID, from, to, unindexChunk)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var sender, body string
			var hasEvent bool
			if err := rows.Scan(&id, &sender, &hasEvent, &body); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			if hasEvent {
				ftsArgs = append(ftsArgs, id, searchTerms(convID, sender, body))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ftsArgs) > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO search_fts (search_fts, rowid, terms) VALUES `+
				valueRows(len(ftsArgs)/2, "('delete', ?, ?)"), ftsArgs...); err != nil {
				return err
			}
		}
		if len(ids) > 0 {
			list, err := json.Marshal(ids)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM search_docs WHERE id IN (SELECT value FROM json_each(?))`, string(list)); err != nil {
				return err
			}
		}
		if len(ids) < unindexChunk {
			return nil
		}
	}
}

// valueRows is n copies of row, comma separated: a multi-row VALUES list.
func valueRows(n int, row string) string {
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// reindexChunk is how many events a rebuild reads, and rows it inserts,
// per statement.
const reindexChunk = 500

// qReindexEvents reads the next events of conversation ?1 after seq ?2 that
// the index holds a version of: the messages not recalled, and the edits
// with their message's sender and time (none when a purge removed it; a
// recall marks the edits of its target too).
const qReindexEvents = `SELECT e.seq, e.kind, e.body, e.sender_user, e.created_at, coalesce(e.target, 0),
	m.sender_user IS NOT NULL, coalesce(m.sender_user, ''), coalesce(m.created_at, 0)
	FROM events e LEFT JOIN events m ON e.kind = 'edit' AND m.conv_id = e.conv_id AND m.seq = e.target
		AND m.kind = 'message' AND m.recall_seq IS NULL
	WHERE e.conv_id = ?1 AND e.seq > ?2 AND e.kind IN ('message', 'edit') AND e.recall_seq IS NULL
	ORDER BY e.seq LIMIT ?3`

// searchDoc is one index row to write.
type searchDoc struct {
	seq, vseq int64
	sender    string
	at        int64
	terms     string
}

// reindex rebuilds the index rows of conv from its events inside the
// caller's write transaction (RebuildSearch, Rollback) and clears its
// not-built mark; it returns the rows written.
func reindex(ctx context.Context, tx *txn, convID string) (int64, error) {
	if err := unindex(ctx, tx, convID, 0, math.MaxInt64); err != nil {
		return 0, err
	}
	var written int64
	for after := int64(0); ; {
		docs, last, n, err := reindexEvents(ctx, tx, convID, after)
		if err != nil {
			return written, err
		}
		if err := insertDocs(ctx, tx, convID, docs); err != nil {
			return written, err
		}
		written += int64(len(docs))
		if n < reindexChunk {
			break
		}
		after = last
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM search_pending WHERE conv_id = ?`, convID)
	return written, err
}

// reindexEvents reads one chunk of qReindexEvents as index rows; last is
// the seq of the chunk's last event and n its events.
func reindexEvents(ctx context.Context, tx *txn, convID string, after int64) (docs []searchDoc, last int64, n int, err error) {
	rows, err := tx.QueryContext(ctx, qReindexEvents, convID, after, reindexChunk)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var d searchDoc
		var kind, body string
		var target int64
		var hasMsg bool
		var msgSender string
		var msgAt int64
		if err := rows.Scan(&d.vseq, &kind, &body, &d.sender, &d.at, &target, &hasMsg, &msgSender, &msgAt); err != nil {
			return nil, 0, 0, err
		}
		n++
		last = d.vseq
		d.seq = d.vseq
		if kind == string(parley.EventEdit) {
			if !hasMsg {
				continue // the edit of a purged message
			}
			d.seq, d.sender, d.at = target, msgSender, msgAt
		}
		d.terms = searchTerms(convID, d.sender, body)
		docs = append(docs, d)
	}
	return docs, last, n, rows.Err()
}

// insertDocs writes docs, two statements in all: the docs rows, whose ids
// come back with their (seq, vseq), then the FTS5 rows under those ids.
func insertDocs(ctx context.Context, tx *txn, convID string, docs []searchDoc) error {
	if len(docs) == 0 {
		return nil
	}
	args := make([]any, 0, 5*len(docs))
	terms := make(map[[2]int64]string, len(docs))
	for _, d := range docs {
		args = append(args, convID, d.seq, d.vseq, d.sender, d.at)
		terms[[2]int64{d.seq, d.vseq}] = d.terms
	}
	rows, err := tx.QueryContext(ctx, `INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at) VALUES `+
		valueRows(len(docs), "(?, ?, ?, ?, ?)")+` RETURNING id, seq, vseq`, args...)
	if err != nil {
		return err
	}
	ftsArgs := make([]any, 0, 2*len(docs))
	for rows.Next() {
		var id int64
		var key [2]int64
		if err := rows.Scan(&id, &key[0], &key[1]); err != nil {
			rows.Close()
			return err
		}
		ftsArgs = append(ftsArgs, id, terms[key])
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ftsArgs) != 2*len(docs) {
		return fmt.Errorf("search index: %d ids for %d rows", len(ftsArgs)/2, len(docs))
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO search_fts (rowid, terms) VALUES `+valueRows(len(docs), "(?, ?)"), ftsArgs...)
	return err
}

// RebuildSearch implements parley.Store.
func (db *DB) RebuildSearch(ctx context.Context, convID string, progress parley.SearchProgress) (parley.SearchRebuild, error) {
	ids := []string{convID}
	if convID != "" {
		if err := parley.CheckConvID(convID); err != nil {
			return parley.SearchRebuild{}, err
		}
	} else if err := db.read(ctx, "rebuild search", func(tx *txn) error {
		var err error
		ids, err = scanIDs(tx.QueryContext(ctx, `SELECT id FROM conversations ORDER BY id`))
		return err
	}); err != nil {
		return parley.SearchRebuild{}, err
	}
	return parley.RebuildEach(ids, progress, func(id string) (n int64, err error) {
		err = db.write(ctx, "rebuild search", func(tx *txn) error {
			if _, err := loadConv(ctx, tx, id, parley.ErrConvNotFound); err != nil {
				return err
			}
			n, err = reindex(ctx, tx, id)
			return err
		})
		return n, err
	})
}

// maxConvTokens is how many conversations a search names in its FTS5
// expression: beyond it the periods filter of searchSQL alone narrows
// (an OR of thousands of terms costs more than it saves).
const maxConvTokens = 64

// ftsPhrase renders tokens as one FTS5 phrase, the last a prefix when
// prefix is set: "tok1" + "tok2"*.
func ftsPhrase(tokens []string, prefix bool) string {
	parts := make([]string, len(tokens))
	for i, t := range tokens {
		parts[i] = `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
	}
	s := strings.Join(parts, " + ")
	if prefix {
		s += "*"
	}
	return s
}

// ftsMatch renders q as an FTS5 expression over the conversations convs:
// every term, then one of the conversations (when there are at most
// maxConvTokens), then the sender. It is never empty: ParseSearch refuses
// a query with neither terms nor filters, and convs is not empty.
func ftsMatch(q parley.SearchQuery, convs []string) string {
	var parts []string
	for _, t := range q.Terms {
		parts = append(parts, ftsPhrase(t.Tokens, t.Prefix))
	}
	if len(convs) <= maxConvTokens {
		alts := make([]string, len(convs))
		for i, c := range convs {
			alts[i] = ftsPhrase([]string{parley.ConvToken(c)}, false)
		}
		parts = append(parts, "("+strings.Join(alts, " OR ")+")")
	}
	if q.From != "" {
		parts = append(parts, ftsPhrase([]string{parley.SenderToken(q.From)}, false))
	}
	return strings.Join(parts, " AND ")
}

// docIn is the rule-2 filter on an index row: seq (a column of row
// alias) inside the periods of user ?8 in the row's conversation.
func docIn(alias, seq string) string {
	return `EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = ` + alias + `.conv_id AND p.user_id = ?8
		AND p.from_seq <= ` + seq + ` AND (p.to_seq IS NULL OR ` + seq + ` <= p.to_seq))`
}

// searchSQL is one page of hits: the index rows whose tokens match ?1
// (FTS5 first, then each row by its rowid: CROSS JOIN keeps that order),
// in conversation ?2 (empty: any), sent by ?3 (empty: anyone) before ?4 (NULL: no
// bound), strictly after the cursor (?5, ?6, ?7) in the order of results
// (?5 NULL: the first page), that user ?8 reads: the message's seq and
// the version's inside their periods, and no newer version of the same
// message inside them. At most ?9 rows, newest first.
var searchSQL = `SELECT d.conv_id, d.seq FROM search_fts CROSS JOIN search_docs d ON d.id = search_fts.rowid
	WHERE search_fts MATCH ?1
	AND (?2 = '' OR d.conv_id = ?2)
	AND (?3 = '' OR d.sender_user = ?3)
	AND (?4 IS NULL OR d.at < ?4)
	AND (?5 IS NULL OR (d.at, d.conv_id, d.seq) < (?5, ?6, ?7))
	AND ` + docIn("d", "d.seq") + `
	AND ` + docIn("d", "d.vseq") + `
	AND NOT EXISTS (SELECT 1 FROM search_docs n WHERE n.conv_id = d.conv_id AND n.seq = d.seq AND n.vseq > d.vseq
		AND ` + docIn("n", "n.vseq") + `)
	ORDER BY d.at DESC, d.conv_id DESC, d.seq DESC LIMIT ?9`

// Search implements parley.Store.
func (db *DB) Search(ctx context.Context, p parley.Principal, r parley.SearchRequest) (parley.SearchPage, error) {
	q, err := parley.ParseSearch(r)
	if err != nil {
		return parley.SearchPage{}, err
	}
	var hits []parley.Event
	err = db.read(ctx, "search", func(tx *txn) error {
		var err error
		hits, err = search(ctx, tx, p.User, q)
		return err
	})
	if err != nil {
		return parley.SearchPage{}, err
	}
	return parley.NewSearchPage(q, hits), nil
}

// search reads at most q.Limit+1 hits for user, decorated as user reads
// them, in the order of results.
func search(ctx context.Context, tx *txn, user string, q parley.SearchQuery) ([]parley.Event, error) {
	periods, convs, err := searchedConvs(ctx, tx, user, q.Conv)
	if err != nil || len(convs) == 0 {
		return nil, err
	}
	list, err := json.Marshal(convs)
	if err != nil {
		return nil, err
	}
	var pending bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM search_pending WHERE conv_id IN (SELECT value FROM json_each(?)))`,
		string(list)).Scan(&pending); err != nil {
		return nil, err
	}
	if pending {
		return nil, parley.ErrSearchBuilding()
	}
	var before, afterAt any
	var afterConv string
	var afterSeq int64
	if !q.Before.IsZero() {
		before = q.Before.UnixMilli()
	}
	if q.After != nil {
		afterAt, afterConv, afterSeq = q.After.At, q.After.Conv, q.After.Seq
	}
	rows, err := tx.QueryContext(ctx, searchSQL, ftsMatch(q, convs), q.Conv, q.From, before, afterAt, afterConv, afterSeq, user, q.Limit+1)
	if err != nil {
		return nil, err
	}
	var refs []ref
	for rows.Next() {
		var h ref
		if err := rows.Scan(&h.conv, &h.seq); err != nil {
			rows.Close()
			return nil, err
		}
		refs = append(refs, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return readHits(ctx, tx, user, refs, periods)
}

// ref names one message.
type ref struct {
	conv string
	seq  int64
}

// searchedConvs returns the conversations a search by user covers, in id
// order, with user's periods in each: conv alone (NOT_MEMBER when user has
// no period in it, or it does not exist), or every one user has a period
// in.
func searchedConvs(ctx context.Context, tx *txn, user, conv string) (map[string]parley.Periods, []string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT conv_id, from_seq, coalesce(to_seq, 0) FROM periods
		WHERE user_id = ?1 AND (?2 = '' OR conv_id = ?2) ORDER BY conv_id, from_seq`, user, conv)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	periods := map[string]parley.Periods{}
	var convs []string
	for rows.Next() {
		var c string
		var pd parley.Period
		if err := rows.Scan(&c, &pd.From, &pd.To); err != nil {
			return nil, nil, err
		}
		if _, seen := periods[c]; !seen {
			convs = append(convs, c)
		}
		periods[c] = append(periods[c], pd)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if conv != "" && len(convs) == 0 {
		return nil, nil, parley.ErrNotMember
	}
	return periods, convs, nil
}

// readHits reads the messages refs names, per conversation, decorates them
// as user reads them (Derived AsOf the capped head) and returns them in
// the order of refs. A message the index names that is not in the log, or
// is recalled, is an index out of step with the log: an internal error,
// never a hit dropped in silence.
func readHits(ctx context.Context, tx *txn, user string, refs []ref, periods map[string]parley.Periods) ([]parley.Event, error) {
	byConv := map[string][]int64{}
	var order []string
	for _, h := range refs {
		if _, seen := byConv[h.conv]; !seen {
			order = append(order, h.conv)
		}
		byConv[h.conv] = append(byConv[h.conv], h.seq)
	}
	found := make(map[ref]parley.Event, len(refs))
	for _, convID := range order {
		c, err := loadConv(ctx, tx, convID, parley.ErrNotMember)
		if err != nil {
			return nil, err
		}
		list, err := json.Marshal(byConv[convID])
		if err != nil {
			return nil, err
		}
		var evs []parley.Event
		rows, err := tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM events
			WHERE conv_id = ?1 AND seq IN (SELECT value FROM json_each(?2)) ORDER BY seq`, convID, string(list))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			ev, err := scanEvent(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			evs = append(evs, ev)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if err := decorate(ctx, tx, evs, convID, user, periods[convID].Head(c.head())); err != nil {
			return nil, err
		}
		for _, ev := range evs {
			found[ref{ev.Conv, ev.Seq}] = ev
		}
	}
	out := make([]parley.Event, len(refs))
	for i, h := range refs {
		ev, ok := found[h]
		if !ok || ev.Kind != parley.EventMessage || ev.Recalled {
			return nil, fmt.Errorf("the search index names %s/%d, which is no message the log serves", h.conv, h.seq)
		}
		out[i] = ev
	}
	return out, nil
}

// SearchPending implements parley.Store.
func (db *DB) SearchPending(ctx context.Context) ([]string, error) {
	return scanIDs(db.r.QueryContext(ctx, `SELECT conv_id FROM search_pending ORDER BY conv_id`))
}
