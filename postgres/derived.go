package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// The writes of derived state (edits, reactions, and sends that reply or
// may mention) run as Go-side transactions of a few statements: lock the
// conversation row FOR NO KEY UPDATE like every appender, read what the
// checks need in one statement (keyedStateSQL), insert the event with its
// derived rows in one more (appendChatSQL), commit. Only the plain send,
// the benchmarked hot path, stays in one plpgsql call (parley_send_many).

// keyedReq is what a keyed write asks of keyedStateSQL.
type keyedReq struct {
	op      string
	conv    string
	cmid    string
	kind    parley.EventKind
	hash    []byte
	target  int64         // the message the write concerns (0: none)
	window  time.Duration // edit window (0: none)
	emoji   string        // reaction: the reactions row to read
	members bool          // read the open members (a text that may mention)
	already bool          // read the mentions of the target and its edits
	tsv     string        // a message's or an edit's search row (docLiteral; "": none)
	files   []string      // a message's attachments (lockAttachments)
}

// keyedState is the row of keyedStateSQL.
type keyedState struct {
	keySeq  *int64 // the request key's event (nil: none)
	keyMID  string
	keyKind string
	keyHash []byte
	tomb    bool
	open    bool

	tKind    *string // the target event (nil: none)
	tSender  string
	tRecall  bool
	tReplyTo int64
	tVisible bool
	tExpired bool

	members []string // open members, sorted (when asked)
	already []string // mentioned by the target and its edits (when asked)
	reactOn *bool    // the reactions row (nil: none)
	reactAt int64
}

// keyedStateSQL reads, under the row lock, everything a keyed write checks:
// the request key ($3 of user $2), its tombstone, the caller's open period,
// the target $4 (kind, sender, recalled, thread root, inside the caller's
// periods, older than window $5 µs when it is > 0), the open members ($6),
// the reactions row of emoji $7, and the mentions of the target's versions
// ($8).
const keyedStateSQL = `SELECT k.seq, coalesce(k.mid, ''), coalesce(k.kind, ''), k.request_hash,
	EXISTS (SELECT 1 FROM tombstones WHERE conv_id = $1 AND sender_user = $2 AND cmid = $3),
	EXISTS (SELECT 1 FROM periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL),
	t.kind, coalesce(t.sender_user, ''), t.recall_seq IS NOT NULL, coalesce(t.reply_to, 0),
	EXISTS (SELECT 1 FROM periods WHERE conv_id = $1 AND user_id = $2 AND from_seq <= $4 AND (to_seq IS NULL OR to_seq >= $4)),
	coalesce($5::bigint > 0 AND clock_timestamp() > t.created_at + $5::bigint * interval '1 microsecond', false),
	CASE WHEN $6::boolean THEN ARRAY(SELECT user_id FROM periods WHERE conv_id = $1 AND to_seq IS NULL ORDER BY user_id COLLATE "C") END,
	CASE WHEN $8::boolean THEN (SELECT string_agg(mentions, ' ') FROM events
		WHERE conv_id = $1 AND mentions IS NOT NULL AND (seq = $4 OR (target = $4 AND kind = 'edit'))) END,
	r.react_on, coalesce(r.seq, 0)
FROM (VALUES (1)) AS one (x)
LEFT JOIN events k ON k.conv_id = $1 AND k.sender_user = $2 AND k.cmid = $3
LEFT JOIN events t ON t.conv_id = $1 AND t.seq = $4
LEFT JOIN reactions r ON r.conv_id = $1 AND r.target = $4 AND r.user_id = $2 AND r.emoji = $7`

func readKeyedState(ctx context.Context, tx pgx.Tx, user string, q keyedReq) (keyedState, error) {
	var s keyedState
	var already *string
	err := tx.QueryRow(ctx, keyedStateSQL, q.conv, user, q.cmid, q.target, q.window.Microseconds(), q.members, q.emoji, q.already).
		Scan(&s.keySeq, &s.keyMID, &s.keyKind, &s.keyHash, &s.tomb, &s.open,
			&s.tKind, &s.tSender, &s.tRecall, &s.tReplyTo, &s.tVisible, &s.tExpired,
			&s.members, &already, &s.reactOn, &s.reactAt)
	if already != nil {
		s.already = parley.SplitMentions(*already)
	}
	return s, err
}

