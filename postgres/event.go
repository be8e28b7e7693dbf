package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/sendqueue"
)

// keyed retries a keyed append when the unique index events_idempotency
// fired: the row lock makes a concurrent insert of the same key impossible,
// but should the index still fire, the transaction has rolled back and a
// fresh one finds the committed original and answers with the dup reply.
func keyed[T any](op string, fn func() (T, error)) (T, error) {
	out, err := fn()
	for i := 0; i < 2 && isUnique(err, "events_idempotency"); i++ {
		out, err = fn()
	}
	return out, wrap(op, err)
}

// Send implements parley.Store: concurrent sends, to one conversation or
// several, are batched (sendqueue.Queue, laned by sendLane) into one call
// of parley_send_many, one round trip and one commit for the batch; a
// send that replies, attaches files or may mention commits in its own
// transaction (SendBatch).
// A bad request is refused by SendBatch, item by item, without changing
// what the other items of its batch get.
func (db *DB) Send(ctx context.Context, p parley.Principal, r parley.SendRequest) (parley.Sent, error) {
	return db.sends.Send(ctx, p, r)
}

// Outcomes of parley_send_many and parley_recall (migrations 0007, 0008).
const (
	outNew       = 0 // inserted
	outKey       = 1 // the request key exists: a replay or a mismatch
	outTombstone = 2 // ORIGINAL_EXPIRED
	outNoPeriod  = 3 // NOT_MEMBER
	outNoConv    = 4 // NOT_MEMBER
	outTarget    = 5 // a recall's target checks refused it
)

// sendCols are the columns of a parley_send_many row, NULLs as zero values;
// o_at in microseconds since 1970 (exact: timestamptz counts
// microseconds), which pgx scans into an int64 as it is, where a
// time.Time target costs two scan plans allocated for every statement.
const sendCols = `SELECT o_item, outcome, coalesce(o_seq, 0), coalesce(o_mid, ''), coalesce(o_kind, ''), o_hash,
	coalesce(o_epoch, 0), (extract(epoch FROM coalesce(o_at, 'epoch')) * 1000000)::bigint`

// sendSQL appends a batch, of one conversation or several, in one
// statement, its own transaction: the whole of Store.Send for every item,
// each new message's search row queued (migrations 0008, 0013, 0019).
const sendSQL = sendCols + ` FROM parley_send_many($1, $2, $3, $4, $5, $6, $7, $8)`

// sendOneSQL is sendSQL for a batch of one (the common, uncontended case):
// scalar parameters, so the driver encodes no arrays.
const sendOneSQL = sendCols + ` FROM parley_send_many(ARRAY[$1::text], ARRAY[$2::text], ARRAY[$3::text],
	ARRAY[$4::text], ARRAY[$5::bytea], ARRAY[$6::text], ARRAY[$7::text], ARRAY[$8::text])`

// sendRow is one item's row of parley_send_many; zero
// values stand for NULLs (seq 0: nothing found or inserted).
type sendRow struct {
	item    int32
	outcome int16
	seq     int64
	mid     string
	kind    string
	hash    []byte
	epoch   int64
	at      time.Time // inserted: the event's created_at
}

// result turns an item's row into what Send answers.
func (k sendRow) result(conv string, hash []byte) parley.BatchResult {
	switch k.outcome {
	case outNew, outKey:
		if k.seq == 0 || k.mid == "" || k.epoch == 0 {
			break
		}
		s := parley.Sent{Conv: conv, Seq: k.seq, MID: k.mid, Epoch: k.epoch}
		if k.outcome == outKey {
			if err := parley.CheckReplay(parley.EventKind(k.kind), k.hash, parley.EventMessage, hash); err != nil {
				return parley.BatchResult{Err: err}
			}
			s.Dup = true
		} else {
			s.At = ms(k.at) // as finish reads it back
		}
		return parley.BatchResult{Sent: s}
	case outTombstone:
		return parley.BatchResult{Err: parley.ErrOriginalExpired}
	case outNoPeriod, outNoConv:
		return parley.BatchResult{Err: parley.ErrNotMember}
	}
	return parley.BatchResult{Err: fmt.Errorf("postgres: send: outcome %d without a seq", k.outcome)}
}

