package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// keyLookup is the request-key step of Send and Recall: a replay returns the
// original seq and mid; the same key with another fingerprint is
// IDEMPOTENCY_MISMATCH; a purged original is ORIGINAL_EXPIRED. found is
// false for a new request.
func keyLookup(ctx context.Context, tx *txn, convID, user, cmid string, kind parley.EventKind, hash []byte) (seq int64, mid string, found bool, err error) {
	var stored []byte
	var storedKind string
	err = tx.QueryRowContext(ctx, qKeyLookup, convID, user, cmid).Scan(&seq, &mid, &storedKind, &stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, err
	}
	if err == nil {
		if err := parley.CheckReplay(parley.EventKind(storedKind), stored, kind, hash); err != nil {
			return 0, "", false, err
		}
		return seq, mid, true, nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, qTombstone, convID, user, cmid).Scan(&n); err != nil {
		return 0, "", false, err
	}
	if n > 0 {
		return 0, "", false, parley.ErrOriginalExpired
	}
	return 0, "", false, nil
}

// keyedStart is the start of Send and Recall, in the contract's order: lock
// the conversation (none: NOT_MEMBER) → request key (a replay: found) →
// tombstone → open period (NOT_MEMBER).
func keyedStart(ctx context.Context, tx *txn, convID, user, cmid string, kind parley.EventKind, hash []byte) (c conv, seq int64, mid string, found bool, err error) {
	if c, err = loadConv(ctx, tx, convID, parley.ErrNotMember); err != nil {
		return c, 0, "", false, err
	}
	if seq, mid, found, err = keyLookup(ctx, tx, convID, user, cmid, kind, hash); err != nil || found {
		return c, seq, mid, found, err
	}
	in, err := isOpenMember(ctx, tx, convID, user)
	if err == nil && !in {
		err = parley.ErrNotMember
	}
	return c, 0, "", false, err
}

// keyed runs a keyed write (Send, Recall) and retries it once when a
// concurrent insert of the same key won the race: the retry finds that row
// and answers with the dup reply.
func (db *DB) keyed(ctx context.Context, op string, fn func(tx *txn) error) error {
	err := db.write(ctx, op, fn)
	if errors.Is(err, errDupKey) {
		err = db.write(ctx, op, fn)
	}
	return err
}

// Send implements parley.Store. Concurrent sends, to any conversations,
// are batched (sendqueue.Queue) into one write transaction: SQLite has one
// writer, and a batch pays for one commit.
// A bad request is refused by SendBatch, item by item, without changing
// what the other items of its batch get.
func (db *DB) Send(ctx context.Context, p parley.Principal, r parley.SendRequest) (parley.Sent, error) {
	return db.sends.Send(ctx, p, r)
}

// itemOutcome reports whether err is a send's own answer (it changes
// nothing and leaves the batch going) rather than a failure of the batch.
func itemOutcome(err error) bool {
	switch parley.ErrorCode(err) {
	case parley.CodeNotMember, parley.CodeIdempotencyMismatch, parley.CodeOriginalExpired,
		parley.CodeNotFound, parley.CodeAlreadyRecalled: // a reply's target
		return true
	}
	return false
}