// messageTarget is the target as MessageTarget checks it.
func (s keyedState) messageTarget() parley.MessageTarget {
	t := parley.MessageTarget{Found: s.tKind != nil, Visible: s.tVisible, Recalled: s.tRecall, ReplyTo: s.tReplyTo}
	if t.Found {
		t.Kind = parley.EventKind(*s.tKind)
	}
	return t
}

// keyedResult is what a keyed write answers: the event's seq (the
// original's on a replay), mid, commit time (new events only), epoch.
type keyedResult struct {
	seq   int64
	mid   string
	at    time.Time
	epoch int64
	dup   bool
}

// appendChatSQL inserts an event with the columns of migration 0009 and
// its attachments $16 at the locked conversation's next seq, a mentions
// row per user of $14, the search row of tsvector literal $15 when it is
// not NULL (a message's queued, at its own seq and time; an edit's in
// search_docs, at its target's seq, sender and time, vseq its own seq: so
// a newer version is never queued, searchqueue.go), a file_links row per
// file of $17, and advances the head; it returns the seq and created_at.
const appendChatSQL = `WITH c AS (SELECT next_seq FROM conversations WHERE id = $1),
ev AS (
	INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body, target,
		reply_to, mentions, emoji, react_on, attachments)
	SELECT $1, c.next_seq, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $16 FROM c
	RETURNING seq, created_at),
m AS (
	INSERT INTO mentions (conv_id, user_id, seq) SELECT $1, u, ev.seq FROM ev, unnest($14::text[]) AS u),
l AS (
	INSERT INTO file_links (file_id, conv_id, seq) SELECT f, $1, ev.seq FROM ev, unnest($17::text[]) AS f),
d AS (
	INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
	SELECT $1, t.seq, ev.seq, t.sender_user, floor(extract(epoch FROM t.created_at) * 1000)::bigint, $15::text::tsvector
	FROM ev JOIN events t ON t.conv_id = $1 AND t.seq = $9
	WHERE $3 = 'edit' AND $15::text IS NOT NULL),
sq AS (
	INSERT INTO search_queue (conv_id, seq, sender_user, at, tsv)
	SELECT $1, ev.seq, $4, floor(extract(epoch FROM ev.created_at) * 1000)::bigint, $15::text::tsvector
	FROM ev WHERE $3 = 'message' AND $15::text IS NOT NULL),
up AS (
	UPDATE conversations SET next_seq = ev.seq + 1, last_at = ev.created_at FROM ev WHERE id = $1)
SELECT seq, created_at FROM ev`

// keyedWrite runs a keyed append in its own transaction, in the contract's
// order: lock (NOT_MEMBER) → request key (replay, or IDEMPOTENCY_MISMATCH)
// → tombstone (ORIGINAL_EXPIRED) → open period (NOT_MEMBER) → decide (the
// target's checks; it returns the event to append, or nil and the answer
// when nothing is to be written) → the attachments q.files (NOT_FOUND,
// ErrNotAttachable), locked until the commit → insert with its derived
// rows. The fault
// points sit where Recall has them: store.before_insert before the
// transaction, store.before_commit after an insert.
func (db *DB) keyedWrite(ctx context.Context, p parley.Principal, q keyedReq,
	decide func(s keyedState) (*parley.Event, keyedResult, error)) (keyedResult, error) {
	if err := fault.Hit(fault.StoreBeforeInsert); err != nil {
		return keyedResult{}, err
	}
	return keyed(q.op, func() (keyedResult, error) {
		var res keyedResult
		err := inTx(ctx, db.pool, func(tx pgx.Tx) error {
			c, err := lockConv(ctx, tx, q.conv, lockAppend, parley.ErrNotMember)
			if err != nil {
				return err
			}
			s, err := readKeyedState(ctx, tx, p.User, q)
			switch {
			case err != nil:
				return err
			case s.keySeq != nil:
				if err := parley.CheckReplay(parley.EventKind(s.keyKind), s.keyHash, q.kind, q.hash); err != nil {
					return err
				}
				res = keyedResult{seq: *s.keySeq, mid: s.keyMID, epoch: c.epoch, dup: true}
				return nil
			case s.tomb:
				return parley.ErrOriginalExpired
			case !s.open:
				return parley.ErrNotMember
			}
			ev, answer, err := decide(s)
			if err != nil || ev == nil {
				res, res.epoch = answer, c.epoch
				return err
			}
			ev.Sender, ev.Device = p.User, p.DeviceID
			if len(q.files) > 0 {
				if ev.Attachments, err = lockAttachments(ctx, tx, p.User, q.files); err != nil {
					return err
				}
			}
			if res, err = appendChat(ctx, tx, q, ev); err != nil {
				return err
			}
			res.epoch = c.epoch
			return fault.Hit(fault.StoreBeforeCommit)
		})
		return res, err
	})
}