// hasNUL reports whether s holds U+0000, which no text column takes: such an
// item is refused alone, before it could fail its batch's statement.
func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// SendBatch implements parley.SendBatcher: every valid plain item (no
// ReplyTo, no attachments, no '@' in its body), of whatever conversation,
// in one transaction (parley_send_many: one round trip). An item that
// replies, attaches files or may mention someone needs reads
// parley_send_many does not make: it
// commits in its own transaction (sendChat), with the same checks in the
// same order. Items are committed in item order, a run of plain items in
// one transaction between them.
func (db *DB) SendBatch(ctx context.Context, items []parley.BatchSend) []parley.BatchResult {
	out := make([]parley.BatchResult, len(items))
	idx := make([]int, 0, len(items))
	for i, it := range items {
		// ValidateSend also refuses a NUL, which no text column takes.
		if out[i].Err = parley.ValidateSend(it.Req); out[i].Err != nil {
			continue
		}
		if it.Req.ReplyTo == 0 && len(it.Req.Attachments) == 0 && !parley.HasMentionToken(it.Req.Body) {
			idx = append(idx, i)
			continue
		}
		if len(idx) > 0 {
			db.sendItems(ctx, items, idx, out)
			idx = idx[:0]
		}
		out[i].Sent, out[i].Err = db.sendChat(ctx, it.P, it.Req)
	}
	if len(idx) > 0 {
		db.sendItems(ctx, items, idx, out)
	}
	return out
}

// sendArgs are a batch's items as parley_send_many's arrays; tsvs are
// the items' tsvector literals (tsvectorLiteral), made before the
// statement so the row lock is not held while Go tokenizes.
type sendArgs struct {
	convs, users, devices, cmids, bodies, mids, tsvs textArray
	hashes                                           byteaArray
}

// textArray and byteaArray are parley_send_many's array parameters, text[]
// and bytea[]. pgx encodes a []string through pgtype.FlatArray, whose Index
// boxes every element into an interface (an allocation each), and a
// [][]byte by reflection; these hand it pointers into the array (no
// allocation) to elements that encode themselves.
type (
	textArray  []textElem
	textElem   string
	byteaArray []byteaElem
	byteaElem  []byte
)

var (
	_ pgtype.ArrayGetter = textArray(nil)
	_ pgtype.ArrayGetter = byteaArray(nil)
	_ pgtype.TextValuer  = (*textElem)(nil)
	_ pgtype.BytesValuer = (*byteaElem)(nil)
)

func (a textArray) Dimensions() []pgtype.ArrayDimension  { return dims(len(a)) }
func (a textArray) Index(i int) any                      { return &a[i] }
func (a textArray) IndexType() any                       { return (*textElem)(nil) }
func (a byteaArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a byteaArray) Index(i int) any                     { return &a[i] }
func (a byteaArray) IndexType() any                      { return (*byteaElem)(nil) }