// SendBatch implements parley.SendBatcher: every valid item, of whatever
// conversation, in one write transaction. The fault points are the
// batch's: store.before_insert before the transaction, store.before_commit
// after its last insert.
func (db *DB) SendBatch(ctx context.Context, items []parley.BatchSend) []parley.BatchResult {
	out := make([]parley.BatchResult, len(items))
	hashes := make([][]byte, len(items))
	terms := make([]string, len(items))
	valid := 0
	for i, it := range items {
		if out[i].Err = parley.ValidateSend(it.Req); out[i].Err == nil {
			hashes[i] = parley.SendFingerprint(it.Req)
			terms[i] = searchTerms(it.Req.Conv, it.P.User, it.Req.Body)
			valid++
		}
	}
	if valid == 0 {
		return out
	}
	res := make([]parley.BatchResult, len(items))
	write := func(tx *txn) error {
		var docs []searchDoc
		for i, it := range items {
			if hashes[i] == nil {
				continue
			}
			res[i] = parley.BatchResult{}
			s, err := sendOne(ctx, tx, it.P, it.Req, hashes[i])
			if err != nil && !itemOutcome(err) {
				return err
			}
			res[i] = parley.BatchResult{Sent: s, Err: err}
			if err == nil && !s.Dup {
				docs = append(docs, searchDoc{conv: s.Conv, seq: s.Seq, vseq: s.Seq, sender: it.P.User, at: s.At.UnixMilli(), terms: terms[i]})
			}
		}
		if len(docs) == 0 {
			return nil
		}
		// The batch's index rows, in one go after its events (indexDocs).
		if err := indexDocs(ctx, tx, docs, &db.queue); err != nil {
			return err
		}
		return fault.Hit(fault.StoreBeforeCommit)
	}
	err := fault.Hit(fault.StoreBeforeInsert)
	if err == nil {
		err = db.keyed(ctx, "send", write)
	}
	for i := range items {
		switch {
		case hashes[i] == nil:
		case err != nil:
			out[i].Err = err
		default:
			out[i] = res[i]
		}
	}
	return out
}

// sendOne is one send inside a write transaction, in the contract's order,
// with the links of its attachments (appendEvent); its caller writes its
// search index row (SendBatch). Every refusal comes before the first
// write, so a refused item of a batch leaves the transaction as it found
// it.
func sendOne(ctx context.Context, tx *txn, p parley.Principal, r parley.SendRequest, hash []byte) (parley.Sent, error) {
	c, seq, mid, found, err := keyedStart(ctx, tx, r.Conv, p.User, r.CMID, parley.EventMessage, hash)
	if err != nil {
		return parley.Sent{}, err
	}
	if found {
		return parley.Sent{Conv: r.Conv, Seq: seq, MID: mid, Dup: true, Epoch: c.epoch}, nil
	}
	ev := parley.Event{Kind: parley.EventMessage, Sender: p.User, Device: p.DeviceID, Body: r.Body}
	if r.ReplyTo != 0 {
		t, err := messageTarget(ctx, tx, r.Conv, r.ReplyTo, p.User)
		if err != nil {
			return parley.Sent{}, err
		}
		if err := t.Check(r.ReplyTo); err != nil {
			return parley.Sent{}, err
		}
		ev.ReplyTo = t.Root(r.ReplyTo)
	}
	if ev.Attachments, err = attachable(ctx, tx, p.User, r.Attachments); err != nil {
		return parley.Sent{}, err
	}
	if ev.Mentions, err = mentioned(ctx, tx, r.Conv, r.Body, p.User, r.AllMax, nil); err != nil {
		return parley.Sent{}, err
	}
	if err := appendEvent(ctx, tx, &c, &ev, r.CMID, hash); err != nil {
		return parley.Sent{}, err
	}
	return parley.Sent{Conv: r.Conv, Seq: ev.Seq, MID: ev.MID, Epoch: c.epoch, At: ev.At}, nil
}