// appendChat inserts ev (appendChatSQL) and, for a reaction, moves its
// reactions row to the new state.
func appendChat(ctx context.Context, tx pgx.Tx, q keyedReq, ev *parley.Event) (keyedResult, error) {
	res := keyedResult{mid: parley.NewID()}
	var on *bool
	if ev.Kind == parley.EventReaction {
		on = &ev.On
	}
	err := tx.QueryRow(ctx, appendChatSQL, q.conv, res.mid, string(ev.Kind), ev.Sender, ev.Device, q.cmid, q.hash,
		ev.Body, optInt(ev.Target), optInt(ev.ReplyTo), joinMentions(ev.Mentions), optString(ev.Emoji), on, ev.Mentions,
		optString(q.tsv), optString(parley.EncodeAttachments(ev.Attachments)), attachmentIDs(ev.Attachments)).
		Scan(&res.seq, &res.at)
	if err != nil {
		return res, err
	}
	res.at = ms(res.at)
	if ev.Kind == parley.EventReaction {
		_, err = tx.Exec(ctx, `INSERT INTO reactions (conv_id, target, user_id, emoji, react_on, seq)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (conv_id, target, user_id, emoji) DO UPDATE SET react_on = EXCLUDED.react_on, seq = EXCLUDED.seq`,
			q.conv, ev.Target, ev.Sender, ev.Emoji, ev.On, res.seq)
	}
	return res, err
}

// sendChat is Send for a message that replies, may mention someone or
// attaches files, in its own transaction (keyedWrite): after the open
// period, the reply's target (NOT_FOUND, ALREADY_RECALLED), stored as its
// thread's root; the attachments; the mentions against the open members.
func (db *DB) sendChat(ctx context.Context, p parley.Principal, r parley.SendRequest) (parley.Sent, error) {
	mentions := parley.HasMentionToken(r.Body)
	q := keyedReq{op: "send", conv: r.Conv, cmid: r.CMID, kind: parley.EventMessage, hash: parley.SendFingerprint(r),
		target: r.ReplyTo, members: mentions, tsv: docLiteral(r.Conv, p.User, r.Body), files: r.Attachments}
	res, err := db.keyedWrite(ctx, p, q, func(s keyedState) (*parley.Event, keyedResult, error) {
		ev := &parley.Event{Kind: parley.EventMessage, Body: r.Body}
		if r.ReplyTo != 0 {
			t := s.messageTarget()
			if err := t.Check(r.ReplyTo); err != nil {
				return nil, keyedResult{}, err
			}
			ev.ReplyTo = t.Root(r.ReplyTo)
		}
		if mentions {
			ev.Mentions = parley.Mentioned(r.Body, p.User, s.members, r.AllMax, nil)
		}
		return ev, keyedResult{}, nil
	})
	if err != nil {
		return parley.Sent{}, err
	}
	if !res.dup {
		db.queuedRows(ctx, 1)
	}
	return parley.Sent{Conv: r.Conv, Seq: res.seq, MID: res.mid, Dup: res.dup, Epoch: res.epoch, At: res.at}, nil
}

// Edit implements parley.Store in its own transaction (keyedWrite).
func (db *DB) Edit(ctx context.Context, p parley.Principal, r parley.EditRequest) (parley.Edited, error) {
	if err := parley.ValidateEdit(r); err != nil {
		return parley.Edited{}, err
	}
	mentions := parley.HasMentionToken(r.Body)
	q := keyedReq{op: "edit", conv: r.Conv, cmid: r.CMID, kind: parley.EventEdit,
		hash: parley.EditFingerprint(r.Conv, r.Target, r.Body), target: r.Target, window: r.Window,
		members: mentions, already: mentions,
		// Only the sender edits (NOT_SENDER): the message's sender is p.User.
		tsv: docLiteral(r.Conv, p.User, r.Body)}
	res, err := db.keyedWrite(ctx, p, q, func(s keyedState) (*parley.Event, keyedResult, error) {
		t := parley.EditTarget{Found: s.tKind != nil, Visible: s.tVisible, Sender: s.tSender,
			Recalled: s.tRecall, Expired: s.tExpired}
		if t.Found {
			t.Kind = parley.EventKind(*s.tKind)
		}
		if err := t.Check(p.User, r.Target); err != nil {
			return nil, keyedResult{}, err
		}
		ev := &parley.Event{Kind: parley.EventEdit, Target: r.Target, Body: r.Body}
		if mentions {
			ev.Mentions = parley.Mentioned(r.Body, p.User, s.members, r.AllMax, s.already)
		}
		return ev, keyedResult{}, nil
	})
	if err != nil {
		return parley.Edited{}, err
	}
	return parley.Edited{Conv: r.Conv, Seq: res.seq, Dup: res.dup}, nil
}