// dims are the dimensions of a one-dimensional array of n elements: for a
// batch's sizes, shared ones made once (pgx only reads them), so the seven
// arrays of a statement allocate none.
func dims(n int) []pgtype.ArrayDimension {
	if n < len(batchDims) {
		return batchDims[n]
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

var batchDims = func() (d [sendqueue.DefaultMaxBatch + 1][]pgtype.ArrayDimension) {
	for n := range d {
		d[n] = []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
	}
	return d
}()

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// BytesValue never returns nil (which would be NULL): a fingerprint is 32
// bytes.
func (e *byteaElem) BytesValue() ([]byte, error) { return *e, nil }

// sendItems commits items[idx] in one transaction and fills their results.
func (db *DB) sendItems(ctx context.Context, items []parley.BatchSend, idx []int, out []parley.BatchResult) {
	n := len(idx)
	cols := make(textArray, 7*n) // one allocation for the seven text columns
	a := sendArgs{
		convs: cols[:n:n], users: cols[n : 2*n : 2*n], devices: cols[2*n : 3*n : 3*n],
		cmids: cols[3*n : 4*n : 4*n], bodies: cols[4*n : 5*n : 5*n], mids: cols[5*n : 6*n : 6*n],
		tsvs: cols[6*n:], hashes: make(byteaArray, n),
	}
	for j, i := range idx {
		it := items[i]
		a.convs[j], a.users[j], a.devices[j] = textElem(it.Req.Conv), textElem(it.P.User), textElem(it.P.DeviceID)
		a.cmids[j], a.bodies[j], a.mids[j] = textElem(it.Req.CMID), textElem(it.Req.Body), textElem(parley.NewID())
		a.hashes[j] = parley.Fingerprint(it.Req.Conv, it.Req.Body)
		a.tsvs[j] = textElem(docLiteral(it.Req.Conv, it.P.User, it.Req.Body))
	}
	var rows []sendRow
	err := fault.Hit(fault.StoreBeforeInsert)
	if err == nil {
		rows, err = keyed("send", func() ([]sendRow, error) {
			return withCommitPoint(ctx, db, func(q querier) ([]sendRow, error) { return sendQuery(ctx, q, a) }, insertedAny)
		})
	}
	queued := 0
	for j, i := range idx {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i] = rows[j].result(string(a.convs[j]), a.hashes[j])
		if rows[j].outcome == outNew {
			queued++
		}
	}
	db.queuedRows(ctx, queued)
}

// sendQuery runs parley_send_many on q for a's items and returns their
// rows, one per item in item order.
func sendQuery(ctx context.Context, q querier, a sendArgs) ([]sendRow, error) {
	n := len(a.convs)
	var rs pgx.Rows
	var err error
	if n == 1 {
		// Pointers into the arrays: a string or []byte in an interface
		// would be an allocation each.
		rs, err = q.Query(ctx, sendOneSQL, &a.convs[0], &a.users[0], &a.devices[0], &a.cmids[0], &a.hashes[0], &a.bodies[0], &a.mids[0], &a.tsvs[0])
	} else {
		rs, err = q.Query(ctx, sendSQL, &a.convs, &a.users, &a.devices, &a.cmids, &a.hashes, &a.bodies, &a.mids, &a.tsvs)
	}
	if err != nil {
		return nil, err
	}
	rows := make([]sendRow, 0, n)
	var k sendRow
	var atMicros int64
	_, err = pgx.ForEachRow(rs, []any{&k.item, &k.outcome, &k.seq, &k.mid, &k.kind, &k.hash, &k.epoch, &atMicros}, func() error {
		k.at = time.UnixMicro(atMicros)
		// One row per item, in item order: the index proves it.
		if int(k.item) != len(rows) || len(rows) == n {
			return fmt.Errorf("parley_send_many returned item %d as row %d of %d", k.item, len(rows), n)
		}
		rows = append(rows, k)
		return nil
	})
	if err == nil && len(rows) != n {
		err = fmt.Errorf("parley_send_many returned %d rows for %d items", len(rows), n)
	}
	return rows, err
}

// insertedAny reports whether a batch's statement inserted an event.
func insertedAny(rows []sendRow) bool {
	for _, k := range rows {
		if k.outcome == outNew {
			return true
		}
	}
	return false
}

// withCommitPoint runs stmt, the one statement of a send batch or a recall
// (its callers hit store.before_insert before it), as production runs it:
// on the pool, its own implicit transaction, committed as it returns. Only
// while a lab run has store.before_commit armed does the same statement
// run inside an explicit transaction instead, BEGIN before it and COMMIT
// after, so that the point acts once it returned having inserted
// (inserted) and before the commit, its writes uncommitted: a crash leaves
// them to the server's rollback when the connection drops, an error rolls
// them back (docs/protocol.md#fault-points-lab-only).
func withCommitPoint[T any](ctx context.Context, db *DB, stmt func(q querier) (T, error), inserted func(T) bool) (T, error) {
	if !fault.Armed(fault.StoreBeforeCommit) {
		return stmt(db.pool)
	}
	var out T
	err := inTx(ctx, db.pool, func(tx pgx.Tx) error {
		var err error
		if out, err = stmt(tx); err == nil && inserted(out) {
			err = fault.Hit(fault.StoreBeforeCommit)
		}
		return err
	})
	return out, err
}

// recallSQL is Recall in one statement, its own transaction (migration
// 0007).
const recallSQL = `SELECT outcome, coalesce(o_seq, 0), coalesce(o_mid, ''), coalesce(o_kind, ''), o_hash, coalesce(o_epoch, 0),
	t_kind, t_sender, t_recalled, t_expired
FROM parley_recall($1, $2, $3, $4, $5, $6, $7, $8)`

// recallRow is the row of parley_recall: the outcome, the request key's
// event, and the target (kind nil: no such event).
type recallRow struct {
	sendRow
	tKind, tSender      *string
	tRecalled, tExpired *bool
}

// Recall implements parley.Store in one round trip (parley_recall).
func (db *DB) Recall(ctx context.Context, p parley.Principal, r parley.RecallRequest) (parley.Recalled, error) {
	if err := parley.ValidateRecall(r); err != nil {
		return parley.Recalled{}, err
	}
	if hasNUL(r.CMID) {
		return parley.Recalled{}, errNUL
	}
	hash := parley.RecallFingerprint(r.Conv, r.Target)
	window := db.opts.RecallWindow
	if err := fault.Hit(fault.StoreBeforeInsert); err != nil {
		return parley.Recalled{}, err
	}
	return keyed("recall", func() (parley.Recalled, error) {
		k, err := withCommitPoint(ctx, db, func(q querier) (k recallRow, err error) {
			err = q.QueryRow(ctx, recallSQL, r.Conv, p.User, p.DeviceID, r.CMID, hash, parley.NewID(), r.Target, window.Microseconds()).
				Scan(&k.outcome, &k.seq, &k.mid, &k.kind, &k.hash, &k.epoch, &k.tKind, &k.tSender, &k.tRecalled, &k.tExpired)
			return k, err
		}, func(k recallRow) bool { return k.outcome == outNew })
		if err != nil {
			return parley.Recalled{}, err
		}
		return k.result(p.User, r, hash, window)
	})
}

// result turns parley_recall's row into what Recall answers.
func (k recallRow) result(user string, r parley.RecallRequest, hash []byte, window time.Duration) (parley.Recalled, error) {
	switch {
	case k.outcome == outTarget:
		var t parley.RecallTarget
		if t.Found = k.tKind != nil; t.Found {
			t.Kind, t.Sender = parley.EventKind(*k.tKind), *k.tSender
			t.Recalled, t.Expired = k.tRecalled != nil && *k.tRecalled, k.tExpired != nil && *k.tExpired
		}
		if err := t.Check(user, r.Target, window); err != nil {
			return parley.Recalled{}, err
		}
		return parley.Recalled{}, errors.New("parley_recall refused a target that passes the checks")
	case k.outcome == outKey && k.seq != 0:
		if err := parley.CheckReplay(parley.EventKind(k.kind), k.hash, parley.EventRecall, hash); err != nil {
			return parley.Recalled{}, err
		}
		return parley.Recalled{Conv: r.Conv, Seq: k.seq, Dup: true}, nil
	case k.outcome == outNew && k.seq != 0:
		return parley.Recalled{Conv: r.Conv, Seq: k.seq}, nil
	}
	res := k.sendRow.result(r.Conv, hash)
	if res.Err == nil {
		res.Err = fmt.Errorf("parley_recall: outcome %d", k.outcome)
	}
	return parley.Recalled{}, res.Err
}

// eventCols lists an event's columns for eventDest, with defaults for the
// NULLs of a LEFT JOIN that found nothing (seq 0).
func eventCols(a string) string {
	return fmt.Sprintf(`coalesce(%[1]s.seq, 0), coalesce(%[1]s.mid, ''), coalesce(%[1]s.kind, ''),
		coalesce(%[1]s.sender_user, ''), coalesce(%[1]s.sender_device, ''), coalesce(%[1]s.body, ''),
		coalesce(%[1]s.target, 0), coalesce(%[1]s.subject_user, ''), %[1]s.recall_seq IS NOT NULL,
		coalesce(%[1]s.created_at, 'epoch'),
		coalesce(%[1]s.reply_to, 0), %[1]s.mentions, coalesce(%[1]s.emoji, ''), coalesce(%[1]s.react_on, false),
		%[1]s.attachments`, a)
}

// eventDest returns the scan destinations of eventCols into ev.
func eventDest(ev *parley.Event) []any {
	return []any{&ev.Seq, &ev.MID, &ev.Kind, &ev.Sender, &ev.Device, &ev.Body, &ev.Target, &ev.User, &ev.Recalled, &ev.At,
		&ev.ReplyTo, mentionsDest{&ev.Mentions}, &ev.Emoji, &ev.On, attachmentsDest{&ev.Attachments}}
}

// mentionsDest scans the mentions column (user ids joined by single
// spaces) into a list: nil for NULL.
type mentionsDest struct{ p *[]string }

var _ pgtype.TextScanner = mentionsDest{}

func (d mentionsDest) ScanText(v pgtype.Text) error {
	*d.p = parley.SplitMentions(v.String) // "" when NULL: nil
	return nil
}

// attachmentsDest scans the attachments column (parley.EncodeAttachments'
// JSON) into a list: nil for NULL.
type attachmentsDest struct{ p *[]parley.Attachment }

var _ pgtype.TextScanner = attachmentsDest{}

func (d attachmentsDest) ScanText(v pgtype.Text) (err error) {
	*d.p, err = parley.DecodeAttachments(v.String) // "" when NULL: nil
	return err
}

// joinMentions is the mentions column of users (sorted): NULL for none.
func joinMentions(users []string) *string { return optString(parley.JoinMentions(users)) }

// finish completes a scanned event: a recalled message is served without
// its body and its attachments (the row keeps them for exports pinned
// before the recall).
func finish(ev *parley.Event, conv string) {
	ev.Conv = conv
	ev.At = ms(ev.At)
	if ev.Recalled {
		ev.Body, ev.Attachments = "", nil
	}
}

// periodCols reads user $2's periods in conversation $1, ordered, as two
// arrays (To 0 for the open one).
const periodCols = `ARRAY(SELECT from_seq FROM periods WHERE conv_id = $1 AND user_id = $2 ORDER BY from_seq),
	ARRAY(SELECT coalesce(to_seq, 0) FROM periods WHERE conv_id = $1 AND user_id = $2 ORDER BY from_seq)`

func toPeriods(from, to []int64) parley.Periods {
	ps := make(parley.Periods, len(from))
	for i := range from {
		ps[i] = parley.Period{From: from[i], To: to[i]}
	}
	return ps
}

// view is a reader's view of a conversation: the header and its periods.
type view struct {
	head, min, epoch int64
	ps               parley.Periods
}

// readView reads conversation conv and user's periods in one statement; no
// conversation or no period at all is NOT_MEMBER.
func (db *DB) readView(ctx context.Context, conv, user string) (view, error) {
	var v view
	var from, to []int64
	err := db.pool.QueryRow(ctx, `SELECT next_seq - 1, min_seq, epoch, `+periodCols+`
		FROM conversations WHERE id = $1`, conv, user).Scan(&v.head, &v.min, &v.epoch, &from, &to)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, parley.ErrNotMember
	}
	if err != nil {
		return v, err
	}
	if v.ps = toPeriods(from, to); len(v.ps) == 0 {
		return v, parley.ErrNotMember
	}
	return v, nil
}

