package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/parleychat/parley"
)

// conv is a conversations row.
type conv struct {
	id, kind, title, owner string
	next, min, epoch       int64
	maxAgeMS, keepLast     int64
	lastAt, createdAt      int64
}

func (c conv) head() int64 { return c.next - 1 }

func (c conv) retention() parley.Retention {
	return parley.Retention{MaxAge: time.Duration(c.maxAgeMS) * time.Millisecond, KeepLast: c.keepLast}
}

func (c conv) public() parley.Conversation {
	return parley.Conversation{
		ID: c.id, Kind: parley.ConvKind(c.kind), Title: c.title, Owner: c.owner,
		Head: c.head(), MinSeq: c.min, Epoch: c.epoch,
		Retention: c.retention(),
		CreatedAt: msTime(c.createdAt),
	}
}

const convColumns = `id, kind, title, owner, next_seq, min_seq, epoch, retain_max_age_ms, retain_last_n, last_at, created_at`

// The statements of the send path (prepared once: DB.prepared).
const (
	qLoadConv    = `SELECT ` + convColumns + ` FROM conversations WHERE id = ?`
	qOpenMember  = `SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ? AND to_seq IS NULL`
	qKeyLookup   = `SELECT seq, mid, kind, request_hash FROM events WHERE conv_id = ? AND sender_user = ? AND cmid = ?`
	qTombstone   = `SELECT count(*) FROM tombstones WHERE conv_id = ? AND sender_user = ? AND cmid = ?`
	qAdvanceConv = `UPDATE conversations SET next_seq = ?, last_at = ? WHERE id = ?`
	qInsertEvent = `INSERT INTO events
		(conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body, target, subject_user,
		reply_to, mentions, emoji, react_on, attachments, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ` + nowMS + `) RETURNING created_at`
	qInsertLink = `INSERT INTO file_links (file_id, conv_id, seq) VALUES (?, ?, ?)`
)

func scanConv(row interface{ Scan(...any) error }) (conv, error) {
	var c conv
	err := row.Scan(&c.id, &c.kind, &c.title, &c.owner, &c.next, &c.min, &c.epoch, &c.maxAgeMS, &c.keepLast, &c.lastAt, &c.createdAt)
	return c, err
}

// loadConv reads a conversation; a missing one is notFound. Inside a write
// transaction this read is the contract's row lock: BEGIN IMMEDIATE already
// holds the database's write lock.
func loadConv(ctx context.Context, tx *txn, id string, notFound error) (conv, error) {
	c, err := scanConv(tx.QueryRowContext(ctx, qLoadConv, id))
	if errors.Is(err, sql.ErrNoRows) {
		return c, notFound
	}
	return c, err
}

// periodsOf returns user's membership periods in conv, ordered.
func periodsOf(ctx context.Context, tx *txn, convID, user string) (parley.Periods, error) {
	return scanPeriods(tx.QueryContext(ctx, `SELECT from_seq, COALESCE(to_seq, 0) FROM periods
		WHERE conv_id = ? AND user_id = ? ORDER BY from_seq`, convID, user))
}

// scanPeriods reads (from_seq, to_seq) rows, to_seq 0 for an open period.
// scanIDs reads the one string column of rows (the ids a statement
// returned) and closes them.
func scanIDs(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func scanPeriods(rows *sql.Rows, err error) (parley.Periods, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ps parley.Periods
	for rows.Next() {
		var p parley.Period
		if err := rows.Scan(&p.From, &p.To); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, rows.Err()
}

// memberView loads a conversation and the caller's periods for a read or a
// cursor move: no conversation or no period at all is NOT_MEMBER.
func memberView(ctx context.Context, tx *txn, convID, user string) (conv, parley.Periods, error) {
	c, err := loadConv(ctx, tx, convID, parley.ErrNotMember)
	if err != nil {
		return c, nil, err
	}
	ps, err := periodsOf(ctx, tx, convID, user)
	if err == nil && len(ps) == 0 {
		err = parley.ErrNotMember
	}
	return c, ps, err
}

// isOpenMember reports whether user has an open period in conv.
func isOpenMember(ctx context.Context, tx *txn, convID, user string) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, qOpenMember, convID, user).Scan(&n)
	return n > 0, err
}

