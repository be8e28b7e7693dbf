package sqlite

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sendqueue"
)

// Full-text search (search.go in the root package; migrations 0011, 0013).
//
// search_docs holds one row per version of a message's text; search_fts,
// an FTS5 table keyed by the same rowid, holds its tokens (the
// SearchDocTokens of the version, joined by spaces). A row's id is its
// message's time and a slot: at<<slotBits | slot, the slot counting the
// versions indexed in that millisecond. FTS5 yields matches in rowid
// order, so a search walks them newest first and stops after a page,
// keeping those the caller may read (rule 2 of derived state) row by row;
// only the rows of the page's last millisecond are read whole and sorted
// by conversation and seq (searchPage).
//
// A send or an edit does not write search_fts itself: it writes its docs
// row and a row of search_queue (the terms), in its transaction, and the
// writer moves the queue into search_fts in one statement once it holds
// searchFlushAt rows (FTS5 writes a segment at every commit that touched
// it, which cost as much as the send). A search matches the queued rows
// by their terms in Go (queuedMatch), under the same filters: every
// committed version is found, by the same rule as FTS5's. A recall, purge
// or rollback deletes a queued row's terms with the row.

// slotBits is how many low bits of an index row's id count the versions
// of one millisecond: a version is indexed at its message's time, so the
// slots of a millisecond hold the messages sent in it and their edits.
const slotBits = 20

// docID is the id of the first slot of millisecond at; for a time past
// the last an id can hold (the year 2248), the largest id, so a bound
// like "before 2999" bounds nothing instead of wrapping around.
func docID(at int64) int64 {
	if at > math.MaxInt64>>slotBits {
		return math.MaxInt64
	}
	return at << slotBits
}

// searchTerms is what search_fts holds for one version of a message:
// computed before the write transaction, so a send's tokenizing costs
// nothing inside the writer's turn.
func searchTerms(convID, sender, body string) string {
	return strings.Join(parley.SearchDocTokens(convID, sender, body), " ")
}

// qDocSlots reads, for each millisecond of ?1 (a JSON array), the highest
// id in use in it (0: none), by a row or by a lost row (unindex).
const qDocSlots = `SELECT j.value, max(
	coalesce((SELECT max(id) FROM search_docs WHERE id >= j.value << 20 AND id < (j.value + 1) << 20), 0),
	coalesce((SELECT max(id) FROM search_lost WHERE id >= j.value << 20 AND id < (j.value + 1) << 20), 0))
	FROM json_each(?1) j`

// The inserts of n index rows: docs rows (id, conv, seq, vseq, sender,
// at), and terms (id, terms) queued or into search_fts. A batch of sends
// writes its rows in one statement each; those of up to a batch's rows
// are prepared once (hotWrites). search_fts's go last in a transaction:
// FTS5 writes its pending rows out as a segment at every statement
// savepoint that follows them, and once more at the commit.
func qInsertDocs(n int) string {
	return `INSERT INTO search_docs (id, conv_id, seq, vseq, sender_user, at) VALUES ` + valueRows(n, "(?, ?, ?, ?, ?, ?)")
}

func qInsertQueue(n int) string {
	return `INSERT INTO search_queue (id, terms) VALUES ` + valueRows(n, "(?, ?)")
}

func qInsertFTS(n int) string {
	return `INSERT INTO search_fts (rowid, terms) VALUES ` + valueRows(n, "(?, ?)")
}

func init() {
	for n := 1; n <= sendqueue.DefaultMaxBatch; n++ {
		hotWrites = append(hotWrites, qInsertDocs(n), qInsertQueue(n))
	}
}

// searchFlushAt is how many queued rows the writer moves into search_fts
// at once: a search matches at most about that many rows by their terms.
const searchFlushAt = 512

// searchQueue is the writer's count of the rows of search_queue (touched
// in the writer's turn only) and the count at which it flushes them. A
// write that rolls back leaves the count off by its rows: the flush comes
// sooner, or up to a flush's worth later.
type searchQueue struct {
	n, flushAt int
}