// pageSQL reads at most $4 events of conversation $1 in the ranges
// [$2[i], $3[i]], ascending: one primary-key range scan per range, each
// stopping at $4 rows, so invisible stretches between ranges cost nothing.
// Every row repeats the conversation's epoch and min_seq as of the same
// snapshot.
var pageSQL = `SELECT c.epoch, c.min_seq, ` + eventCols("e") + `
FROM conversations c
CROSS JOIN LATERAL (
	SELECT ev.* FROM unnest($2::bigint[], $3::bigint[]) AS r (lo, hi)
	CROSS JOIN LATERAL (
		SELECT * FROM events WHERE conv_id = $1 AND seq >= r.lo AND seq <= r.hi ORDER BY seq LIMIT $4) ev
	ORDER BY ev.seq LIMIT $4) e
WHERE c.id = $1
ORDER BY e.seq`

// threadSQL is pageSQL for one thread (SyncRequest.Thread): the root $5
// over the primary key and the replies to it over events_replies (only
// messages have a reply_to).
var threadSQL = `SELECT c.epoch, c.min_seq, ` + eventCols("e") + `
FROM conversations c
CROSS JOIN LATERAL (
	SELECT ev.* FROM unnest($2::bigint[], $3::bigint[]) AS r (lo, hi)
	CROSS JOIN LATERAL (
		SELECT * FROM events WHERE conv_id = $1 AND seq = $5 AND seq >= r.lo AND seq <= r.hi
		UNION ALL
		(SELECT * FROM events WHERE conv_id = $1 AND reply_to = $5 AND seq >= r.lo AND seq <= r.hi
			ORDER BY seq LIMIT $4)) ev
	ORDER BY ev.seq LIMIT $4) e
WHERE c.id = $1
ORDER BY e.seq`

