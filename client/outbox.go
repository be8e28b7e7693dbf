package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, so the client needs no cgo
)

// Kind is what an outbox item asks the server to do.
type Kind string

const (
	KindSend   Kind = "send"   // post a message, or a reply (wire "send")
	KindRecall Kind = "recall" // recall a message (wire "recall")
	KindEdit   Kind = "edit"   // edit a message (wire "edit")
	KindReact  Kind = "react"  // set or remove a reaction (wire "react")
)

// Item is one outbox entry: a request the client owes the server until it
// ends. It ends exactly once, on success (sent, recalled, edited or
// reacted, dup or not) or on a terminal code; until then it is pending and
// resent with the same CMID after every reconnect.
type Item struct {
	ID      int64 // position in the outbox; pending items are sent in ID order
	CMID    string
	Conv    string
	Kind    Kind
	Body    string // KindSend: the message text; KindEdit: the new text
	Target  int64  // KindRecall, KindEdit, KindReact: the seq of the message it concerns
	ReplyTo int64  // KindSend: the message it replies to (0: none)
	Emoji   string // KindReact: the emoji
	On      bool   // KindReact: set (true) or remove (false)
	Created time.Time

	// The outcome, set once Done.
	Done  bool
	Seq   int64       // the seq of the event written: the message, recall, edit or reaction (for a reaction whose state already held, the event that set it, 0 if none did)
	Dup   bool        // the server had already executed this cmid: an earlier attempt landed
	Epoch int64       // the conversation's epoch at the send (sends only)
	Code  parley.Code // the terminal code the item ended with; empty on success
	Msg   string      // the server's message for Code
	Ended time.Time
}

// Err returns the terminal error the item ended with as a *parley.Error, or
// nil (pending, or ended in success).
func (it Item) Err() error {
	if it.Code == "" {
		return nil
	}
	return &parley.Error{Code: it.Code, Msg: it.Msg}
}

// request is the item's wire frame: the same key and content on every
// attempt, so the server's fingerprint always matches.
func (it Item) request() wire.Request {
	r := wire.Request{T: string(it.Kind), Conv: it.Conv, CMID: it.CMID}
	switch it.Kind {
	case KindSend:
		r.Body = it.Body
		if it.ReplyTo != 0 {
			r.ReplyTo = &it.ReplyTo
		}
	case KindRecall:
		r.Target = &it.Target
	case KindEdit:
		r.Target, r.Body = &it.Target, it.Body
	case KindReact:
		r.Target, r.Emoji, r.On = &it.Target, it.Emoji, &it.On
	}
	return r
}

// Cursor is where the client stands in a conversation: After is the seq up
// to which every visible event was handed to the Handler, in Epoch. Epoch 0
// means not synced yet.
type Cursor struct {
	After int64
	Epoch int64
}

// schema is the local file. The outbox keeps ended items with their
// outcome for Options.KeepEnded, so a checker can prove every item ended
// exactly once; cursors hold one row per conversation the client has synced.
const schema = `
CREATE TABLE IF NOT EXISTS outbox (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	cmid       TEXT    NOT NULL UNIQUE,
	conv       TEXT    NOT NULL,
	kind       TEXT    NOT NULL CHECK (kind IN ('send', 'recall')),
	body       TEXT    NOT NULL DEFAULT '',
	target     INTEGER NOT NULL DEFAULT 0,
	created_ms INTEGER NOT NULL,
	done       INTEGER NOT NULL DEFAULT 0,
	seq        INTEGER NOT NULL DEFAULT 0,
	dup        INTEGER NOT NULL DEFAULT 0,
	epoch      INTEGER NOT NULL DEFAULT 0,
	code       TEXT    NOT NULL DEFAULT '',
	msg        TEXT    NOT NULL DEFAULT '',
	ended_ms   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (id) WHERE done = 0;
CREATE INDEX IF NOT EXISTS outbox_ended ON outbox (ended_ms) WHERE done = 1;
CREATE TABLE IF NOT EXISTS cursors (
	conv  TEXT    PRIMARY KEY,
	after INTEGER NOT NULL,
	epoch INTEGER NOT NULL
);
PRAGMA user_version = 1;
`