// appendEvent writes ev at the conversation's next seq and advances it, with
// a mentions row per user ev mentions and a file_links row per file it
// attaches. It fills ev.Seq, ev.MID and ev.At.
func appendEvent(ctx context.Context, tx *txn, c *conv, ev *parley.Event, cmid string, hash []byte) error {
	ev.Conv, ev.Seq, ev.MID = c.id, c.next, parley.NewID()
	var at int64
	err := tx.QueryRowContext(ctx, qInsertEvent, append([]any{
		c.id, ev.Seq, ev.MID, string(ev.Kind), ev.Sender, ev.Device, nullText(cmid), hash, ev.Body},
		eventExtras(ev)...)...).Scan(&at)
	if err != nil {
		if cmid != "" && isUnique(err) {
			return errDupKey
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, qAdvanceConv, c.next+1, at, c.id); err != nil {
		return err
	}
	c.next++
	c.lastAt = at
	ev.At = msTime(at)
	for _, u := range ev.Mentions {
		if _, err := tx.ExecContext(ctx, `INSERT INTO mentions (conv_id, user_id, seq) VALUES (?, ?, ?)`, c.id, u, ev.Seq); err != nil {
			return err
		}
	}
	for _, a := range ev.Attachments {
		if _, err := tx.ExecContext(ctx, qInsertLink, a.ID, c.id, ev.Seq); err != nil {
			return err
		}
	}
	return nil
}

// eventExtras are the insert's arguments after body, NULL where ev has
// nothing: target, subject_user, reply_to, mentions, emoji, react_on,
// attachments.
func eventExtras(ev *parley.Event) []any {
	var target, replyTo, on any
	if ev.Target != 0 {
		target = ev.Target
	}
	if ev.ReplyTo != 0 {
		replyTo = ev.ReplyTo
	}
	if ev.Kind == parley.EventReaction {
		on = ev.On
	}
	return []any{target, nullText(ev.User), replyTo, nullText(parley.JoinMentions(ev.Mentions)), nullText(ev.Emoji), on,
		nullText(parley.EncodeAttachments(ev.Attachments))}
}

// nullText is s, or NULL for "".
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// appendMembership appends a membership event and opens or closes user's
// period at its seq.
func appendMembership(ctx context.Context, tx *txn, c *conv, kind parley.EventKind, sender, user string) (int64, error) {
	ev := parley.Event{Kind: kind, Sender: sender, User: user}
	if err := appendEvent(ctx, tx, c, &ev, "", nil); err != nil {
		return 0, err
	}
	var err error
	if kind == parley.EventMemberJoined {
		_, err = tx.ExecContext(ctx, `INSERT INTO periods (conv_id, user_id, from_seq) VALUES (?, ?, ?)`, c.id, user, ev.Seq)
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE periods SET to_seq = ? WHERE conv_id = ? AND user_id = ? AND to_seq IS NULL`, ev.Seq, c.id, user)
	}
	return ev.Seq, err
}

func userExists(ctx context.Context, tx *txn, id string) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM users WHERE id = ?`, id).Scan(&n)
	return n > 0, err
}

// CreateConversation implements parley.Store.
func (db *DB) CreateConversation(ctx context.Context, p parley.Principal, nc parley.NewConversation) (parley.Conversation, error) {
	nc, err := parley.ValidateNewConversation(p.User, nc)
	if err != nil {
		return parley.Conversation{}, err
	}
	owner := p.User
	if nc.Kind == parley.KindDirect {
		owner = ""
	}
	var out parley.Conversation
	err = db.write(ctx, "create conversation", func(tx *txn) error {
		for _, m := range nc.Members {
			ok, err := userExists(ctx, tx, m)
			if err != nil {
				return err
			}
			if !ok {
				return parley.Errorf(parley.CodeNotFound, "user %q not found", m)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO conversations (id, kind, title, owner, last_at, created_at)
			VALUES (?, ?, ?, ?, `+nowMS+`, `+nowMS+`)`, nc.ID, string(nc.Kind), nc.Title, owner)
		if isUnique(err) {
			return parley.Errorf(parley.CodeAlreadyExists, "conversation %q already exists", nc.ID)
		}
		if err != nil {
			return err
		}
		c, err := loadConv(ctx, tx, nc.ID, parley.ErrConvNotFound)
		if err != nil {
			return err
		}
		// Every initial member sees every initial join: all periods start at 1.
		for _, m := range nc.Members {
			ev := parley.Event{Kind: parley.EventMemberJoined, Sender: p.User, User: m}
			if err := appendEvent(ctx, tx, &c, &ev, "", nil); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO periods (conv_id, user_id, from_seq) VALUES (?, ?, 1)`, c.id, m); err != nil {
				return err
			}
		}
		out = c.public()
		return nil
	})
	return out, err
}

// memberChange runs the shared checks of AddMember and RemoveMember and
// returns the locked conversation, or a no-op result.
func (db *DB) memberChange(ctx context.Context, op string, remove bool, p parley.Principal, convID, user string,
	fn func(tx *txn, c *conv, in bool) (parley.MemberChange, error)) (parley.MemberChange, error) {
	if err := parley.CheckMemberArgs(convID, user); err != nil {
		return parley.MemberChange{}, err
	}
	var out parley.MemberChange
	err := db.write(ctx, op, func(tx *txn) error {
		c, err := loadConv(ctx, tx, convID, parley.ErrNotMember)
		if err != nil {
			return err
		}
		callerIn, err := isOpenMember(ctx, tx, convID, p.User)
		if err != nil {
			return err
		}
		if err := parley.CheckMemberChange(p, parley.ConvKind(c.kind), c.owner, callerIn, remove, user); err != nil {
			return err
		}
		in, err := isOpenMember(ctx, tx, convID, user)
		if err != nil {
			return err
		}
		out, err = fn(tx, &c, in)
		return err
	})
	return out, err
}

// AddMember implements parley.Store.
func (db *DB) AddMember(ctx context.Context, p parley.Principal, convID, user string) (parley.MemberChange, error) {
	return db.memberChange(ctx, "add member", false, p, convID, user, func(tx *txn, c *conv, in bool) (parley.MemberChange, error) {
		ok, err := userExists(ctx, tx, user)
		if err != nil {
			return parley.MemberChange{}, err
		}
		if !ok {
			return parley.MemberChange{}, parley.ErrUserNotFound
		}
		if in {
			return parley.MemberChange{Conv: c.id, User: user}, nil
		}
		seq, err := appendMembership(ctx, tx, c, parley.EventMemberJoined, p.User, user)
		return parley.MemberChange{Conv: c.id, User: user, Seq: seq, Changed: true}, err
	})
}

// RemoveMember implements parley.Store.
func (db *DB) RemoveMember(ctx context.Context, p parley.Principal, convID, user string) (parley.MemberChange, error) {
	return db.memberChange(ctx, "remove member", true, p, convID, user, func(tx *txn, c *conv, in bool) (parley.MemberChange, error) {
		if !in {
			return parley.MemberChange{Conv: c.id, User: user}, nil
		}
		seq, err := appendMembership(ctx, tx, c, parley.EventMemberLeft, p.User, user)
		return parley.MemberChange{Conv: c.id, User: user, Seq: seq, Changed: true}, err
	})
}

// Conversation implements parley.Store.
func (db *DB) Conversation(ctx context.Context, id string) (parley.Conversation, error) {
	if err := parley.CheckConvID(id); err != nil {
		return parley.Conversation{}, err
	}
	var out parley.Conversation
	err := db.read(ctx, "conversation", func(tx *txn) error {
		c, err := loadConv(ctx, tx, id, parley.ErrConvNotFound)
		out = c.public()
		return err
	})
	return out, err
}

// ConvMembers implements parley.Store.
func (db *DB) ConvMembers(ctx context.Context, id string) ([]string, error) {
	if err := parley.CheckConvID(id); err != nil {
		return nil, err
	}
	var out []string
	err := db.read(ctx, "conversation members", func(tx *txn) error {
		out = []string{}
		if _, err := loadConv(ctx, tx, id, parley.ErrConvNotFound); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT user_id FROM periods WHERE conv_id = ? AND to_seq IS NULL ORDER BY user_id`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var u string
			if err := rows.Scan(&u); err != nil {
				return err
			}
			out = append(out, u)
		}
		return rows.Err()
	})
	return out, err
}

// SetRetention implements parley.Store.
func (db *DB) SetRetention(ctx context.Context, id string, r parley.Retention) error {
	if err := parley.CheckConvID(id); err != nil {
		return err
	}
	if err := parley.ValidateRetention(r); err != nil {
		return err
	}
	return db.write(ctx, "set retention", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE conversations SET retain_max_age_ms = ?, retain_last_n = ? WHERE id = ?`,
			r.MaxAge.Milliseconds(), r.KeepLast, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return parley.ErrConvNotFound
		}
		return nil
	})
}