// checkThread refuses a thread root that is no message the caller may see
// (NOT_FOUND): above the capped head, outside the periods, purged, or of
// another kind.
func (db *DB) checkThread(ctx context.Context, conv string, root int64, ps parley.Periods, head int64) error {
	if root > head || !ps.Visible(root) {
		return parley.ErrNoEvent
	}
	var kind string
	err := db.pool.QueryRow(ctx, `SELECT kind FROM events WHERE conv_id = $1 AND seq = $2`, conv, root).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && kind != string(parley.EventMessage)) {
		return parley.ErrNoEvent
	}
	return err
}

// Sync implements parley.Store: three statements, the view (header and
// periods), the page over the visible ranges it implies, and the derived
// state of its messages (decorate).
func (db *DB) Sync(ctx context.Context, p parley.Principal, r parley.SyncRequest) (parley.Page, error) {
	r, err := parley.ValidateSync(r)
	if err != nil {
		return parley.Page{}, err
	}
	// The statements see their own snapshots. Between them a purge may
	// delete events (the page reads min_seq in its own snapshot, so
	// Trimmed agrees with what it holds) and a rollback may replace them:
	// the page or the derived read notices (its epoch differs from the
	// view's; the derived rows are capped at the view's head, so events
	// committed since are not counted twice) and the read is
	// repeated.
	for range 3 {
		page, again, err := db.syncOnce(ctx, p, r)
		if !again {
			return page, wrap("sync", err)
		}
	}
	return parley.Page{}, fmt.Errorf("postgres: sync: conversation %s rolled back during every read", r.Conv)
}