// schemaV2 adds the items of edits, reactions and replies. The kind CHECK
// of version 1 cannot be altered in place, so the table is rebuilt in one
// transaction, ids and the AUTOINCREMENT counter kept: pending items keep
// their order, and no id of a pruned item is handed out again.
const schemaV2 = `
CREATE TABLE outbox_v2 (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	cmid       TEXT    NOT NULL UNIQUE,
	conv       TEXT    NOT NULL,
	kind       TEXT    NOT NULL CHECK (kind IN ('send', 'recall', 'edit', 'react')),
	body       TEXT    NOT NULL DEFAULT '',
	target     INTEGER NOT NULL DEFAULT 0,
	reply_to   INTEGER NOT NULL DEFAULT 0,
	emoji      TEXT    NOT NULL DEFAULT '',
	react_on   INTEGER NOT NULL DEFAULT 0,
	created_ms INTEGER NOT NULL,
	done       INTEGER NOT NULL DEFAULT 0,
	seq        INTEGER NOT NULL DEFAULT 0,
	dup        INTEGER NOT NULL DEFAULT 0,
	epoch      INTEGER NOT NULL DEFAULT 0,
	code       TEXT    NOT NULL DEFAULT '',
	msg        TEXT    NOT NULL DEFAULT '',
	ended_ms   INTEGER NOT NULL DEFAULT 0
);
INSERT INTO outbox_v2 (id, cmid, conv, kind, body, target, created_ms, done, seq, dup, epoch, code, msg, ended_ms)
	SELECT id, cmid, conv, kind, body, target, created_ms, done, seq, dup, epoch, code, msg, ended_ms FROM outbox;
DELETE FROM sqlite_sequence WHERE name = 'outbox_v2';
INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_v2', seq FROM sqlite_sequence WHERE name = 'outbox';
DROP TABLE outbox;
ALTER TABLE outbox_v2 RENAME TO outbox;
CREATE INDEX outbox_pending ON outbox (id) WHERE done = 0;
CREATE INDEX outbox_ended ON outbox (ended_ms) WHERE done = 1;
PRAGMA user_version = 2;
`

// schemaVersion is the version of the local file this client writes.
const schemaVersion = 2

// migrate brings the file to schemaVersion: a new file gets version 1 and
// then each later step, each step in a transaction of its own. A file of
// a newer client is refused rather than misread.
func migrate(ctx context.Context, db *sql.DB) error {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("the file has schema version %d; this client knows up to %d", v, schemaVersion)
	}
	if v < 1 {
		// Version 1 is idempotent (IF NOT EXISTS): a file from before
		// user_version was set already has its tables.
		if _, err := db.ExecContext(ctx, schema); err != nil {
			return err
		}
	}
	if v < 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, schemaV2); err != nil {
			return fmt.Errorf("migrate to version 2: %w", err)
		}
		return tx.Commit()
	}
	return nil
}

// outbox is the local SQLite file: WAL with synchronous=FULL, so a committed
// write (an item, an outcome, a cursor) survives a crash and a power cut.
// One connection: the client's writes are few and small, and a single
// connection makes the id order of items their commit order.
type outbox struct {
	db *sql.DB
}

func openOutbox(ctx context.Context, file string) (*outbox, error) {
	if file == "" {
		return nil, errors.New("client: Options.Outbox (the local state file) is required")
	}
	dsn := "file:" + (&url.URL{Path: file}).EscapedPath() + "?" + url.Values{
		"_pragma": {"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)"},
	}.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("client: open outbox %s: %w", file, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("client: open outbox %s: %w", file, err)
	}
	return &outbox{db: db}, nil
}

func (o *outbox) close() error { return o.db.Close() }