// Recall implements parley.Store.
func (db *DB) Recall(ctx context.Context, p parley.Principal, r parley.RecallRequest) (parley.Recalled, error) {
	if err := parley.ValidateRecall(r); err != nil {
		return parley.Recalled{}, err
	}
	hash := parley.RecallFingerprint(r.Conv, r.Target)
	if err := fault.Hit(fault.StoreBeforeInsert); err != nil {
		return parley.Recalled{}, err
	}
	var out parley.Recalled
	err := db.keyed(ctx, "recall", func(tx *txn) error {
		c, seq, _, found, err := keyedStart(ctx, tx, r.Conv, p.User, r.CMID, parley.EventRecall, hash)
		if err != nil {
			return err
		}
		if found {
			out = parley.Recalled{Conv: r.Conv, Seq: seq, Dup: true}
			return nil
		}
		var t parley.RecallTarget
		err = tx.QueryRowContext(ctx, `SELECT kind, sender_user, recall_seq IS NOT NULL, `+nowMS+` > created_at + ?
			FROM events WHERE conv_id = ? AND seq = ?`, db.opts.RecallWindow.Milliseconds(), r.Conv, r.Target).
			Scan(&t.Kind, &t.Sender, &t.Recalled, &t.Expired)
		if t.Found = err == nil; err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := t.Check(p.User, r.Target, db.opts.RecallWindow); err != nil {
			return err
		}
		ev := parley.Event{Kind: parley.EventRecall, Sender: p.User, Device: p.DeviceID, Target: r.Target}
		if err := appendEvent(ctx, tx, &c, &ev, r.CMID, hash); err != nil {
			return err
		}
		// The target and every edit of it: no version of the text is served
		// or found again.
		if _, err := tx.ExecContext(ctx, `UPDATE events SET recall_seq = ?1
			WHERE conv_id = ?2 AND (seq = ?3 OR (kind = 'edit' AND target = ?3))`, ev.Seq, r.Conv, r.Target); err != nil {
			return err
		}
		if err := unindex(ctx, tx, r.Conv, r.Target, r.Target); err != nil {
			return err
		}
		// Nobody but their owners reads the files it attached.
		if _, err := tx.ExecContext(ctx, qUnlinkMessage, r.Conv, r.Target); err != nil {
			return err
		}
		if err := fault.Hit(fault.StoreBeforeCommit); err != nil {
			return err
		}
		out = parley.Recalled{Conv: r.Conv, Seq: ev.Seq}
		return nil
	})
	return out, err
}

const eventColumns = `conv_id, seq, mid, kind, sender_user, sender_device, body, COALESCE(target, 0),
	COALESCE(subject_user, ''), recall_seq IS NOT NULL, created_at,
	COALESCE(reply_to, 0), COALESCE(mentions, ''), COALESCE(emoji, ''), COALESCE(react_on, 0), COALESCE(attachments, '')`

type scanner interface{ Scan(dest ...any) error }

// scanEvent reads a row of eventColumns. A recalled message reads with
// no body and no attachments.
func scanEvent(s scanner) (parley.Event, error) {
	var ev parley.Event
	var kind string
	var at int64
	var mentions, files string
	err := s.Scan(&ev.Conv, &ev.Seq, &ev.MID, &kind, &ev.Sender, &ev.Device, &ev.Body, &ev.Target, &ev.User, &ev.Recalled, &at,
		&ev.ReplyTo, &mentions, &ev.Emoji, &ev.On, &files)
	if err != nil {
		return ev, err
	}
	ev.Kind = parley.EventKind(kind)
	ev.At = msTime(at)
	ev.Mentions = parley.SplitMentions(mentions)
	if ev.Recalled {
		ev.Body, files = "", ""
	}
	ev.Attachments, err = parley.DecodeAttachments(files)
	return ev, err
}