func (db *DB) syncOnce(ctx context.Context, p parley.Principal, r parley.SyncRequest) (page parley.Page, again bool, err error) {
	v, err := db.readView(ctx, r.Conv, p.User)
	if err != nil {
		return page, false, err
	}
	if r.Epoch != 0 && r.Epoch != v.epoch {
		return page, false, parley.ErrEpochChanged(v.epoch, r.Epoch)
	}
	head := v.ps.Head(v.head)
	if r.After > head {
		return page, false, parley.ErrCursorAhead(head)
	}
	if r.Thread != 0 {
		if err := db.checkThread(ctx, r.Conv, r.Thread, v.ps, head); err != nil {
			return page, false, err
		}
	}
	page = parley.Page{Conv: r.Conv, Head: head, MinSeq: v.min, Epoch: v.epoch, NextAfter: head}
	if ranges := v.ps.Ranges(r.After, head); len(ranges) > 0 {
		lo, hi := splitRanges(ranges)
		// One more than a page tells whether more remains.
		var rows pgx.Rows
		if r.Thread != 0 {
			rows, err = db.pool.Query(ctx, threadSQL, r.Conv, lo, hi, r.Limit+1, r.Thread)
		} else {
			rows, err = db.pool.Query(ctx, pageSQL, r.Conv, lo, hi, r.Limit+1)
		}
		if err != nil {
			return page, false, err
		}
		var epoch int64
		var ev parley.Event
		dest := append([]any{&epoch, &page.MinSeq}, eventDest(&ev)...)
		_, err = pgx.ForEachRow(rows, dest, func() error {
			finish(&ev, r.Conv)
			page.Events = append(page.Events, ev)
			return nil
		})
		if err != nil {
			return page, false, err
		}
		if len(page.Events) > 0 && epoch != v.epoch {
			return page, true, nil
		}
	}
	if len(page.Events) > r.Limit {
		page.Events, page.HasMore = page.Events[:r.Limit], true
	}
	if n := len(page.Events); n > 0 {
		page.NextAfter = page.Events[n-1].Seq
	}
	if again, err := db.decorate(ctx, db.pool, r.Conv, v.ps, p.User, head, v.epoch, page.Events); err != nil || again {
		return page, again, err
	}
	// A former member learns nothing above their capped head, not even
	// that a purge went past it (a no-op for members: min_seq <= head+1).
	page.MinSeq = min(page.MinSeq, head+1)
	page.Trimmed = r.After < page.MinSeq-1
	return page, false, nil
}

// fetched is an event as Fetch reads it, with the view it was read in.
type fetched struct {
	ev          parley.Event
	head, epoch int64
	ps          parley.Periods
}

// fetchRaw is Fetch's one statement and its checks, without the derived
// state.
func (db *DB) fetchRaw(ctx context.Context, p parley.Principal, convID string, seq int64) (fetched, error) {
	var f fetched
	if err := parley.CheckConvID(convID); err != nil {
		return f, err
	}
	if err := parley.CheckFetchSeq(seq); err != nil {
		return f, err
	}
	var from, to []int64
	err := db.pool.QueryRow(ctx, `SELECT c.next_seq - 1, c.epoch, `+periodCols+`, `+eventCols("e")+`
		FROM conversations c LEFT JOIN events e ON e.conv_id = c.id AND e.seq = $3
		WHERE c.id = $1`, convID, p.User, seq).Scan(append([]any{&f.head, &f.epoch, &from, &to}, eventDest(&f.ev)...)...)
	f.ps = toPeriods(from, to)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && len(f.ps) == 0):
		return f, parley.ErrNotMember
	case err != nil:
		return f, wrap("fetch", err)
	case seq > f.ps.Head(f.head):
		return f, parley.ErrNoEvent
	case !f.ps.Visible(seq):
		return f, parley.ErrNotMember
	case f.ev.Seq == 0:
		return f, parley.ErrNoEvent
	}
	finish(&f.ev, convID)
	return f, nil
}

// Fetch implements parley.Store: one statement, and for a message one more
// for its derived state (repeated should a rollback come between them).
func (db *DB) Fetch(ctx context.Context, p parley.Principal, convID string, seq int64) (parley.Event, error) {
	for range 3 {
		f, err := db.fetchRaw(ctx, p, convID, seq)
		if err != nil {
			return parley.Event{}, err
		}
		evs := []parley.Event{f.ev}
		again, err := db.decorate(ctx, db.pool, convID, f.ps, p.User, f.ps.Head(f.head), f.epoch, evs)
		if err != nil {
			return parley.Event{}, wrap("fetch", err)
		}
		if !again {
			return evs[0], nil
		}
	}
	return parley.Event{}, fmt.Errorf("postgres: fetch: conversation %s rolled back during every read", convID)
}

// A cursor move is two statements and no explicit transaction: a view
// (the device's install, the conversation, the caller's periods and the
// current cursor) to decide the answer, then, only when the cursor moves,
// one upsert that re-checks the install under a share lock on the device
// row (a concurrent login with a new install waits or wins) and clamps to
// the head under FOR KEY SHARE on the conversation (appenders do not block
// it; a concurrent rollback does, so no cursor ends above its new head).
type cursorSQL struct{ view, move string }