// React implements parley.Store in its own transaction (keyedWrite). The
// reactions row, read under the conversation's row lock, decides whether
// the state already holds; concurrent identical reactions queue on that
// lock, so exactly one writes an event.
func (db *DB) React(ctx context.Context, p parley.Principal, r parley.ReactRequest) (parley.Reacted, error) {
	if err := parley.ValidateReact(r); err != nil {
		return parley.Reacted{}, err
	}
	q := keyedReq{op: "react", conv: r.Conv, cmid: r.CMID, kind: parley.EventReaction,
		hash: parley.ReactFingerprint(r.Conv, r.Target, r.Emoji, r.On), target: r.Target, emoji: r.Emoji}
	res, err := db.keyedWrite(ctx, p, q, func(s keyedState) (*parley.Event, keyedResult, error) {
		if err := s.messageTarget().Check(r.Target); err != nil {
			return nil, keyedResult{}, err
		}
		if on := s.reactOn != nil && *s.reactOn; on == r.On {
			return nil, keyedResult{seq: s.reactAt, dup: true}, nil
		}
		return &parley.Event{Kind: parley.EventReaction, Target: r.Target, Emoji: r.Emoji, On: r.On}, keyedResult{}, nil
	})
	if err != nil {
		return parley.Reacted{}, err
	}
	return parley.Reacted{Conv: r.Conv, Seq: res.seq, Dup: res.dup}, nil
}

// derivedSQL reads the DerivedRows of the messages $4 of conversation $1
// inside the ranges [$2[i], $3[i]] (the caller's periods, capped at the
// read's AsOf: rule 2, in the query): their edits and reactions over
// events_targets, the replies to them over events_replies (only messages
// have a reply_to). The
// conversation's epoch comes on every row (one row with seq 0 when there
// are none), so a rollback since the page was read is noticed.
const derivedSQL = `SELECT c.epoch, coalesce(d.seq, 0), coalesce(d.kind, ''), coalesce(d.sender_user, ''),
	coalesce(d.body, ''), coalesce(d.created_at, 'epoch'), coalesce(d.target, 0), coalesce(d.reply_to, 0),
	coalesce(d.emoji, ''), coalesce(d.react_on, false), d.recall_seq IS NOT NULL
FROM conversations c
LEFT JOIN LATERAL (
	SELECT e.* FROM unnest($2::bigint[], $3::bigint[]) AS r (lo, hi)
	CROSS JOIN LATERAL (
		SELECT * FROM events
		WHERE conv_id = $1 AND target = ANY ($4::bigint[]) AND kind IN ('edit', 'reaction') AND seq >= r.lo AND seq <= r.hi
		UNION ALL
		SELECT * FROM events
		WHERE conv_id = $1 AND reply_to = ANY ($4::bigint[]) AND reply_to IS NOT NULL
			AND seq >= r.lo AND seq <= r.hi) e
) d ON true
WHERE c.id = $1`

// decorate sets Derived on the messages of evs (ascending) as user reads
// them with periods ps and AsOf asOf (parley.Decorate), reading on q (the
// pool, or the read transaction of a search). again reports that the
// conversation's epoch is no longer epoch: the caller reads again.
func (db *DB) decorate(ctx context.Context, q querier, conv string, ps parley.Periods, user string, asOf, epoch int64, evs []parley.Event) (again bool, err error) {
	seqs := parley.MessageSeqs(evs)
	if len(seqs) == 0 {
		return false, nil
	}
	// Everything that concerns a message comes after it.
	ranges := ps.Ranges(seqs[0], asOf)
	var rows []parley.DerivedRow
	if len(ranges) > 0 {
		lo, hi := splitRanges(ranges)
		rs, err := q.Query(ctx, derivedSQL, conv, lo, hi, seqs)
		if err != nil {
			return false, err
		}
		if rows, again, err = scanDerived(rs, conv, epoch); err != nil || again {
			return again, err
		}
	}
	parley.Decorate(evs, rows, user, asOf)
	return false, nil
}