// flushQueue moves every queued row into search_fts: one FTS5 segment.
func flushQueue(ctx context.Context, tx *txn, queue *searchQueue) error {
	for _, q := range []string{`INSERT INTO search_fts (rowid, terms) SELECT id, terms FROM search_queue ORDER BY id`,
		`DELETE FROM search_queue`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	queue.n = 0
	return nil
}

// searchDoc is one index row to write: version vseq of message seq of
// conv (vseq = seq for the original), at its message's time.
type searchDoc struct {
	conv      string
	seq, vseq int64
	sender    string
	at        int64
	terms     string
}

// indexDocs writes the index rows of docs, each under the next free slot
// of its millisecond, in three statements: the slots in use, the docs
// rows, their terms: into queue (then its flush, when due), or, queue
// nil, into search_fts (the transaction's last write to it: qInsertFTS).
func indexDocs(ctx context.Context, tx *txn, docs []searchDoc, queue *searchQueue) error {
	if len(docs) == 0 {
		return nil
	}
	next := map[int64]int64{}
	var ms []int64
	for _, d := range docs {
		if _, seen := next[d.at]; !seen {
			next[d.at] = 0
			ms = append(ms, d.at)
		}
	}
	msList, err := json.Marshal(ms)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, qDocSlots, string(msList))
	if err != nil {
		return err
	}
	for rows.Next() {
		var at, top int64
		if err := rows.Scan(&at, &top); err != nil {
			rows.Close()
			return err
		}
		next[at] = max(top+1, docID(at))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	ids := make([]int64, len(docs))
	for i, d := range docs {
		if ids[i] = next[d.at]; ids[i] == 0 || ids[i] >= docID(d.at+1) {
			return fmt.Errorf("search index: no free slot in millisecond %d", d.at)
		}
		next[d.at]++
	}
	// In id order: FTS5 writes out what it holds whenever a row's id is
	// below the last one's (a rebuild meets an edit after later messages).
	order := make([]int, len(docs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
	docArgs := make([]any, 0, 6*len(docs))
	termArgs := make([]any, 0, 2*len(docs))
	for _, i := range order {
		d := docs[i]
		docArgs = append(docArgs, ids[i], d.conv, d.seq, d.vseq, d.sender, d.at)
		termArgs = append(termArgs, ids[i], d.terms)
	}
	if _, err := tx.ExecContext(ctx, qInsertDocs(len(docs)), docArgs...); err != nil {
		return err
	}
	terms := qInsertFTS
	if queue != nil {
		terms = qInsertQueue
	}
	if _, err := tx.ExecContext(ctx, terms(len(docs)), termArgs...); err != nil {
		return err
	}
	if queue == nil {
		return nil
	}
	if queue.n += len(docs); queue.n < queue.flushAt {
		return nil
	}
	return flushQueue(ctx, tx, queue)
}

// qUnindexRows reads up to ?4 index rows of the messages of conversation
// ?1 with ?2 <= seq <= ?3 (found from each message's event: its rows lie
// in the millisecond of its time), each with its message's seq, whether
// its terms are queued, and what they were made of: its sender and the
// body of its version's event (none: the event is gone).
const qUnindexRows = `SELECT d.id, m.seq, q.id IS NOT NULL, d.sender_user, e.seq IS NOT NULL, coalesce(e.body, '')
	FROM events m CROSS JOIN search_docs d ON d.id >= m.created_at << 20 AND d.id < (m.created_at + 1) << 20
		AND d.conv_id = m.conv_id AND d.seq = m.seq
	LEFT JOIN search_queue q ON q.id = d.id LEFT JOIN events e ON e.conv_id = d.conv_id AND e.seq = d.vseq
	WHERE m.conv_id = ?1 AND m.seq >= ?2 AND m.seq <= ?3 AND m.kind = 'message' ORDER BY m.seq, d.vseq LIMIT ?4`

// unindexChunk is how many index rows unindex deletes per statement.
const unindexChunk = 500

// unindex deletes the index rows of the messages of conv with from <= seq
// <= to, every version, before their events leave the log (recall keeps
// them; purge and rollback call it first). Each FTS5 row is deleted by the
// 'delete' command with the terms it was written with, computed again from
// its event, so secure-delete takes its tokens out of the index's pages;
// the docs rows and queued terms go first (FTS5's writes come last:
// qInsertFTS). A row whose event is already gone (an index out of step
// with its log) loses its docs row only, and its id goes into search_lost:
// its FTS5 entries stay, and no later row may take that id and match them.
func unindex(ctx context.Context, tx *txn, convID string, from, to int64) error {
	for {
		var ids, queued, lost []int64
		var ftsArgs []any
		rows, err := tx.QueryContext(ctx, qUnindexRows, convID, from, to, unindexChunk)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var sender, body string
			var isQueued, hasEvent bool
			// The next chunk starts at the last message read: its rows
			// read are deleted by then, and those left come next.
			if err := rows.Scan(&id, &from, &isQueued, &sender, &hasEvent, &body); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			switch {
			case isQueued:
				queued = append(queued, id)
			case hasEvent:
				ftsArgs = append(ftsArgs, id, searchTerms(convID, sender, body))
			default:
				lost = append(lost, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := dropRows(ctx, tx, ids, queued, lost); err != nil {
			return err
		}
		if len(ftsArgs) > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO search_fts (search_fts, rowid, terms) VALUES `+
				valueRows(len(ftsArgs)/2, "('delete', ?, ?)"), ftsArgs...); err != nil {
				return err
			}
		}
		if len(ids) < unindexChunk {
			return nil
		}
	}
}

// dropRows deletes the docs rows ids, the queued terms of queued (some of
// ids) and keeps lost (some of ids, in FTS5 with terms nothing names any
// more) from being given again.
func dropRows(ctx context.Context, tx *txn, ids, queued, lost []int64) error {
	for _, st := range []struct {
		q   string
		ids []int64
	}{
		{`DELETE FROM search_docs WHERE id IN (SELECT value FROM json_each(?))`, ids},
		{`DELETE FROM search_queue WHERE id IN (SELECT value FROM json_each(?))`, queued},
		{`INSERT OR IGNORE INTO search_lost (id) SELECT value FROM json_each(?)`, lost},
	} {
		if len(st.ids) == 0 {
			continue
		}
		list, err := json.Marshal(st.ids)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, st.q, string(list)); err != nil {
			return err
		}
	}
	return nil
}

// qOrphanRows reads the index rows of conversation ?1 (empty: of every
// one) that unindex cannot find from the log, as no message event at
// their seq and time names them (an index out of step with its log), each
// with whether its terms are queued.
const qOrphanRows = `SELECT d.id, q.id IS NOT NULL FROM search_docs d LEFT JOIN search_queue q ON q.id = d.id
	WHERE (?1 = '' OR d.conv_id = ?1) AND NOT EXISTS (SELECT 1 FROM events m
		WHERE m.conv_id = d.conv_id AND m.seq = d.seq AND m.kind = 'message' AND m.created_at = d.at)`

// sweepOrphans deletes the rows of qOrphanRows, before a rebuild of conv
// (empty: of every conversation) writes its rows again.
func sweepOrphans(ctx context.Context, tx *txn, conv string) error {
	rows, err := tx.QueryContext(ctx, qOrphanRows, conv)
	if err != nil {
		return err
	}
	var ids, queued, lost []int64
	for rows.Next() {
		var id int64
		var isQueued bool
		if err := rows.Scan(&id, &isQueued); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
		if isQueued {
			queued = append(queued, id)
		} else {
			lost = append(lost, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return dropRows(ctx, tx, ids, queued, lost)
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
		if err := indexDocs(ctx, tx, docs, nil); err != nil {
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
		d := searchDoc{conv: convID}
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
	if err := db.write(ctx, "rebuild search", func(tx *txn) error { return sweepOrphans(ctx, tx, convID) }); err != nil {
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
// expression when it narrows by them (walkBound): beyond it the per-row
// filter alone narrows (an OR of thousands of terms costs more than it
// saves).
const maxConvTokens = 64

// walkBound is how many rows a search over several conversations walks
// with its terms alone before it narrows the FTS5 expression to the
// caller's conversations: a word common elsewhere and rare in theirs
// would otherwise walk every row of it. Without the group, FTS5 walks a
// word's rows at a small fraction of the cost of the 50-way OR.
const walkBound = 2000

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

// ftsMatch renders q as an FTS5 expression: every term, then one of the
// conversations convs (all when narrow is set, which wants at most
// maxConvTokens of them), then the sender. It is never empty: ParseSearch
// refuses a query with neither terms nor filters, and convs is not empty.
func ftsMatch(q parley.SearchQuery, convs []string, narrow bool) string {
	var parts []string
	for _, t := range q.Terms {
		parts = append(parts, ftsPhrase(t.Tokens, t.Prefix))
	}
	if narrow {
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

// hitCase is 1 when index row d is a hit for the search, else 0: in
// conversation ?4 (empty: any), sent by ?5 (empty: anyone), strictly after
// the cursor (?6, ?7, ?8) in the order of results (?6 NULL: the first
// page), that user ?9 reads: the message's seq and the version's inside
// their periods, and no newer version of the same message inside them
// (its versions' rows lie in the millisecond of its time). The CASE tests
// them one after another, the cheap ones first.
var hitCase = `CASE
		WHEN ?4 <> '' AND d.conv_id <> ?4 THEN 0
		WHEN ?5 <> '' AND d.sender_user <> ?5 THEN 0
		WHEN ?6 IS NOT NULL AND (d.at, d.conv_id, d.seq) >= (?6, ?7, ?8) THEN 0
		WHEN NOT ` + docIn("d", "d.seq") + ` THEN 0
		WHEN NOT ` + docIn("d", "d.vseq") + ` THEN 0
		WHEN EXISTS (SELECT 1 FROM search_docs n WHERE n.id >= d.at << 20 AND n.id < (d.at + 1) << 20
			AND n.conv_id = d.conv_id AND n.seq = d.seq AND n.vseq > d.vseq AND ` + docIn("n", "n.vseq") + `) THEN 0
		ELSE 1 END`

// docIn is the rule-2 filter on an index row: seq (a column of row
// alias) inside the periods of user ?9 in the row's conversation.
func docIn(alias, seq string) string {
	return `EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = ` + alias + `.conv_id AND p.user_id = ?9
		AND p.from_seq <= ` + seq + ` AND (p.to_seq IS NULL OR ` + seq + ` <= p.to_seq))`
}

// searchSQL walks the index rows whose tokens match ?1 with ?2 <= id < ?3,
// newest first (FTS5 yields them in rowid order, each then read by its
// rowid: CROSS JOIN keeps that order), each with whether it is a hit
// (hitCase). The caller reads as many rows as it needs (walker.walk).
var searchSQL = `SELECT search_fts.rowid, d.conv_id, d.seq, d.at, ` + hitCase + `
	FROM search_fts CROSS JOIN search_docs d ON d.id = search_fts.rowid
	WHERE search_fts MATCH ?1 AND search_fts.rowid >= ?2 AND search_fts.rowid < ?3
	ORDER BY search_fts.rowid DESC`

// queuedSQL reads the hits among the queued rows ?1 (a JSON array of ids)
// with ?2 <= id < ?3 (hitCase).
var queuedSQL = `SELECT d.conv_id, d.seq, d.at FROM search_docs d
	WHERE d.id IN (SELECT value FROM json_each(?1)) AND d.id >= ?2 AND d.id < ?3 AND ` + hitCase + ` = 1`

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
	w := walker{tx: tx, q: q, user: user, hi: math.MaxInt64}
	if !q.Before.IsZero() {
		w.hi = docID(q.Before.UnixMilli())
	}
	if q.After != nil {
		w.hi = min(w.hi, docID(q.After.At+1))
	}
	hits, err := searchPage(ctx, &w, convs)
	if err != nil {
		return nil, err
	}
	refs := make([]ref, len(hits))
	for i, h := range hits {
		refs[i] = h.ref
	}
	return readHits(ctx, tx, user, refs, periods)
}

// searchPage returns the first q.Limit+1 hits in the order of results
// (time, then conversation and seq, all descending). FTS5 yields them by
// id: by time, and in the order they were written within a millisecond.
// So it walks until a page is full, drops the hits of the page's last
// millisecond, reads every hit of that millisecond, adds every queued hit
// and sorts the lot: every millisecond kept is then whole, and sorted as
// the results are.
func searchPage(ctx context.Context, w *walker, convs []string) ([]hit, error) {
	want := w.q.Limit + 1
	narrow := len(convs) == 1 // one conversation's token bounds the walk at once
	hits, walked, last, err := w.walk(ctx, ftsMatch(w.q, convs, narrow), 0, w.hi, want, walkBound)
	if err != nil {
		return nil, err
	}
	if len(hits) < want && walked == walkBound {
		// Cut short: narrow to the caller's conversations from there on,
		// when they are few enough to name, else walk on as we were.
		more, _, _, err := w.walk(ctx, ftsMatch(w.q, convs, len(convs) <= maxConvTokens), 0, last, want-len(hits), 0)
		if err != nil {
			return nil, err
		}
		hits = append(hits, more...)
	}
	if len(hits) == want {
		m := hits[want-1].at
		for len(hits) > 0 && hits[len(hits)-1].at == m {
			hits = hits[:len(hits)-1]
		}
		whole, _, _, err := w.walk(ctx, ftsMatch(w.q, convs, narrow), docID(m), min(w.hi, docID(m+1)), 0, 0)
		if err != nil {
			return nil, err
		}
		hits = append(hits, whole...)
	}
	queued, err := w.queued(ctx)
	if err != nil {
		return nil, err
	}
	hits = append(hits, queued...)
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(cmp.Compare(b.at, a.at), cmp.Compare(b.conv, a.conv), cmp.Compare(b.seq, a.seq))
	})
	return hits[:min(len(hits), want)], nil
}

// hit is a message found, at its time.
type hit struct {
	ref
	at int64
}

// walker runs searchSQL for one search by user: q's filters, below id hi.
type walker struct {
	tx   *txn
	q    parley.SearchQuery
	user string
	hi   int64
}

// walk reads the rows matching match with lo <= id < hi, newest first,
// until it has want hits (0: every one) or has read bound rows (0: no
// bound); it returns the hits, the rows read and the id of the last.
func (w *walker) walk(ctx context.Context, match string, lo, hi int64, want, bound int) (hits []hit, walked int, last int64, err error) {
	args := w.args()
	args[0], args[1], args[2] = match, lo, hi
	rows, err := w.tx.QueryContext(ctx, searchSQL, args...)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	for (want == 0 || len(hits) < want) && (bound == 0 || walked < bound) && rows.Next() {
		var h hit
		var ok bool
		if err := rows.Scan(&last, &h.conv, &h.seq, &h.at, &ok); err != nil {
			return nil, 0, 0, err
		}
		walked++
		if ok {
			hits = append(hits, h)
		}
	}
	return hits, walked, last, rows.Err()
}

// queued returns the hits among the queued rows below w.hi: those whose
// terms match (queuedMatch), then filtered by hitCase.
func (w *walker) queued(ctx context.Context) ([]hit, error) {
	rows, err := w.tx.QueryContext(ctx, `SELECT id, terms FROM search_queue WHERE id < ?`, w.hi)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var terms string
		if err := rows.Scan(&id, &terms); err != nil {
			rows.Close()
			return nil, err
		}
		if queuedMatch(w.q, terms) {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return nil, err
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	args := w.args()
	args[0], args[1], args[2] = string(list), 0, w.hi
	rows, err = w.tx.QueryContext(ctx, queuedSQL, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hits []hit
	for rows.Next() {
		var h hit
		if err := rows.Scan(&h.conv, &h.seq, &h.at); err != nil {
			return nil, err
		}
		hits = append(hits, h)
	}
	return hits, rows.Err()
}

// args are the arguments of searchSQL and queuedSQL, ?1 to ?3 left to set.
func (w *walker) args() []any {
	var afterAt any
	var afterConv string
	var afterSeq int64
	if a := w.q.After; a != nil {
		afterAt, afterConv, afterSeq = a.At, a.Conv, a.Seq
	}
	return []any{nil, nil, nil, w.q.Conv, w.q.From, afterAt, afterConv, afterSeq, w.user}
}

// queuedMatch reports whether a queued row's terms (SearchDocTokens joined
// by spaces) match q as its FTS5 expression would (ftsMatch): each term's
// tokens next to each other in order, the last a prefix when the term is
// one; and q.From's sender token. q.Conv and the caller's conversations
// are hitCase's to check.
func queuedMatch(q parley.SearchQuery, terms string) bool {
	toks := strings.Split(terms, " ")
	for _, t := range q.Terms {
		if !hasPhrase(toks, t) {
			return false
		}
	}
	return q.From == "" || slices.Contains(toks, parley.SenderToken(q.From))
}

// hasPhrase reports whether t's tokens occur in toks next to each other.
func hasPhrase(toks []string, t parley.SearchTerm) bool {
	n := len(t.Tokens)
	for i := 0; i+n <= len(toks); i++ {
		k := 0
		for ; k < n; k++ {
			got, want := toks[i+k], t.Tokens[k]
			if got != want && !(k == n-1 && t.Prefix && strings.HasPrefix(got, want)) {
				break
			}
		}
		if k == n {
			return true
		}
	}
	return false
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