// add writes a new pending item; when it returns, the item is on disk.
func (o *outbox) add(ctx context.Context, it Item) (Item, error) {
	err := o.db.QueryRowContext(ctx, `INSERT INTO outbox (cmid, conv, kind, body, target, reply_to, emoji, react_on, created_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		it.CMID, it.Conv, string(it.Kind), it.Body, it.Target, it.ReplyTo, it.Emoji, it.On, it.Created.UnixMilli()).Scan(&it.ID)
	if err != nil {
		return it, fmt.Errorf("client: write outbox item: %w", err)
	}
	return it, nil
}

const itemColumns = `id, cmid, conv, kind, body, target, reply_to, emoji, react_on, created_ms, done, seq, dup, epoch, code, msg, ended_ms`

func scanItem(row interface{ Scan(...any) error }) (Item, error) {
	var it Item
	var kind, code string
	var created, ended int64
	err := row.Scan(&it.ID, &it.CMID, &it.Conv, &kind, &it.Body, &it.Target, &it.ReplyTo, &it.Emoji, &it.On, &created,
		&it.Done, &it.Seq, &it.Dup, &it.Epoch, &code, &it.Msg, &ended)
	it.Kind, it.Code = Kind(kind), parley.Code(code)
	it.Created = time.UnixMilli(created).UTC()
	if it.Done {
		it.Ended = time.UnixMilli(ended).UTC()
	}
	return it, err
}

// finish ends a pending item with its outcome. ok is false when the item
// had already ended (or does not exist): an item ends once.
func (o *outbox) finish(ctx context.Context, cmid string, out Item, at time.Time) (it Item, ok bool, err error) {
	row := o.db.QueryRowContext(ctx, `UPDATE outbox SET done = 1, seq = ?, dup = ?, epoch = ?, code = ?, msg = ?, ended_ms = ?
		WHERE cmid = ? AND done = 0 RETURNING `+itemColumns,
		out.Seq, out.Dup, out.Epoch, string(out.Code), out.Msg, at.UnixMilli(), cmid)
	it, err = scanItem(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Item{}, false, nil
	}
	if err != nil {
		return Item{}, false, fmt.Errorf("client: record outcome of %s: %w", cmid, err)
	}
	return it, true, nil
}

// prune deletes the items that ended before now-keep and returns how many;
// pending items stay whatever their age. keep < 0 keeps everything.
func (o *outbox) prune(ctx context.Context, keep time.Duration, now time.Time) (int64, error) {
	if keep < 0 {
		return 0, nil
	}
	res, err := o.db.ExecContext(ctx, `DELETE FROM outbox WHERE done = 1 AND ended_ms < ?`, now.Add(-keep).UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("client: prune outbox: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("client: prune outbox: %w", err)
	}
	return n, nil
}

func (o *outbox) item(ctx context.Context, cmid string) (Item, error) {
	it, err := scanItem(o.db.QueryRowContext(ctx, `SELECT `+itemColumns+` FROM outbox WHERE cmid = ?`, cmid))
	if errors.Is(err, sql.ErrNoRows) {
		return Item{}, fmt.Errorf("client: no outbox item with cmid %q", cmid)
	}
	if err != nil {
		return Item{}, fmt.Errorf("client: read outbox: %w", err)
	}
	return it, nil
}

// items lists items in ID order: pending ones after the ID after (at most
// limit; limit 0 means all), or every ended one.
func (o *outbox) items(ctx context.Context, done bool, after int64, limit int) ([]Item, error) {
	q := `SELECT ` + itemColumns + ` FROM outbox WHERE done = ? AND id > ? ORDER BY id`
	args := []any{done, after}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := o.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("client: read outbox: %w", err)
	}
	defer rows.Close()
	var out []Item
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, fmt.Errorf("client: read outbox: %w", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("client: read outbox: %w", err)
	}
	return out, nil
}

func (o *outbox) cursors(ctx context.Context) (map[string]Cursor, error) {
	rows, err := o.db.QueryContext(ctx, `SELECT conv, after, epoch FROM cursors`)
	if err != nil {
		return nil, fmt.Errorf("client: read cursors: %w", err)
	}
	defer rows.Close()
	m := map[string]Cursor{}
	for rows.Next() {
		var conv string
		var c Cursor
		if err := rows.Scan(&conv, &c.After, &c.Epoch); err != nil {
			return nil, fmt.Errorf("client: read cursors: %w", err)
		}
		m[conv] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("client: read cursors: %w", err)
	}
	return m, nil
}

func (o *outbox) saveCursor(ctx context.Context, conv string, c Cursor) error {
	_, err := o.db.ExecContext(ctx, `INSERT INTO cursors (conv, after, epoch) VALUES (?, ?, ?)
		ON CONFLICT (conv) DO UPDATE SET after = excluded.after, epoch = excluded.epoch`, conv, c.After, c.Epoch)
	if err != nil {
		return fmt.Errorf("client: store cursor of %s: %w", conv, err)
	}
	return nil
}
