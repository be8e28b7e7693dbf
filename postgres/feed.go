package postgres

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// feedSQL is Feed in one statement, so one snapshot: at most $3 events of
// conversation $1 after $2 (a primary-key range scan), the membership
// periods overlapping their seqs (the periods of conversation $1 over its
// primary key, as three parallel arrays sent on the first event's row only;
// Feed sorts them, off the database), and the header on every row. A
// conversation without events after $2 gives one row with no event (seq 0);
// a missing conversation none.
var feedSQL = `WITH e AS (
	SELECT * FROM events WHERE conv_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
), r AS (
	SELECT min(seq) AS lo, max(seq) AS hi FROM e
), m AS (
	SELECT min(r.lo) AS lo, -- r is one row
		array_agg(p.user_id) AS users, array_agg(p.from_seq) AS froms, array_agg(coalesce(p.to_seq, 0)) AS tos
	FROM r JOIN periods p ON p.conv_id = $1 AND p.from_seq <= r.hi AND (p.to_seq IS NULL OR p.to_seq >= r.lo)
)
SELECT c.next_seq - 1, c.min_seq, c.epoch, m.users, m.froms, m.tos, ` + eventCols("e") + `
FROM conversations c
LEFT JOIN e ON true
LEFT JOIN m ON m.lo = e.seq
WHERE c.id = $1
ORDER BY e.seq`

// feedEventsSQL is feedSQL without the periods (FeedEvents); its m columns
// are NULL.
var feedEventsSQL = `WITH e AS (
	SELECT * FROM events WHERE conv_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
)
SELECT c.next_seq - 1, c.min_seq, c.epoch, NULL::text[], NULL::bigint[], NULL::bigint[], ` + eventCols("e") + `
FROM conversations c
LEFT JOIN e ON true
WHERE c.id = $1
ORDER BY e.seq`

// Feed implements parley.Feeder: one statement (feedSQL).
func (db *DB) Feed(ctx context.Context, convID string, after int64, limit int) (parley.Feed, error) {
	return db.feed(ctx, feedSQL, convID, after, limit)
}

// FeedEvents implements parley.Feeder: one statement (feedEventsSQL).
func (db *DB) FeedEvents(ctx context.Context, convID string, after int64, limit int) (parley.Feed, error) {
	return db.feed(ctx, feedEventsSQL, convID, after, limit)
}

func (db *DB) feed(ctx context.Context, query, convID string, after int64, limit int) (parley.Feed, error) {
	if err := parley.CheckFeed(convID, after, limit); err != nil {
		return parley.Feed{}, err
	}
	f := parley.Feed{Conv: convID}
	rows, err := db.pool.Query(ctx, query, convID, after, min(limit, parley.MaxPage))
	if err != nil {
		return parley.Feed{}, wrap("feed", err)
	}
	var users []string
	var from, to []int64
	var ev parley.Event
	dest := append([]any{&f.Head, &f.MinSeq, &f.Epoch, &users, &from, &to}, eventDest(&ev)...)
	found := false
	_, err = pgx.ForEachRow(rows, dest, func() error {
		found = true
		for i := range users {
			f.Members = append(f.Members, parley.Membership{User: users[i], Period: parley.Period{From: from[i], To: to[i]}})
		}
		users, from, to = nil, nil, nil
		if ev.Seq != 0 {
			finish(&ev, convID)
			f.Events = append(f.Events, ev)
		}
		return nil
	})
	switch {
	case err != nil:
		return parley.Feed{}, wrap("feed", err)
	case !found:
		return parley.Feed{}, parley.ErrConvNotFound
	}
	slices.SortFunc(f.Members, func(a, b parley.Membership) int {
		return cmp.Or(strings.Compare(a.User, b.User), cmp.Compare(a.From, b.From))
	})
	return f, nil
}

// Heads implements parley.Feeder: one statement over the primary key of
// conversations. Malformed ids cannot name a conversation and are left out
// like unknown ones.
func (db *DB) Heads(ctx context.Context, convs []string) ([]parley.Head, error) {
	ids := parley.HeadIDs(convs)
	if len(ids) == 0 {
		return []parley.Head{}, nil
	}
	return db.heads(ctx, "heads", `SELECT id, next_seq - 1, epoch FROM conversations WHERE id = ANY($1)`, ids)
}

// Joined implements parley.Feeder: one statement over periods_by_user.
func (db *DB) Joined(ctx context.Context, user string) ([]parley.Head, error) {
	if !parley.ValidUserID(user) {
		return nil, parley.Errorf(parley.CodeInvalidArgument, "user must be a valid user id")
	}
	return db.heads(ctx, "joined", `SELECT c.id, c.next_seq - 1, c.epoch
		FROM periods p JOIN conversations c ON c.id = p.conv_id
		WHERE p.user_id = $1 AND p.to_seq IS NULL
		ORDER BY c.id COLLATE "C"`, user)
}

// OpenPeriods implements parley.Feeder: one statement over
// periods_by_user.
func (db *DB) OpenPeriods(ctx context.Context, users []string) ([]parley.OpenPeriod, error) {
	ids := parley.UserIDs(users)
	out := []parley.OpenPeriod{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT p.user_id, p.from_seq, c.id, c.next_seq - 1, c.epoch
		FROM periods p JOIN conversations c ON c.id = p.conv_id
		WHERE p.user_id = ANY($1) AND p.to_seq IS NULL
		ORDER BY p.user_id COLLATE "C", c.id COLLATE "C"`, ids)
	if err != nil {
		return nil, wrap("open periods", err)
	}
	var o parley.OpenPeriod
	if _, err := pgx.ForEachRow(rows, []any{&o.User, &o.From, &o.Conv, &o.Seq, &o.Epoch}, func() error {
		out = append(out, o)
		return nil
	}); err != nil {
		return nil, wrap("open periods", err)
	}
	return out, nil
}

// heads runs a query of (id, head, epoch) rows.
func (db *DB) heads(ctx context.Context, op, query string, args ...any) ([]parley.Head, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	out := []parley.Head{}
	var h parley.Head
	if _, err := pgx.ForEachRow(rows, []any{&h.Conv, &h.Seq, &h.Epoch}, func() error {
		out = append(out, h)
		return nil
	}); err != nil {
		return nil, wrap(op, err)
	}
	return out, nil
}

// Ping implements parley.Feeder.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	return wrap("ping", db.pool.QueryRow(ctx, `SELECT 1`).Scan(&one))
}
