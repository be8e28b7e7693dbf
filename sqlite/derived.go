package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// visibleTo is the rule-2 filter on an events row e: its seq inside the
// membership periods of user ?2 in conversation e.conv_id.
const visibleTo = `EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = e.conv_id AND p.user_id = ?2
	AND p.from_seq <= e.seq AND (p.to_seq IS NULL OR e.seq <= p.to_seq))`

// messageTarget reads what a reply, an edit or a reaction checks about the
// event seq of conv, as user may see it.
func messageTarget(ctx context.Context, tx *txn, convID string, seq int64, user string) (parley.MessageTarget, error) {
	var t parley.MessageTarget
	err := tx.QueryRowContext(ctx, `SELECT e.kind, `+visibleTo+`, e.recall_seq IS NOT NULL, coalesce(e.reply_to, 0)
		FROM events e WHERE e.conv_id = ?1 AND e.seq = ?3`, convID, user, seq).Scan(&t.Kind, &t.Visible, &t.Recalled, &t.ReplyTo)
	if errors.Is(err, sql.ErrNoRows) {
		return t, nil
	}
	t.Found = err == nil
	return t, err
}

// mentioned resolves text's mentions against the members with an open
// period (parley.Mentioned); it reads them only when text has an '@'.
func mentioned(ctx context.Context, tx *txn, convID, text, sender string, allMax int, already []string) ([]string, error) {
	if !parley.HasMentionToken(text) {
		return nil, nil
	}
	open, err := openMembers(ctx, tx, convID)
	if err != nil {
		return nil, err
	}
	return parley.Mentioned(text, sender, open, allMax, already), nil
}

// Edit implements parley.Store.
func (db *DB) Edit(ctx context.Context, p parley.Principal, r parley.EditRequest) (parley.Edited, error) {
	if err := parley.ValidateEdit(r); err != nil {
		return parley.Edited{}, err
	}
	hash := parley.EditFingerprint(r.Conv, r.Target, r.Body)
	// Only the sender edits: the version's sender is the caller.
	terms := searchTerms(r.Conv, p.User, r.Body)
	if err := fault.Hit(fault.StoreBeforeInsert); err != nil {
		return parley.Edited{}, err
	}
	var out parley.Edited
	err := db.keyed(ctx, "edit", func(tx *txn) error {
		c, seq, _, found, err := keyedStart(ctx, tx, r.Conv, p.User, r.CMID, parley.EventEdit, hash)
		if err != nil || found {
			out = parley.Edited{Conv: r.Conv, Seq: seq, Dup: found}
			return err
		}
		var t parley.EditTarget
		var sentAt int64
		err = tx.QueryRowContext(ctx, `SELECT e.kind, `+visibleTo+`, e.sender_user, e.recall_seq IS NOT NULL,
			?4 > 0 AND `+nowMS+` > e.created_at + ?4, e.created_at
			FROM events e WHERE e.conv_id = ?1 AND e.seq = ?3`, r.Conv, p.User, r.Target, r.Window.Milliseconds()).
			Scan(&t.Kind, &t.Visible, &t.Sender, &t.Recalled, &t.Expired, &sentAt)
		if t.Found = err == nil; err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := t.Check(p.User, r.Target); err != nil {
			return err
		}
		already, err := mentionedBefore(ctx, tx, r.Conv, r.Target)
		if err != nil {
			return err
		}
		ev := parley.Event{Kind: parley.EventEdit, Sender: p.User, Device: p.DeviceID, Body: r.Body, Target: r.Target}
		if ev.Mentions, err = mentioned(ctx, tx, r.Conv, r.Body, p.User, r.AllMax, already); err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, &c, &ev, r.CMID, hash); err != nil {
			return err
		}
		// The new version's index row sorts at the message's time.
		if err := indexDocs(ctx, tx, []searchDoc{{conv: r.Conv, seq: r.Target, vseq: ev.Seq, sender: p.User, at: sentAt, terms: terms}}, &db.queue); err != nil {
			return err
		}
		out = parley.Edited{Conv: r.Conv, Seq: ev.Seq}
		return fault.Hit(fault.StoreBeforeCommit)
	})
	return out, err
}