var (
	deliveredSQL = cursorSQL{
		view: `SELECT (SELECT install_id FROM devices WHERE user_id = $2 AND device_id = $3),
			c.next_seq - 1, ` + periodCols + `,
			(SELECT seq FROM delivered_cursors WHERE user_id = $2 AND device_id = $3 AND conv_id = $1)
			FROM (VALUES (1)) AS one (x) LEFT JOIN conversations c ON c.id = $1`,
		move: `WITH c AS (SELECT next_seq - 1 AS head FROM conversations WHERE id = $3 FOR KEY SHARE),
			d AS (SELECT 1 FROM devices WHERE user_id = $1 AND device_id = $2 AND install_id = $5 FOR SHARE)
			INSERT INTO delivered_cursors (user_id, device_id, conv_id, seq)
			SELECT $1, $2, $3, LEAST($4, c.head) FROM c, d
			ON CONFLICT (user_id, device_id, conv_id) DO UPDATE SET seq = GREATEST(delivered_cursors.seq, EXCLUDED.seq)
			RETURNING seq`,
	}
	readSQL = cursorSQL{
		view: `SELECT (SELECT install_id FROM devices WHERE user_id = $2 AND device_id = $3),
			c.next_seq - 1, ` + periodCols + `,
			(SELECT seq FROM read_cursors WHERE user_id = $2 AND conv_id = $1)
			FROM (VALUES (1)) AS one (x) LEFT JOIN conversations c ON c.id = $1`,
		move: `WITH c AS (SELECT next_seq - 1 AS head FROM conversations WHERE id = $3 FOR KEY SHARE),
			d AS (SELECT 1 FROM devices WHERE user_id = $1 AND device_id = $2 AND install_id = $5 FOR SHARE)
			INSERT INTO read_cursors (user_id, conv_id, seq)
			SELECT $1, $3, LEAST($4, c.head) FROM c, d
			ON CONFLICT (user_id, conv_id) DO UPDATE SET seq = GREATEST(read_cursors.seq, EXCLUDED.seq)
			RETURNING seq`,
	}
)

// moveCursor implements Ack and Read.
func (db *DB) moveCursor(ctx context.Context, op string, q cursorSQL, p parley.Principal, convID string, seq int64) (int64, error) {
	if err := parley.CheckConvID(convID); err != nil {
		return 0, err
	}
	if err := parley.CheckSeq("seq", seq); err != nil {
		return 0, err
	}
	var install *string
	var head, cur *int64
	var from, to []int64
	if err := db.pool.QueryRow(ctx, q.view, convID, p.User, p.DeviceID).Scan(&install, &head, &from, &to, &cur); err != nil {
		return 0, wrap(op, err)
	}
	ps := toPeriods(from, to)
	switch {
	case install == nil || *install != p.InstallID:
		return 0, parley.ErrStaleInstall
	case head == nil || len(ps) == 0:
		return 0, parley.ErrNotMember
	case seq > ps.Head(*head):
		return 0, parley.ErrCursorAhead(ps.Head(*head))
	case cur != nil && seq <= *cur:
		return *cur, nil // forward only: no write
	}
	var moved int64
	err := db.pool.QueryRow(ctx, q.move, p.User, p.DeviceID, convID, seq, p.InstallID).Scan(&moved)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, parley.ErrStaleInstall // a new install took the device meanwhile
	}
	if err != nil {
		return 0, wrap(op, err)
	}
	return moved, nil
}

// Ack implements parley.Store.
func (db *DB) Ack(ctx context.Context, p parley.Principal, convID string, seq int64) (int64, error) {
	return db.moveCursor(ctx, "ack", deliveredSQL, p, convID, seq)
}

// Read implements parley.Store.
func (db *DB) Read(ctx context.Context, p parley.Principal, convID string, seq int64) (int64, error) {
	return db.moveCursor(ctx, "read", readSQL, p, convID, seq)
}