// eventsIn appends to evs the events with from <= seq <= to, ascending, at
// most limit of them, over the primary key.
func eventsIn(ctx context.Context, tx *txn, evs []parley.Event, convID string, from, to int64, limit int) ([]parley.Event, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM events
		WHERE conv_id = ? AND seq >= ? AND seq <= ? ORDER BY seq LIMIT ?`, convID, from, to, limit)
	if err != nil {
		return evs, err
	}
	defer rows.Close()
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// Sync implements parley.Store.
func (db *DB) Sync(ctx context.Context, p parley.Principal, r parley.SyncRequest) (parley.Page, error) {
	r, err := parley.ValidateSync(r)
	if err != nil {
		return parley.Page{}, err
	}
	var page parley.Page
	err = db.read(ctx, "sync", func(tx *txn) error {
		c, ps, err := memberView(ctx, tx, r.Conv, p.User)
		if err != nil {
			return err
		}
		if r.Epoch != 0 && r.Epoch != c.epoch {
			return parley.ErrEpochChanged(c.epoch, r.Epoch)
		}
		head := ps.Head(c.head())
		if r.After > head {
			return parley.ErrCursorAhead(head)
		}
		// A former member learns nothing above their capped head, not even
		// that a purge went past it (a no-op for members: min_seq <= head+1).
		minSeq := min(c.min, head+1)
		page = parley.Page{Conv: r.Conv, Head: head, MinSeq: minSeq, Trimmed: r.After < minSeq-1, Epoch: c.epoch}
		if r.Thread != 0 {
			if err := checkThread(ctx, tx, r.Conv, p.User, r.Thread, head); err != nil {
				return err
			}
		}
		// One more than a page tells whether more remains.
		var evs []parley.Event
		for _, rg := range ps.Ranges(r.After, head) {
			if r.Thread != 0 {
				evs, err = threadIn(ctx, tx, evs, r.Conv, r.Thread, rg[0], rg[1], r.Limit+1-len(evs))
			} else {
				evs, err = eventsIn(ctx, tx, evs, r.Conv, rg[0], rg[1], r.Limit+1-len(evs))
			}
			if err != nil {
				return err
			}
			if len(evs) > r.Limit {
				break
			}
		}
		if len(evs) > r.Limit {
			evs, page.HasMore = evs[:r.Limit], true
		}
		if err := decorate(ctx, tx, evs, r.Conv, p.User, head); err != nil {
			return err
		}
		page.Events = evs
		page.NextAfter = head
		if len(evs) > 0 {
			page.NextAfter = evs[len(evs)-1].Seq
		}
		return nil
	})
	return page, err
}

// Fetch implements parley.Store.
func (db *DB) Fetch(ctx context.Context, p parley.Principal, convID string, seq int64) (parley.Event, error) {
	if err := parley.CheckConvID(convID); err != nil {
		return parley.Event{}, err
	}
	if err := parley.CheckFetchSeq(seq); err != nil {
		return parley.Event{}, err
	}
	var ev parley.Event
	err := db.read(ctx, "fetch", func(tx *txn) error {
		c, ps, err := memberView(ctx, tx, convID, p.User)
		if err != nil {
			return err
		}
		if seq > ps.Head(c.head()) {
			return parley.ErrNoEvent
		}
		if !ps.Visible(seq) {
			return parley.ErrNotMember
		}
		ev, err = scanEvent(tx.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM events WHERE conv_id = ? AND seq = ?`, convID, seq))
		if errors.Is(err, sql.ErrNoRows) {
			return parley.ErrNoEvent
		}
		if err != nil {
			return err
		}
		evs := []parley.Event{ev}
		err = decorate(ctx, tx, evs, convID, p.User, ps.Head(c.head()))
		ev = evs[0]
		return err
	})
	return ev, err
}

// cursor moves a forward-only cursor: table is delivered_cursors (per
// device) or read_cursors (per user).
func (db *DB) cursor(ctx context.Context, op string, p parley.Principal, convID string, seq int64, upsert string, args ...any) (int64, error) {
	if err := parley.CheckConvID(convID); err != nil {
		return 0, err
	}
	if err := parley.CheckSeq("seq", seq); err != nil {
		return 0, err
	}
	var cur int64
	err := db.write(ctx, op, func(tx *txn) error {
		if err := checkInstall(ctx, tx, p); err != nil {
			return err
		}
		c, ps, err := memberView(ctx, tx, convID, p.User)
		if err != nil {
			return err
		}
		if head := ps.Head(c.head()); seq > head {
			return parley.ErrCursorAhead(head)
		}
		return tx.QueryRowContext(ctx, upsert, append(args, seq)...).Scan(&cur)
	})
	return cur, err
}