// mentionedBefore returns everyone message target or an edit of it has
// mentioned: an edit notifies only the users it newly mentions.
func mentionedBefore(ctx context.Context, tx *txn, convID string, target int64) ([]string, error) {
	lists, err := scanIDs(tx.QueryContext(ctx, `SELECT mentions FROM events
		WHERE conv_id = ?1 AND mentions IS NOT NULL AND (seq = ?2 OR (target = ?2 AND kind = 'edit'))`, convID, target))
	var users []string
	for _, l := range lists {
		users = append(users, parley.SplitMentions(l)...)
	}
	return users, err
}

// React implements parley.Store.
func (db *DB) React(ctx context.Context, p parley.Principal, r parley.ReactRequest) (parley.Reacted, error) {
	if err := parley.ValidateReact(r); err != nil {
		return parley.Reacted{}, err
	}
	hash := parley.ReactFingerprint(r.Conv, r.Target, r.Emoji, r.On)
	if err := fault.Hit(fault.StoreBeforeInsert); err != nil {
		return parley.Reacted{}, err
	}
	var out parley.Reacted
	err := db.keyed(ctx, "react", func(tx *txn) error {
		c, seq, _, found, err := keyedStart(ctx, tx, r.Conv, p.User, r.CMID, parley.EventReaction, hash)
		if err != nil || found {
			out = parley.Reacted{Conv: r.Conv, Seq: seq, Dup: found}
			return err
		}
		t, err := messageTarget(ctx, tx, r.Conv, r.Target, p.User)
		if err != nil {
			return err
		}
		if err := t.Check(r.Target); err != nil {
			return err
		}
		var on bool
		var setBy int64
		err = tx.QueryRowContext(ctx, `SELECT react_on, seq FROM reactions
			WHERE conv_id = ? AND target = ? AND user_id = ? AND emoji = ?`, r.Conv, r.Target, p.User, r.Emoji).Scan(&on, &setBy)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if on == r.On {
			// The state holds already (no row: never set, off).
			out = parley.Reacted{Conv: r.Conv, Seq: setBy, Dup: true}
			return nil
		}
		ev := parley.Event{Kind: parley.EventReaction, Sender: p.User, Device: p.DeviceID, Target: r.Target, Emoji: r.Emoji, On: r.On}
		if err := appendEvent(ctx, tx, &c, &ev, r.CMID, hash); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO reactions (conv_id, target, user_id, emoji, react_on, seq) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (conv_id, target, user_id, emoji) DO UPDATE SET react_on = excluded.react_on, seq = excluded.seq`,
			r.Conv, r.Target, p.User, r.Emoji, r.On, ev.Seq); err != nil {
			return err
		}
		out = parley.Reacted{Conv: r.Conv, Seq: ev.Seq}
		return fault.Hit(fault.StoreBeforeCommit)
	})
	return out, err
}

// derivedSQL reads the DerivedRows of the messages whose seqs are the JSON
// array ?3 of conversation ?1, for user ?2 with head ?4: one probe of
// events_targets and one of events_replies per message. Two arms, not one
// OR: SQLite answers an OR across two indexes with a scan of the whole
// conversation's log.
const derivedSQL = `SELECT ` + eventColumns + ` FROM events e
	WHERE e.conv_id = ?1 AND e.target IN (SELECT value FROM json_each(?3))
	AND e.kind IN ('edit', 'reaction') AND e.seq <= ?4 AND ` + visibleTo + `
UNION ALL
SELECT ` + eventColumns + ` FROM events e
	WHERE e.conv_id = ?1 AND e.reply_to IN (SELECT value FROM json_each(?3))
	AND e.kind = 'message' AND e.seq <= ?4 AND ` + visibleTo

// derivedRows reads the DerivedRows of the messages seqs of conv as user
// reads them with head asOf: their edits and reactions, and the replies of
// those that are thread roots, each inside user's periods (rule 2).
func derivedRows(ctx context.Context, tx *txn, convID, user string, seqs []int64, asOf int64) ([]parley.DerivedRow, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(seqs)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, derivedSQL, convID, user, string(list), asOf)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []parley.DerivedRow
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// decorate sets the Derived state of the messages among evs as user reads
// them with head asOf.
func decorate(ctx context.Context, tx *txn, evs []parley.Event, convID, user string, asOf int64) error {
	seqs := parley.MessageSeqs(evs)
	if len(seqs) == 0 {
		return nil
	}
	rows, err := derivedRows(ctx, tx, convID, user, seqs, asOf)
	if err != nil {
		return err
	}
	parley.Decorate(evs, rows, user, asOf)
	return nil
}

// threadIn appends to evs the events of thread root with from <= seq <=
// to: the root and the messages that reply to it, ascending, at most limit.
func threadIn(ctx context.Context, tx *txn, evs []parley.Event, convID string, root, from, to int64, limit int) ([]parley.Event, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM events
		WHERE conv_id = ?1 AND seq >= ?3 AND seq <= ?4 AND (seq = ?2 OR (reply_to = ?2 AND kind = 'message'))
		ORDER BY seq LIMIT ?5`, convID, root, from, to, limit)
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

// Versions implements parley.Store.
func (db *DB) Versions(ctx context.Context, p parley.Principal, convID string, seq int64) ([]parley.Version, bool, error) {
	if err := parley.CheckConvID(convID); err != nil {
		return nil, false, err
	}
	if err := parley.CheckFetchSeq(seq); err != nil {
		return nil, false, err
	}
	var out []parley.Version
	var recalled bool
	err := db.read(ctx, "versions", func(tx *txn) error {
		c, ps, err := memberView(ctx, tx, convID, p.User)
		if err != nil {
			return err
		}
		head := ps.Head(c.head())
		switch {
		case seq > head:
			return parley.ErrNoEvent
		case !ps.Visible(seq):
			return parley.ErrNotMember
		}
		rows, err := tx.QueryContext(ctx, `SELECT e.kind, e.seq, e.body, e.created_at, e.recall_seq IS NOT NULL FROM events e
			WHERE e.conv_id = ?1 AND e.seq <= ?4 AND (e.seq = ?3 OR (e.target = ?3 AND e.kind = 'edit' AND `+visibleTo+`))
			ORDER BY e.seq`, convID, p.User, seq, head)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v parley.Version
			var kind string
			var at int64
			var gone bool
			if err := rows.Scan(&kind, &v.Seq, &v.Body, &at, &gone); err != nil {
				return err
			}
			if v.Seq == seq {
				if kind != string(parley.EventMessage) {
					return parley.Errorf(parley.CodeNotFound, "event %d is no message", seq)
				}
				recalled = gone
			}
			v.At = msTime(at)
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 || out[0].Seq != seq {
			return parley.ErrNoEvent
		}
		return nil
	})
	if err != nil || recalled {
		return nil, recalled, err
	}
	return out, false, nil
}

// OpenDirect implements parley.Store.
func (db *DB) OpenDirect(ctx context.Context, p parley.Principal, user string) (parley.Conversation, bool, error) {
	if err := parley.CheckDirectPeer(p.User, user); err != nil {
		return parley.Conversation{}, false, err
	}
	id := parley.DirectID(p.User, user)
	var out parley.Conversation
	var created bool
	err := db.write(ctx, "open direct", func(tx *txn) error {
		var disabled bool
		err := tx.QueryRowContext(ctx, `SELECT disabled FROM users WHERE id = ?`, user).Scan(&disabled)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && disabled) {
			return parley.ErrUserNotFound
		}
		if err != nil {
			return err
		}
		c, err := scanConv(tx.QueryRowContext(ctx, qLoadConv, id))
		if err == nil {
			out = c.public()
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO conversations (id, kind, title, owner, last_at, created_at)
			VALUES (?, 'direct', '', '', `+nowMS+`, `+nowMS+`)`, id); err != nil {
			return err
		}
		if c, err = loadConv(ctx, tx, id, parley.ErrConvNotFound); err != nil {
			return err
		}
		for _, m := range []string{p.User, user} {
			ev := parley.Event{Kind: parley.EventMemberJoined, Sender: p.User, User: m}
			if err := appendEvent(ctx, tx, &c, &ev, "", nil); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO periods (conv_id, user_id, from_seq) VALUES (?, ?, 1)`, id, m); err != nil {
				return err
			}
		}
		out, created = c.public(), true
		return nil
	})
	return out, created, err
}

