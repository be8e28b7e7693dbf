package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// conv is the part of a conversations row that writers need.
type conv struct {
	id, kind, owner string
	next, min       int64
	epoch           int64
	maxAgeMS        int64
	keepLast        int64
}

func (c conv) head() int64 { return c.next - 1 }

func (c conv) retention() parley.Retention {
	return parley.Retention{MaxAge: time.Duration(c.maxAgeMS) * time.Millisecond, KeepLast: c.keepLast}
}

// Row locks on conversations. Appenders queue on each other with FOR NO KEY
// UPDATE (it conflicts with itself as FOR UPDATE does) without blocking the
// FOR KEY SHARE of cursor moves and export creations; Rollback and Purge
// exclude both with FOR UPDATE (Purge so that it sees every export pin).
const (
	lockAppend    = "FOR NO KEY UPDATE"
	lockExclusive = "FOR UPDATE"
)

// lockSQL locks and reads a conversation row with the given lock.
func lockSQL(lock string) string {
	return `SELECT kind, owner, next_seq, min_seq, epoch, retain_max_age_ms, retain_last_n
		FROM conversations WHERE id = $1 ` + lock
}

// scanConv reads a row of lockSQL.
func scanConv(row pgx.Row, id string) (conv, error) {
	c := conv{id: id}
	err := row.Scan(&c.kind, &c.owner, &c.next, &c.min, &c.epoch, &c.maxAgeMS, &c.keepLast)
	return c, err
}

// lockConv locks and reads a conversation row; a missing one is notFound.
func lockConv(ctx context.Context, tx pgx.Tx, id, lock string, notFound error) (conv, error) {
	c, err := scanConv(tx.QueryRow(ctx, lockSQL(lock), id), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, notFound
	}
	return c, err
}

// appendSQL inserts an event at the locked conversation's next seq and
// advances it, in one statement that needs nothing from the client but the
// event: the seq is read under the row lock the transaction holds, so the
// statement can be pipelined behind the lock. Its created_at is the
// database clock and becomes last_at. It returns the seq.
const appendSQL = `WITH c AS (SELECT next_seq FROM conversations WHERE id = $1),
ev AS (
	INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body, target, subject_user)
	SELECT $1, c.next_seq, $2, $3, $4, $5, $6, $7, $8, $9, $10 FROM c
	RETURNING seq, created_at)
UPDATE conversations SET next_seq = ev.seq + 1, last_at = ev.created_at FROM ev WHERE id = $1
RETURNING ev.seq`

// appendArgs returns appendSQL's arguments for ev, giving it a mid.
func appendArgs(convID string, ev *parley.Event, cmid string, hash []byte) []any {
	ev.Conv, ev.MID = convID, parley.NewID()
	return []any{convID, ev.MID, string(ev.Kind), ev.Sender, ev.Device, optString(cmid), hash, ev.Body, optInt(ev.Target), optString(ev.User)}
}

// appendEvent writes ev at c's next seq and advances it; it fills ev.Seq
// and ev.MID. A unique violation is returned as the driver's error.
func appendEvent(ctx context.Context, tx pgx.Tx, c *conv, ev *parley.Event, cmid string, hash []byte) error {
	if err := tx.QueryRow(ctx, appendSQL, appendArgs(c.id, ev, cmid, hash)...).Scan(&ev.Seq); err != nil {
		return err
	}
	c.next = ev.Seq + 1
	return nil
}

// appendMembership appends a membership event and opens or closes user's
// period at its seq.
func appendMembership(ctx context.Context, tx pgx.Tx, c *conv, kind parley.EventKind, sender, user string) (int64, error) {
	ev := parley.Event{Kind: kind, Sender: sender, User: user}
	if err := appendEvent(ctx, tx, c, &ev, "", nil); err != nil {
		return 0, err
	}
	q := `INSERT INTO periods (conv_id, user_id, from_seq) VALUES ($1, $2, $3)`
	if kind == parley.EventMemberLeft {
		q = `UPDATE periods SET to_seq = $3 WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL`
	}
	_, err := tx.Exec(ctx, q, c.id, user, ev.Seq)
	return ev.Seq, err
}