// Ack implements parley.Store.
func (db *DB) Ack(ctx context.Context, p parley.Principal, convID string, seq int64) (int64, error) {
	return db.cursor(ctx, "ack", p, convID, seq, `INSERT INTO delivered_cursors (user_id, device_id, conv_id, seq) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id, device_id, conv_id) DO UPDATE SET seq = max(seq, excluded.seq) RETURNING seq`,
		p.User, p.DeviceID, convID)
}

// Read implements parley.Store.
func (db *DB) Read(ctx context.Context, p parley.Principal, convID string, seq int64) (int64, error) {
	return db.cursor(ctx, "read", p, convID, seq, `INSERT INTO read_cursors (user_id, conv_id, seq) VALUES (?, ?, ?)
		ON CONFLICT (user_id, conv_id) DO UPDATE SET seq = max(seq, excluded.seq) RETURNING seq`,
		p.User, convID)
}

// convsSQL is one page of Convs in one statement (one prepare, however many
// conversations), driven by periods_by_user: per conversation of user ?1,
// the head capped as Periods.Head caps it and the activity that orders the
// list (a member's is the conversation's latest event, last_at; a former
// member's the time of the event at their capped head); the page is the ?6
// rows after the cursor (?4 empty for the first page, else the cursor's
// conversation id and ?5 its activity). Only for the page's rows: device
// ?2's delivered and the user's read cursor, unread counted over the
// visible ranges after read (one range scan of events_messages per period)
// and stopped at ?3 = UnreadCap+1 rows, the seq of the latest visible
// message (one backward index probe per period), and the mentions unread
// (a range scan of the user's mentions rows per period, each probing its
// event: CROSS JOIN keeps SQLite from walking the events instead).
const convsSQL = `WITH mine AS (
	SELECT conv_id, max(to_seq IS NULL) AS open, max(to_seq) AS last_to
	FROM periods WHERE user_id = ?1 GROUP BY conv_id
), v AS (
	SELECT c.id, c.title, c.kind, c.min_seq, c.epoch, c.last_at, c.created_at, m.open,
		CASE WHEN m.open THEN c.next_seq - 1 ELSE min(m.last_to, c.next_seq - 1) END AS head
	FROM mine m JOIN conversations c ON c.id = m.conv_id
), a AS (
	SELECT v.*, CASE WHEN v.open THEN v.last_at
		ELSE coalesce((SELECT created_at FROM events WHERE conv_id = v.id AND seq = v.head), v.created_at) END AS activity
	FROM v
), pg AS (
	SELECT a.*,
		coalesce((SELECT seq FROM read_cursors WHERE user_id = ?1 AND conv_id = a.id), 0) AS read,
		coalesce((SELECT seq FROM delivered_cursors WHERE user_id = ?1 AND device_id = ?2 AND conv_id = a.id), 0) AS delivered
	FROM a
	WHERE ?4 = '' OR a.activity < ?5 OR (a.activity = ?5 AND a.id > ?4)
	ORDER BY a.activity DESC, a.id LIMIT ?6
), w AS (
	SELECT v.*,
		(SELECT count(*) FROM (
			SELECT 1 FROM periods p JOIN events e
				ON e.conv_id = p.conv_id AND e.kind = 'message'
				AND e.seq > max(p.from_seq - 1, v.read) AND e.seq <= min(coalesce(p.to_seq, v.head), v.head)
			WHERE p.conv_id = v.id AND p.user_id = ?1 AND e.sender_user <> ?1 AND e.recall_seq IS NULL
			LIMIT ?3)) AS unread,
		(SELECT max(ls) FROM (
			SELECT (SELECT e.seq FROM events e
				WHERE e.conv_id = p.conv_id AND e.kind = 'message'
				AND e.seq >= p.from_seq AND e.seq <= min(coalesce(p.to_seq, v.head), v.head)
				ORDER BY e.seq DESC LIMIT 1) AS ls
			FROM periods p WHERE p.conv_id = v.id AND p.user_id = ?1)) AS last_seq,
		(SELECT count(*) FROM (
			SELECT 1 FROM periods p CROSS JOIN mentions m CROSS JOIN events e
			WHERE p.conv_id = v.id AND p.user_id = ?1
				AND m.conv_id = p.conv_id AND m.user_id = ?1
				AND m.seq > max(p.from_seq - 1, v.read) AND m.seq <= min(coalesce(p.to_seq, v.head), v.head)
				AND e.conv_id = m.conv_id AND e.seq = m.seq AND e.recall_seq IS NULL
			LIMIT ?3)) AS mentions_unread
	FROM pg v
)
SELECT w.id, w.title, w.kind, w.head, w.min_seq, w.epoch, w.open, w.delivered, w.read, w.unread,
	l.conv_id IS NOT NULL, coalesce(l.seq, 0), coalesce(l.mid, ''), coalesce(l.kind, ''), coalesce(l.sender_user, ''),
	coalesce(l.sender_device, ''), coalesce(l.body, ''), coalesce(l.target, 0), coalesce(l.subject_user, ''),
	l.recall_seq IS NOT NULL, coalesce(l.created_at, 0), w.activity, w.mentions_unread,
	coalesce(l.reply_to, 0), coalesce(l.mentions, ''), coalesce(l.attachments, '')
FROM w LEFT JOIN events l ON l.conv_id = w.id AND l.seq = w.last_seq
ORDER BY w.activity DESC, w.id`