// Directory implements parley.Store.
func (db *DB) Directory(ctx context.Context, p parley.Principal, q parley.DirectoryQuery) (parley.AdminPage[parley.DirectoryEntry], error) {
	prefix, after, err := parley.CheckDirectoryQuery(q)
	if err != nil {
		return parley.AdminPage[parley.DirectoryEntry]{}, err
	}
	var entries []parley.DirectoryEntry
	err = db.read(ctx, "directory", func(tx *txn) error {
		entries = nil
		// Prefixes match with substr, not LIKE: '%' and '_' in a prefix are
		// characters, not patterns.
		rows, err := tx.QueryContext(ctx, `SELECT u.id, u.display_name FROM users u
			WHERE u.disabled = 0 AND u.id > ?1 AND (?6 = '' OR u.id = ?6)
			AND (?2 = '' OR substr(u.id, 1, length(?2)) = ?2 OR substr(coalesce(u.email, ''), 1, length(?2)) = ?2)
			AND (?3 = 0 OR u.id = ?4 OR EXISTS (SELECT 1 FROM periods a JOIN periods b ON b.conv_id = a.conv_id
				WHERE a.user_id = ?4 AND a.to_seq IS NULL AND b.user_id = u.id AND b.to_seq IS NULL))
			ORDER BY u.id LIMIT ?5`, after, prefix, q.Shared, p.User, q.Limit+1, q.ID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e parley.DirectoryEntry
			if err := rows.Scan(&e.ID, &e.DisplayName); err != nil {
				return err
			}
			entries = append(entries, e)
		}
		return rows.Err()
	})
	if err != nil {
		return parley.AdminPage[parley.DirectoryEntry]{}, err
	}
	return parley.NewAdminPage(entries, q.Limit, func(e parley.DirectoryEntry) string { return e.ID }), nil
}