// convsSQL is one page of Convs in one statement, driven by
// periods_by_user: per conversation of user $1, the head capped as
// Periods.Head caps it (the end of the last period of a former member) and
// the activity that orders the list, in microseconds (a member's is the
// conversation's latest event, last_at; a former member's the time of the
// event at their capped head); the page is the $6 rows after the cursor
// ($4 empty for the first page, else the cursor's conversation id and $5
// its activity). Only for the page's rows: device $2's delivered and the
// user's read cursor, unread counted over the visible ranges after read and
// stopped at $3 = UnreadCap+1 rows, the unread mentions of the user
// likewise (over the mentions primary key, the event not recalled), and
// the latest visible message (one backward index probe per period).
var convsSQL = `WITH mine AS (
	SELECT conv_id, bool_or(to_seq IS NULL) AS open, max(to_seq) AS last_to
	FROM periods WHERE user_id = $1 GROUP BY conv_id
), v AS (
	SELECT c.id, c.title, c.kind, c.min_seq, c.epoch, c.last_at, c.created_at, m.open,
		CASE WHEN m.open THEN c.next_seq - 1 ELSE LEAST(m.last_to, c.next_seq - 1) END AS head
	FROM mine m JOIN conversations c ON c.id = m.conv_id
), a AS (
	SELECT v.*, (extract(epoch FROM CASE WHEN v.open THEN v.last_at
		ELSE coalesce((SELECT created_at FROM events WHERE conv_id = v.id AND seq = v.head), v.created_at) END) * 1000000)::bigint AS activity
	FROM v
), pg AS (
	SELECT a.*,
		coalesce((SELECT seq FROM read_cursors WHERE user_id = $1 AND conv_id = a.id), 0) AS read,
		coalesce((SELECT seq FROM delivered_cursors WHERE user_id = $1 AND device_id = $2 AND conv_id = a.id), 0) AS delivered
	FROM a
	WHERE $4 = '' OR a.activity < $5 OR (a.activity = $5 AND a.id COLLATE "C" > $4 COLLATE "C")
	ORDER BY a.activity DESC, a.id COLLATE "C" LIMIT $6
)
SELECT v.id, v.title, v.kind, v.head, v.min_seq, v.epoch, v.open, v.delivered, v.read,
	(SELECT count(*) FROM (
		SELECT 1 FROM periods p CROSS JOIN LATERAL (
			SELECT 1 FROM events e
			WHERE e.conv_id = v.id AND e.kind = 'message'
				AND e.seq > GREATEST(p.from_seq - 1, v.read)
				AND e.seq <= LEAST(coalesce(p.to_seq, v.head), v.head)
				AND e.sender_user <> $1 AND e.recall_seq IS NULL
			LIMIT $3) x
		WHERE p.conv_id = v.id AND p.user_id = $1
		LIMIT $3) n),
	(SELECT count(*) FROM (
		SELECT 1 FROM periods p CROSS JOIN LATERAL (
			SELECT 1 FROM mentions m JOIN events e ON e.conv_id = m.conv_id AND e.seq = m.seq
			WHERE m.conv_id = v.id AND m.user_id = $1
				AND m.seq > GREATEST(p.from_seq - 1, v.read)
				AND m.seq <= LEAST(coalesce(p.to_seq, v.head), v.head)
				AND e.recall_seq IS NULL
			LIMIT $3) x
		WHERE p.conv_id = v.id AND p.user_id = $1
		LIMIT $3) n),
	` + eventCols("l") + `, v.activity
FROM pg v
LEFT JOIN LATERAL (
	SELECT e.* FROM periods p CROSS JOIN LATERAL (
		SELECT * FROM events e
		WHERE e.conv_id = v.id AND e.kind = 'message'
			AND e.seq >= p.from_seq AND e.seq <= LEAST(coalesce(p.to_seq, v.head), v.head)
		ORDER BY e.seq DESC LIMIT 1) e
	WHERE p.conv_id = v.id AND p.user_id = $1
	ORDER BY e.seq DESC LIMIT 1) l ON true
ORDER BY v.activity DESC, v.id COLLATE "C"`

// Convs implements parley.Store. Last is read without its Derived state
// (nil): a known limitation, the list shows the text as first sent.
func (db *DB) Convs(ctx context.Context, p parley.Principal, r parley.ConvsRequest) (parley.ConvsPage, error) {
	r, cur, err := parley.ValidateConvs(r)
	if err != nil {
		return parley.ConvsPage{}, err
	}
	if cur == nil {
		cur = &parley.ConvsCursor{}
	}
	rows, err := db.pool.Query(ctx, convsSQL, p.User, p.DeviceID, parley.UnreadCap+1, cur.Conv, cur.Activity, r.Limit+1)
	if err != nil {
		return parley.ConvsPage{}, wrap("convs", err)
	}
	page := parley.ConvsPage{Convs: []parley.ConvSummary{}}
	var s parley.ConvSummary
	var ev parley.Event
	var activity int64
	var last parley.ConvsCursor
	dest := append([]any{&s.Conv, &s.Title, &s.Kind, &s.Head, &s.MinSeq, &s.Epoch, &s.Member, &s.Delivered, &s.Read, &s.Unread, &s.MentionsUnread},
		eventDest(&ev)...)
	dest = append(dest, &activity)
	_, err = pgx.ForEachRow(rows, dest, func() error {
		if len(page.Convs) == r.Limit {
			page.HasMore = true
			return nil
		}
		e := s
		e.MinSeq = min(e.MinSeq, e.Head+1) // as in Sync: nothing above the capped head
		if e.Unread > parley.UnreadCap {
			e.Unread, e.UnreadCapped = parley.UnreadCap, true
		}
		e.MentionsUnread = min(e.MentionsUnread, parley.UnreadCap)
		if ev.Seq != 0 {
			lastEv := ev
			finish(&lastEv, e.Conv)
			e.Last = &lastEv
		}
		page.Convs = append(page.Convs, e)
		last = parley.ConvsCursor{Activity: activity, Conv: e.Conv}
		return nil
	})
	if err != nil {
		return parley.ConvsPage{}, wrap("convs", err)
	}
	if page.HasMore {
		page.Next = last.String()
	}
	return page, nil
}