// Purge implements parley.Store.
func (db *DB) Purge(ctx context.Context, id string) (parley.PurgeResult, error) {
	if err := parley.CheckConvID(id); err != nil {
		return parley.PurgeResult{}, err
	}
	out := parley.PurgeResult{Conv: id}
	err := db.write(ctx, "purge", func(tx *txn) error {
		c, err := loadConv(ctx, tx, id, parley.ErrConvNotFound)
		if err != nil {
			return err
		}
		var keepFrom int64
		if c.maxAgeMS > 0 {
			// The first event young enough to keep ends the prefix; the
			// walk up the primary key costs what the purge deletes.
			err := tx.QueryRowContext(ctx, `SELECT seq FROM events WHERE conv_id = ? AND created_at >= `+nowMS+` - ?
				ORDER BY seq LIMIT 1`, id, c.maxAgeMS).Scan(&keepFrom)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		// Queued and running exports pin what they may still read.
		pinnedFrom, err := exportPin(ctx, tx, id)
		if err != nil {
			return err
		}
		cut := parley.PinnedCut(c.retention().Cut(c.min, c.head(), keepFrom), pinnedFrom)
		if cut >= c.min {
			res, err := tx.ExecContext(ctx, `INSERT INTO tombstones (conv_id, sender_user, cmid, request_hash, purged_at)
				SELECT conv_id, sender_user, cmid, request_hash, `+nowMS+` FROM events
				WHERE conv_id = ? AND seq <= ? AND cmid IS NOT NULL
				ON CONFLICT DO NOTHING`, id, cut)
			if err != nil {
				return err
			}
			out.Tombstones, _ = res.RowsAffected()
			// Every version of the purged messages, those made by a kept
			// edit too, while their events still name their terms.
			if err := unindex(ctx, tx, id, 0, cut); err != nil {
				return err
			}
			res, err = tx.ExecContext(ctx, `DELETE FROM events WHERE conv_id = ? AND seq <= ?`, id, cut)
			if err != nil {
				return err
			}
			out.Deleted, _ = res.RowsAffected()
			if err := purgeDerived(ctx, tx, id, cut); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE conversations SET min_seq = ? WHERE id = ?`, cut+1, id); err != nil {
				return err
			}
			c.min = cut + 1
		}
		out.MinSeq = c.min
		_, err = tx.ExecContext(ctx, `DELETE FROM tombstones WHERE conv_id = ? AND purged_at < `+nowMS+` - ?`,
			id, db.opts.TombstoneTTL.Milliseconds())
		return err
	})
	return out, err
}

// Rollback implements parley.Store.
func (db *DB) Rollback(ctx context.Context, id string, toSeq int64) (parley.RollbackResult, error) {
	if err := parley.CheckConvID(id); err != nil {
		return parley.RollbackResult{}, err
	}
	if err := parley.CheckSeq("to_seq", toSeq); err != nil {
		return parley.RollbackResult{}, err
	}
	out := parley.RollbackResult{Conv: id}
	err := db.write(ctx, "rollback", func(tx *txn) error {
		c, err := loadConv(ctx, tx, id, parley.ErrConvNotFound)
		if err != nil {
			return err
		}
		if err := parley.CheckRollback(toSeq, c.min, c.head()); err != nil {
			return err
		}
		if err := failRolledBack(ctx, tx, id, toSeq); err != nil {
			return err
		}
		before, err := openMembers(ctx, tx, id)
		if err != nil {
			return err
		}
		// The search index is rebuilt after (rollbackDerived); its rows go
		// while their events still name their terms.
		if err := unindex(ctx, tx, id, 0, math.MaxInt64); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE conv_id = ? AND seq > ?`, id, toSeq)
		if err != nil {
			return err
		}
		out.Removed, _ = res.RowsAffected()
		for _, q := range []string{
			`UPDATE events SET recall_seq = NULL WHERE conv_id = ? AND recall_seq > ?`,
			`DELETE FROM periods WHERE conv_id = ? AND from_seq > ?`,
			`UPDATE periods SET to_seq = NULL WHERE conv_id = ? AND to_seq > ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, id, toSeq); err != nil {
				return err
			}
		}
		if err := rollbackDerived(ctx, tx, id, toSeq); err != nil {
			return err
		}
		at, err := openMembers(ctx, tx, id)
		if err != nil {
			return err
		}
		c.next = toSeq + 1
		leave, join := parley.RestoreMembership(before, at)
		for _, u := range leave {
			if _, err := appendMembership(ctx, tx, &c, parley.EventMemberLeft, "", u); err != nil {
				return err
			}
		}
		for _, u := range join {
			if _, err := appendMembership(ctx, tx, &c, parley.EventMemberJoined, "", u); err != nil {
				return err
			}
		}
		head := c.head()
		for _, q := range qClampCursors {
			if _, err := tx.ExecContext(ctx, q, head, id, head); err != nil {
				return err
			}
		}
		if err := tx.QueryRowContext(ctx, `UPDATE conversations SET next_seq = ?, epoch = epoch + 1, last_at = `+nowMS+`
			WHERE id = ? RETURNING epoch`, c.next, id).Scan(&out.Epoch); err != nil {
			return err
		}
		out.Head = head
		return nil
	})
	return out, err
}

// openMembers lists the users with an open period, in id order.
func openMembers(ctx context.Context, tx *txn, convID string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT user_id FROM periods WHERE conv_id = ? AND to_seq IS NULL ORDER BY user_id`, convID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var users []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, err
		}
		users = append(users, u)
	}
	return users, rows.Err()
}

// qClampCursors clamp a conversation's cursors to its head after a
// rollback (over the cursor tables' conv_id indexes); arguments: head,
// conversation, head.
var qClampCursors = []string{
	`UPDATE delivered_cursors SET seq = ? WHERE conv_id = ? AND seq > ?`,
	`UPDATE read_cursors SET seq = ? WHERE conv_id = ? AND seq > ?`,
}