// CreateConversation implements parley.Store.
func (db *DB) CreateConversation(ctx context.Context, p parley.Principal, nc parley.NewConversation) (parley.Conversation, error) {
	nc, err := parley.ValidateNewConversation(p.User, nc)
	if err != nil {
		return parley.Conversation{}, err
	}
	out := parley.Conversation{ID: nc.ID, Kind: nc.Kind, Title: nc.Title, Head: int64(len(nc.Members)), MinSeq: 1, Epoch: 1}
	if nc.Kind == parley.KindGroup {
		out.Owner = p.User
	}
	err = db.write(ctx, "create conversation", func(tx pgx.Tx) error {
		var missing *string
		if err := tx.QueryRow(ctx, `SELECT m FROM unnest($1::text[]) WITH ORDINALITY AS m (m, ord)
			WHERE NOT EXISTS (SELECT 1 FROM users WHERE id = m) ORDER BY ord LIMIT 1`, nc.Members).Scan(&missing); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if missing != nil {
			return parley.Errorf(parley.CodeNotFound, "user %q not found", *missing)
		}
		// A concurrent create of the same id waits here for the other's
		// commit, then finds the conflict.
		err := tx.QueryRow(ctx, `INSERT INTO conversations (id, kind, title, owner) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO NOTHING RETURNING created_at`,
			nc.ID, string(nc.Kind), nc.Title, out.Owner).Scan(&out.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return parley.Errorf(parley.CodeAlreadyExists, "conversation %q already exists", nc.ID)
		}
		if err != nil {
			return err
		}
		return insertMembers(ctx, tx, nc.ID, p.User, nc.Members)
	})
	if err != nil {
		return parley.Conversation{}, err
	}
	out.CreatedAt = ms(out.CreatedAt)
	return out, nil
}

// insertMembers writes the initial members of a conversation just
// inserted: a member_joined event each (seqs 1..n, sender the creator)
// and a period from seq 1, so every initial member sees every initial
// join.
func insertMembers(ctx context.Context, tx pgx.Tx, id, sender string, members []string) error {
	mids := make([]string, len(members))
	for i := range mids {
		mids[i] = parley.NewID()
	}
	_, err := tx.Exec(ctx, `WITH m AS (
			SELECT u, mid, ord FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS m (u, mid, ord)),
		ev AS (
			INSERT INTO events (conv_id, seq, mid, kind, sender_user, subject_user)
			SELECT $1, ord, mid, 'member_joined', $2, u FROM m
			RETURNING created_at),
		pe AS (
			INSERT INTO periods (conv_id, user_id, from_seq) SELECT $1, u, 1 FROM m)
		UPDATE conversations SET next_seq = $5 + 1, last_at = (SELECT max(created_at) FROM ev) WHERE id = $1`,
		id, sender, members, mids, len(members))
	return err
}

// memberChange runs the checks AddMember and RemoveMember share: lock, the
// caller's right to act, group. fn gets the locked conversation and whether
// user is in now.
func (db *DB) memberChange(ctx context.Context, op string, remove bool, p parley.Principal, convID, user string,
	fn func(tx pgx.Tx, c *conv, userExists, in bool) (parley.MemberChange, error)) (parley.MemberChange, error) {
	if err := parley.CheckMemberArgs(convID, user); err != nil {
		return parley.MemberChange{}, err
	}
	var out parley.MemberChange
	err := db.write(ctx, op, func(tx pgx.Tx) error {
		c, err := lockConv(ctx, tx, convID, lockAppend, parley.ErrNotMember)
		if err != nil {
			return err
		}
		var callerIn, exists, in bool
		if err := tx.QueryRow(ctx, `SELECT
				EXISTS (SELECT 1 FROM periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL),
				EXISTS (SELECT 1 FROM users WHERE id = $3),
				EXISTS (SELECT 1 FROM periods WHERE conv_id = $1 AND user_id = $3 AND to_seq IS NULL)`,
			convID, p.User, user).Scan(&callerIn, &exists, &in); err != nil {
			return err
		}
		if err := parley.CheckMemberChange(p, parley.ConvKind(c.kind), c.owner, callerIn, remove, user); err != nil {
			return err
		}
		out, err = fn(tx, &c, exists, in)
		return err
	})
	return out, err
}