// Convs implements parley.Store.
func (db *DB) Convs(ctx context.Context, p parley.Principal, r parley.ConvsRequest) (parley.ConvsPage, error) {
	r, cur, err := parley.ValidateConvs(r)
	if err != nil {
		return parley.ConvsPage{}, err
	}
	if cur == nil {
		cur = &parley.ConvsCursor{}
	}
	page := parley.ConvsPage{Convs: []parley.ConvSummary{}}
	var last parley.ConvsCursor
	err = db.read(ctx, "convs", func(tx *txn) error {
		page.Convs = page.Convs[:0]
		rows, err := tx.QueryContext(ctx, convsSQL, p.User, p.DeviceID, parley.UnreadCap+1, cur.Conv, cur.Activity, r.Limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s parley.ConvSummary
			var kind, evKind string
			var hasLast bool
			var ev parley.Event
			var at, activity int64
			var mentions, files string
			if err := rows.Scan(&s.Conv, &s.Title, &kind, &s.Head, &s.MinSeq, &s.Epoch, &s.Member, &s.Delivered, &s.Read, &s.Unread,
				&hasLast, &ev.Seq, &ev.MID, &evKind, &ev.Sender, &ev.Device, &ev.Body, &ev.Target, &ev.User, &ev.Recalled, &at, &activity,
				&s.MentionsUnread, &ev.ReplyTo, &mentions, &files); err != nil {
				return err
			}
			ev.Mentions = parley.SplitMentions(mentions)
			s.MentionsUnread = min(s.MentionsUnread, parley.UnreadCap)
			if len(page.Convs) == r.Limit {
				page.HasMore = true
				break
			}
			s.Kind = parley.ConvKind(kind)
			s.MinSeq = min(s.MinSeq, s.Head+1) // as in Sync: nothing above the capped head
			if s.Unread > parley.UnreadCap {
				s.Unread, s.UnreadCapped = parley.UnreadCap, true
			}
			if hasLast {
				ev.Conv, ev.Kind, ev.At = s.Conv, parley.EventKind(evKind), msTime(at)
				if ev.Recalled {
					ev.Body, files = "", ""
				}
				if ev.Attachments, err = parley.DecodeAttachments(files); err != nil {
					return err
				}
				s.Last = &ev
			}
			page.Convs = append(page.Convs, s)
			last = parley.ConvsCursor{Activity: activity, Conv: s.Conv}
		}
		return rows.Err()
	})
	if err != nil {
		return parley.ConvsPage{}, err
	}
	if page.HasMore {
		page.Next = last.String()
	}
	return page, nil
}