// purgeDerived deletes the derived rows of the events up to cut (and of
// their targets), file links included: a purge removes them with their
// events. (The search
// index rows go before the events: unindex.)
func purgeDerived(ctx context.Context, tx *txn, convID string, cut int64) error {
	for _, q := range []string{
		`DELETE FROM reactions WHERE conv_id = ? AND target <= ?`,
		`DELETE FROM mentions WHERE conv_id = ? AND seq <= ?`,
		qUnlinkUpTo,
	} {
		if _, err := tx.ExecContext(ctx, q, convID, cut); err != nil {
			return err
		}
	}
	return nil
}

// rollbackDerived returns the derived rows to what the events up to toSeq
// say: mentions after it go, and a reaction row set after it returns to
// the state of the latest reaction event at or below it (none: no row).
// Every reaction event has its key's row except one whose target a purge
// removed (below min_seq): those keys stay without one. The search index
// of the conversation is rebuilt from the events that remain (a recall
// undone, an edit removed), as RebuildSearch does; its old rows went
// before the events (unindex). So are its file links: those of removed
// messages go, those of a recall undone come back.
func rollbackDerived(ctx context.Context, tx *txn, convID string, toSeq int64) error {
	if _, err := reindex(ctx, tx, convID); err != nil {
		return err
	}
	for _, q := range []string{qUnlinkConv, qRelink} {
		if _, err := tx.ExecContext(ctx, q, convID); err != nil {
			return err
		}
	}
	for _, q := range []string{
		`DELETE FROM mentions WHERE conv_id = ?1 AND seq > ?2`,
		`DELETE FROM reactions WHERE conv_id = ?1 AND seq > ?2`,
		`INSERT INTO reactions (conv_id, target, user_id, emoji, react_on, seq)
			SELECT e.conv_id, e.target, e.sender_user, e.emoji, e.react_on, max(e.seq) FROM events e
			WHERE e.conv_id = ?1 AND e.kind = 'reaction' AND e.seq <= ?2
			AND e.target >= (SELECT min_seq FROM conversations WHERE id = ?1)
			GROUP BY e.target, e.sender_user, e.emoji
			ON CONFLICT (conv_id, target, user_id, emoji) DO NOTHING`,
	} {
		if _, err := tx.ExecContext(ctx, q, convID, toSeq); err != nil {
			return err
		}
	}
	return nil
}

// checkThread refuses a thread root that is no message user may see at or
// below head.
func checkThread(ctx context.Context, tx *txn, convID, user string, root, head int64) error {
	t, err := messageTarget(ctx, tx, convID, root, user)
	if err != nil {
		return err
	}
	if !t.Found || !t.Visible || t.Kind != parley.EventMessage || root > head {
		return parley.Errorf(parley.CodeNotFound, "no message %d in this conversation", root)
	}
	return nil
}