// AddMember implements parley.Store.
func (db *DB) AddMember(ctx context.Context, p parley.Principal, convID, user string) (parley.MemberChange, error) {
	return db.memberChange(ctx, "add member", false, p, convID, user, func(tx pgx.Tx, c *conv, exists, in bool) (parley.MemberChange, error) {
		if !exists {
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
	return db.memberChange(ctx, "remove member", true, p, convID, user, func(tx pgx.Tx, c *conv, _, in bool) (parley.MemberChange, error) {
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
	c := parley.Conversation{ID: id}
	var kind string
	var maxAgeMS int64
	err := db.pool.QueryRow(ctx, `SELECT kind, title, owner, next_seq - 1, min_seq, epoch, retain_max_age_ms, retain_last_n, created_at
		FROM conversations WHERE id = $1`, id).
		Scan(&kind, &c.Title, &c.Owner, &c.Head, &c.MinSeq, &c.Epoch, &maxAgeMS, &c.Retention.KeepLast, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return parley.Conversation{}, parley.ErrConvNotFound
	}
	if err != nil {
		return parley.Conversation{}, wrap("conversation", err)
	}
	c.Kind = parley.ConvKind(kind)
	c.Retention.MaxAge = time.Duration(maxAgeMS) * time.Millisecond
	c.CreatedAt = ms(c.CreatedAt)
	return c, nil
}

// ConvMembers implements parley.Store.
func (db *DB) ConvMembers(ctx context.Context, id string) ([]string, error) {
	if err := parley.CheckConvID(id); err != nil {
		return nil, err
	}
	// One statement, one snapshot: the conversation's existence and its
	// members are read together.
	var exists bool
	var members []string
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
		coalesce((SELECT array_agg(user_id ORDER BY user_id COLLATE "C") FROM periods WHERE conv_id = $1 AND to_seq IS NULL), '{}')`, id).
		Scan(&exists, &members)
	if err != nil {
		return nil, wrap("conversation members", err)
	}
	if !exists {
		return nil, parley.ErrConvNotFound
	}
	return members, nil
}

// SetRetention implements parley.Store.
func (db *DB) SetRetention(ctx context.Context, id string, r parley.Retention) error {
	if err := parley.CheckConvID(id); err != nil {
		return err
	}
	if err := parley.ValidateRetention(r); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE conversations SET retain_max_age_ms = $1, retain_last_n = $2 WHERE id = $3`,
		r.MaxAge.Milliseconds(), r.KeepLast, id)
	if err != nil {
		return wrap("set retention", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.ErrConvNotFound
	}
	return nil
}

// Purge implements parley.Store.
func (db *DB) Purge(ctx context.Context, id string) (parley.PurgeResult, error) {
	if err := parley.CheckConvID(id); err != nil {
		return parley.PurgeResult{}, err
	}
	out := parley.PurgeResult{Conv: id}
	err := db.write(ctx, "purge", func(tx pgx.Tx) error {
		// FOR UPDATE, not FOR NO KEY UPDATE: it conflicts with the FOR KEY
		// SHARE that CreateExport holds while it records a snapshot, so a
		// purge that starts while an export of this conversation is being
		// created waits for its commit and then sees its pin (exportPin);
		// a purge that locked first makes the creator wait instead. Sends
		// queue behind a purge either way.
		c, err := lockConv(ctx, tx, id, lockExclusive, parley.ErrConvNotFound)
		if err != nil {
			return err
		}
		pinned, err := exportPin(ctx, tx, id)
		if err != nil {
			return err
		}
		var keepFrom int64
		if c.maxAgeMS > 0 {
			// The first event young enough to keep ends the prefix; the
			// walk up the primary key costs what the purge deletes.
			err := tx.QueryRow(ctx, `SELECT seq FROM events
				WHERE conv_id = $1 AND created_at >= clock_timestamp() - $2::bigint * interval '1 millisecond'
				ORDER BY seq LIMIT 1`, id, c.maxAgeMS).Scan(&keepFrom)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		// Queued and running exports keep what they may still export.
		cut := parley.PinnedCut(c.retention().Cut(c.min, c.head(), keepFrom), pinned)
		if cut >= c.min {
			tag, err := tx.Exec(ctx, `INSERT INTO tombstones (conv_id, sender_user, cmid, request_hash)
				SELECT conv_id, sender_user, cmid, request_hash FROM events
				WHERE conv_id = $1 AND seq <= $2 AND cmid IS NOT NULL
				ON CONFLICT DO NOTHING`, id, cut)
			if err != nil {
				return err
			}
			out.Tombstones = tag.RowsAffected()
			if tag, err = tx.Exec(ctx, `DELETE FROM events WHERE conv_id = $1 AND seq <= $2`, id, cut); err != nil {
				return err
			}
			out.Deleted = tag.RowsAffected()
			// The derived rows of the deleted events and of their targets.
			for _, q := range []string{
				`DELETE FROM reactions WHERE conv_id = $1 AND target <= $2`,
				`DELETE FROM mentions WHERE conv_id = $1 AND seq <= $2`,
				// The queue first (searchqueue.go).
				`DELETE FROM search_queue WHERE conv_id = $1 AND seq <= $2`,
				`DELETE FROM search_docs WHERE conv_id = $1 AND seq <= $2`,
				qPurgeLinks,
			} {
				if _, err := tx.Exec(ctx, q, id, cut); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE conversations SET min_seq = $2 + 1 WHERE id = $1`, id, cut); err != nil {
				return err
			}
			c.min = cut + 1
		}
		out.MinSeq = c.min
		_, err = tx.Exec(ctx, `DELETE FROM tombstones WHERE conv_id = $1 AND purged_at < clock_timestamp() - $2::bigint * interval '1 microsecond'`,
			id, db.opts.TombstoneTTL.Microseconds())
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
	err := db.write(ctx, "rollback", func(tx pgx.Tx) error {
		c, err := lockConv(ctx, tx, id, lockExclusive, parley.ErrConvNotFound)
		if err != nil {
			return err
		}
		if err := parley.CheckRollback(toSeq, c.min, c.head()); err != nil {
			return err
		}
		// Exports whose snapshot reaches past toSeq can no longer be
		// read as recorded: they fail. FOR UPDATE above also waits for a
		// CreateExport holding FOR KEY SHARE, so its job is seen here.
		if err := failRolledBack(ctx, tx, id, toSeq); err != nil {
			return err
		}
		now, err := openMembers(ctx, tx, id)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM events WHERE conv_id = $1 AND seq > $2`, id, toSeq)
		if err != nil {
			return err
		}
		out.Removed = tag.RowsAffected()
		if err := rollbackDerived(ctx, tx, id, toSeq); err != nil {
			return err
		}
		then, err := openMembers(ctx, tx, id)
		if err != nil {
			return err
		}
		// Restore the current membership, or a removed user would regain
		// access: leaves first, then joins, each in user id order.
		if _, err := tx.Exec(ctx, `UPDATE conversations SET next_seq = $2 WHERE id = $1`, id, toSeq+1); err != nil {
			return err
		}
		c.next = toSeq + 1
		leave, join := parley.RestoreMembership(now, then)
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
		out.Head = c.head()
		for _, q := range qClampCursors {
			if _, err := tx.Exec(ctx, q, id, out.Head); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `UPDATE conversations SET next_seq = $2, epoch = epoch + 1, last_at = clock_timestamp()
			WHERE id = $1 RETURNING epoch`, id, c.next).Scan(&out.Epoch)
	})
	return out, err
}

// rollbackDerived is Rollback's work on what the events it deleted caused,
// after they are gone: recalls after the restore point toSeq are undone
// (of messages and of their edits alike); periods go back to what they
// were at toSeq; derived rows are rebuilt from the events that remain, the
// search rows as RebuildSearch builds them (a recall undone brings its
// message's text back, and the links its files).
func rollbackDerived(ctx context.Context, tx pgx.Tx, id string, toSeq int64) error {
	for _, q := range []string{
		`UPDATE events SET recall_seq = NULL WHERE conv_id = $1 AND recall_seq > $2`,
		`DELETE FROM periods WHERE conv_id = $1 AND from_seq > $2`,
		`UPDATE periods SET to_seq = NULL WHERE conv_id = $1 AND to_seq > $2`,
		`DELETE FROM mentions WHERE conv_id = $1 AND seq > $2`,
		qRebuildReactions,
		qRollbackLinks,
		qRebuildLinks,
	} {
		if _, err := tx.Exec(ctx, q, id, toSeq); err != nil {
			return err
		}
	}
	_, err := rebuildSearchConv(ctx, tx, id)
	return err
}

// qRebuildReactions returns the reactions rows set after the restore point
// $2 to the state of the latest reaction event that remains for their
// (target, user, emoji), or removes them when none does. It runs after the
// events above $2 are deleted.
const qRebuildReactions = `WITH gone AS (
	DELETE FROM reactions WHERE conv_id = $1 AND seq > $2 RETURNING target, user_id, emoji)
INSERT INTO reactions (conv_id, target, user_id, emoji, react_on, seq)
SELECT DISTINCT ON (g.target, g.user_id, g.emoji) $1, g.target, g.user_id, g.emoji, e.react_on, e.seq
FROM gone g
JOIN events e ON e.conv_id = $1 AND e.kind = 'reaction' AND e.target = g.target
	AND e.sender_user = g.user_id AND e.emoji = g.emoji AND e.seq <= $2
ORDER BY g.target, g.user_id, g.emoji, e.seq DESC`

// The file links of a purge and a rollback, over file_links_by_event:
// qPurgeLinks deletes those of the events purged up to $2, qRollbackLinks
// those of the events a rollback to $2 deleted. After the rollback's
// recalls are undone, qRebuildLinks writes the links of every message that
// remains, not recalled, with attachments (over events_attachments) whose
// file still exists, key-share locking the file as a send does (a
// concurrent DeleteFile waits, then finds the link); the links already
// there stay.
const (
	qPurgeLinks    = `DELETE FROM file_links WHERE conv_id = $1 AND seq <= $2`
	qRollbackLinks = `DELETE FROM file_links WHERE conv_id = $1 AND seq > $2`
	qRebuildLinks  = `INSERT INTO file_links (file_id, conv_id, seq)
SELECT f.id, $1, e.seq
FROM events e
CROSS JOIN LATERAL jsonb_to_recordset(e.attachments::jsonb) AS a (id text)
JOIN files f ON f.id = a.id
WHERE e.conv_id = $1 AND e.seq <= $2 AND e.attachments IS NOT NULL AND e.kind = 'message' AND e.recall_seq IS NULL
FOR KEY SHARE OF f
ON CONFLICT DO NOTHING`
)

// openMembers lists the users with an open period, in id order.
func openMembers(ctx context.Context, tx pgx.Tx, convID string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT user_id FROM periods WHERE conv_id = $1 AND to_seq IS NULL ORDER BY user_id COLLATE "C"`, convID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// qClampCursors clamp a conversation's cursors to its head after a
// rollback (over the cursor tables' conv_id indexes); $1 the conversation,
// $2 the head.
var qClampCursors = []string{
	`UPDATE delivered_cursors SET seq = $2 WHERE conv_id = $1 AND seq > $2`,
	`UPDATE read_cursors SET seq = $2 WHERE conv_id = $1 AND seq > $2`,
}