// scanDerived reads derivedSQL's rows of conv: the derived rows, and
// again when the conversation's epoch is no longer epoch.
func scanDerived(rs pgx.Rows, conv string, epoch int64) (rows []parley.DerivedRow, again bool, err error) {
	var e int64
	var d parley.DerivedRow
	_, err = pgx.ForEachRow(rs, []any{&e, &d.Seq, &d.Kind, &d.Sender, &d.Body, &d.At, &d.Target, &d.ReplyTo, &d.Emoji, &d.On, &d.Recalled}, func() error {
		if e != epoch {
			again = true
		}
		if d.Seq != 0 {
			finish(&d, conv)
			rows = append(rows, d)
		}
		return nil
	})
	return rows, again, err
}

// splitRanges turns ranges into the two arrays the page statements take.
func splitRanges(ranges [][2]int64) (lo, hi []int64) {
	lo, hi = make([]int64, len(ranges)), make([]int64, len(ranges))
	for i, rg := range ranges {
		lo[i], hi[i] = rg[0], rg[1]
	}
	return lo, hi
}

// versionsSQL reads the edits of message $4 inside the ranges [$2[i],
// $3[i]], ascending, over events_targets.
const versionsSQL = `SELECT e.seq, e.body, e.created_at FROM unnest($2::bigint[], $3::bigint[]) AS r (lo, hi)
CROSS JOIN LATERAL (
	SELECT * FROM events WHERE conv_id = $1 AND target = $4 AND kind = 'edit' AND seq >= r.lo AND seq <= r.hi) e
ORDER BY e.seq`

// Versions implements parley.Store: the checks and the message as Fetch
// reads it, then its edits inside the caller's periods up to the capped
// head.
func (db *DB) Versions(ctx context.Context, p parley.Principal, convID string, seq int64) ([]parley.Version, bool, error) {
	f, err := db.fetchRaw(ctx, p, convID, seq)
	switch {
	case err != nil:
		return nil, false, err
	case f.ev.Kind != parley.EventMessage:
		return nil, false, parley.ErrNoEvent
	case f.ev.Recalled:
		return nil, true, nil
	}
	out := []parley.Version{{Seq: f.ev.Seq, Body: f.ev.Body, At: f.ev.At}}
	if ranges := f.ps.Ranges(seq, f.ps.Head(f.head)); len(ranges) > 0 {
		lo, hi := splitRanges(ranges)
		rows, err := db.pool.Query(ctx, versionsSQL, convID, lo, hi, seq)
		if err != nil {
			return nil, false, wrap("versions", err)
		}
		var v parley.Version
		_, err = pgx.ForEachRow(rows, []any{&v.Seq, &v.Body, &v.At}, func() error {
			v.At = ms(v.At)
			out = append(out, v)
			return nil
		})
		if err != nil {
			return nil, false, wrap("versions", err)
		}
	}
	return out, false, nil
}

// OpenDirect implements parley.Store in one transaction: the insert of the
// conversation row is the arbiter (ON CONFLICT DO NOTHING: a concurrent
// open of the same pair waits for the other's commit, then finds its row),
// and only the opener that inserted it writes the members.
func (db *DB) OpenDirect(ctx context.Context, p parley.Principal, user string) (parley.Conversation, bool, error) {
	if err := parley.CheckDirectPeer(p.User, user); err != nil {
		return parley.Conversation{}, false, err
	}
	id := parley.DirectID(p.User, user)
	var created bool
	err := db.write(ctx, "open direct", func(tx pgx.Tx) error {
		var active bool
		err := tx.QueryRow(ctx, `SELECT NOT disabled FROM users WHERE id = $1`, user).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !active) {
			return parley.ErrUserNotFound
		}
		if err != nil {
			return err
		}
		var at time.Time
		err = tx.QueryRow(ctx, `INSERT INTO conversations (id, kind, title, owner) VALUES ($1, 'direct', '', '')
			ON CONFLICT (id) DO NOTHING RETURNING created_at`, id).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // it exists: read below, after the commit
		}
		if err != nil {
			return err
		}
		created = true
		return insertMembers(ctx, tx, id, p.User, []string{p.User, user})
	})
	if err != nil {
		return parley.Conversation{}, false, err
	}
	c, err := db.Conversation(ctx, id)
	return c, created, err
}
