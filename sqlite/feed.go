package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"

	"github.com/parleychat/parley"
)

// feedSQL reads the header and the membership periods overlapping the
// seqs [?2, ?3] of conversation ?1, ordered by user then from_seq, over the
// primary keys of both tables. The header repeats on every row; a
// conversation without overlapping periods gives one row with a NULL user,
// a missing conversation none.
const feedSQL = `SELECT c.next_seq - 1, c.min_seq, c.epoch, p.user_id, coalesce(p.from_seq, 0), coalesce(p.to_seq, 0)
	FROM conversations c
	LEFT JOIN periods p ON p.conv_id = c.id AND p.from_seq <= ?3 AND (p.to_seq IS NULL OR p.to_seq >= ?2)
	WHERE c.id = ?1
	ORDER BY p.user_id, p.from_seq`

// Feed implements parley.Feeder: two statements in one read transaction
// (one snapshot), a primary-key range scan of the events and the periods
// that overlap them with the header.
func (db *DB) Feed(ctx context.Context, convID string, after int64, limit int) (parley.Feed, error) {
	return db.feed(ctx, convID, after, limit, true)
}

// FeedEvents implements parley.Feeder: Feed's events, then the header
// alone over its primary key.
func (db *DB) FeedEvents(ctx context.Context, convID string, after int64, limit int) (parley.Feed, error) {
	return db.feed(ctx, convID, after, limit, false)
}

func (db *DB) feed(ctx context.Context, convID string, after int64, limit int, periods bool) (parley.Feed, error) {
	if err := parley.CheckFeed(convID, after, limit); err != nil {
		return parley.Feed{}, err
	}
	f := parley.Feed{Conv: convID}
	err := db.read(ctx, "feed", func(tx *txn) error {
		if after < math.MaxInt64 { // else nothing can follow
			var err error
			f.Events, err = eventsIn(ctx, tx, nil, convID, after+1, math.MaxInt64, min(limit, parley.MaxPage))
			if err != nil {
				return err
			}
		}
		lo, hi := int64(1), int64(0) // no events: no period overlaps
		if !periods {
			err := tx.QueryRowContext(ctx, `SELECT next_seq - 1, min_seq, epoch FROM conversations WHERE id = ?`, convID).
				Scan(&f.Head, &f.MinSeq, &f.Epoch)
			if errors.Is(err, sql.ErrNoRows) {
				return parley.ErrConvNotFound
			}
			return err
		}
		if n := len(f.Events); n > 0 {
			lo, hi = f.Events[0].Seq, f.Events[n-1].Seq
		}
		rows, err := tx.QueryContext(ctx, feedSQL, convID, lo, hi)
		if err != nil {
			return err
		}
		defer rows.Close()
		found := false
		for rows.Next() {
			var user sql.NullString
			var m parley.Membership
			if err := rows.Scan(&f.Head, &f.MinSeq, &f.Epoch, &user, &m.From, &m.To); err != nil {
				return err
			}
			found = true
			if user.Valid {
				m.User = user.String
				f.Members = append(f.Members, m)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if !found {
			return parley.ErrConvNotFound
		}
		return nil
	})
	if err != nil {
		return parley.Feed{}, err
	}
	return f, nil
}

// Heads implements parley.Feeder in one statement: the ids travel as one
// JSON array, so the statement is the same for any number of them.
// Malformed ids cannot name a conversation and are left out like unknown
// ones.
func (db *DB) Heads(ctx context.Context, convs []string) ([]parley.Head, error) {
	ids := parley.HeadIDs(convs)
	if len(ids) == 0 {
		return []parley.Head{}, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	return db.heads(ctx, "heads", `SELECT id, next_seq - 1, epoch FROM conversations
		WHERE id IN (SELECT value FROM json_each(?))`, string(list))
}

// Joined implements parley.Feeder in one statement over periods_by_user.
func (db *DB) Joined(ctx context.Context, user string) ([]parley.Head, error) {
	if !parley.ValidUserID(user) {
		return nil, parley.Errorf(parley.CodeInvalidArgument, "user must be a valid user id")
	}
	return db.heads(ctx, "joined", `SELECT c.id, c.next_seq - 1, c.epoch
		FROM periods p JOIN conversations c ON c.id = p.conv_id
		WHERE p.user_id = ? AND p.to_seq IS NULL
		ORDER BY p.conv_id`, user)
}

// OpenPeriods implements parley.Feeder in one statement over
// periods_by_user; the ids travel as one JSON array.
func (db *DB) OpenPeriods(ctx context.Context, users []string) ([]parley.OpenPeriod, error) {
	ids := parley.UserIDs(users)
	out := []parley.OpenPeriod{}
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	err = db.read(ctx, "open periods", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT p.user_id, p.from_seq, c.id, c.next_seq - 1, c.epoch
			FROM periods p JOIN conversations c ON c.id = p.conv_id
			WHERE p.user_id IN (SELECT value FROM json_each(?)) AND p.to_seq IS NULL
			ORDER BY p.user_id, p.conv_id`, string(list))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var o parley.OpenPeriod
			if err := rows.Scan(&o.User, &o.From, &o.Conv, &o.Seq, &o.Epoch); err != nil {
				return err
			}
			out = append(out, o)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heads runs a query of (id, head, epoch) rows.
func (db *DB) heads(ctx context.Context, op, query string, args ...any) ([]parley.Head, error) {
	out := []parley.Head{}
	err := db.read(ctx, op, func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h parley.Head
			if err := rows.Scan(&h.Conv, &h.Seq, &h.Epoch); err != nil {
				return err
			}
			out = append(out, h)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Ping implements parley.Feeder on a reader connection: readiness must not
// wait for a long write on the one writer connection.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return wrap("ping", err)
	}
	return nil
}
