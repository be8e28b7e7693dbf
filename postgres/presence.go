package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// liveState is a user's presence from the unexpired leases (u.user_id
// names the user in the enclosing query).
const liveState = `CASE
	WHEN EXISTS (SELECT 1 FROM presence_leases l WHERE l.user_id = u.user_id AND l.expires_at > now() AND l.state = 'online') THEN 'online'
	WHEN EXISTS (SELECT 1 FROM presence_leases l WHERE l.user_id = u.user_id AND l.expires_at > now()) THEN 'away'
	ELSE 'offline' END`

// PutPresence implements parley.Store: the leases in one statement, then
// settlePresence.
func (db *DB) PutPresence(ctx context.Context, gateway string, leases []parley.PresenceLease, ttl time.Duration) ([]parley.Presence, error) {
	if err := parley.CheckLeases(gateway, leases, ttl); err != nil {
		return nil, err
	}
	out := []parley.Presence{}
	if len(leases) == 0 {
		return out, nil
	}
	users, states := make([]string, len(leases)), make([]string, len(leases))
	for i, l := range leases {
		users[i], states[i] = l.User, string(l.State)
	}
	err := db.write(ctx, "put presence", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `WITH l AS (SELECT * FROM unnest($2::text[], $3::text[]) AS l(user_id, state)),
			gone AS (DELETE FROM presence_leases pl USING l WHERE pl.gateway = $1 AND pl.user_id = l.user_id AND l.state = 'offline')
			INSERT INTO presence_leases (user_id, gateway, state, expires_at)
			SELECT user_id, $1, state, now() + $4 * interval '1 millisecond' FROM l WHERE state <> 'offline'
			ON CONFLICT (user_id, gateway) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at`,
			gateway, users, states, ttl.Milliseconds()); err != nil {
			return err
		}
		var err error
		out, err = settlePresence(ctx, tx, users, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SweepPresence implements parley.Store. SKIP LOCKED gives each expired
// lease to one sweep: concurrent sweeps neither wait for each other nor
// remove a lease twice.
func (db *DB) SweepPresence(ctx context.Context, limit int) ([]parley.Presence, error) {
	if limit < 1 {
		return nil, parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1")
	}
	out := []parley.Presence{}
	err := db.write(ctx, "sweep presence", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM presence_leases WHERE (user_id, gateway) IN
			(SELECT user_id, gateway FROM presence_leases WHERE expires_at <= now()
			 ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING user_id`, limit)
		if err != nil {
			return err
		}
		users, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(users) == 0 {
			return err
		}
		out, err = settlePresence(ctx, tx, users, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// settlePresence makes the announced presence of users the one their
// leases say, last seen now when seen, and returns those whose presence
// changed. The users' presence rows are locked first, in one order: a
// concurrent call for the same user waits, and then reads the leases this
// one committed, so each change is reported once.
func settlePresence(ctx context.Context, tx pgx.Tx, users []string, seen bool) ([]parley.Presence, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO presence (user_id, state, last_seen)
		SELECT DISTINCT u, 'offline', now() FROM unnest($1::text[]) u ORDER BY u ON CONFLICT (user_id) DO NOTHING`, users); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT user_id, state FROM presence WHERE user_id = ANY($1)
		ORDER BY user_id COLLATE "C" FOR UPDATE`, users)
	if err != nil {
		return nil, err
	}
	before := map[string]string{}
	var u, st string
	if _, err := pgx.ForEachRow(rows, []any{&u, &st}, func() error {
		before[u] = st
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `UPDATE presence AS u SET state = `+liveState+`,
		last_seen = CASE WHEN $2 THEN greatest(last_seen + interval '1 millisecond', now())
			WHEN state <> `+liveState+` THEN last_seen + interval '1 millisecond' ELSE last_seen END
		WHERE user_id = ANY($1) RETURNING user_id, state, last_seen`, users, seen)
	if err != nil {
		return nil, err
	}
	out := []parley.Presence{}
	var p parley.Presence
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&p.User, &p.State, &at}, func() error {
		if before[p.User] != string(p.State) {
			p.LastSeen = time.UnixMilli(at.UnixMilli()).UTC()
			out = append(out, p)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	sortPresence(out)
	return out, nil
}

// Presence implements parley.Store: one statement.
func (db *DB) Presence(ctx context.Context, p parley.Principal, users []string) ([]parley.Presence, error) {
	if err := parley.CheckPresenceUsers(users); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `WITH asked AS (SELECT DISTINCT a FROM unnest($2::text[]) a),
		visible AS (
			SELECT a AS user_id FROM asked WHERE a = $1 AND EXISTS (SELECT 1 FROM users WHERE id = $1)
			UNION
			SELECT o.user_id FROM periods mine JOIN periods o ON o.conv_id = mine.conv_id AND o.to_seq IS NULL
			WHERE mine.user_id = $1 AND mine.to_seq IS NULL AND o.user_id IN (SELECT a FROM asked))
		SELECT u.user_id, `+liveState+`, pr.last_seen
		FROM visible u LEFT JOIN presence pr ON pr.user_id = u.user_id ORDER BY u.user_id COLLATE "C"`, p.User, users)
	if err != nil {
		return nil, wrap("presence", err)
	}
	out := []parley.Presence{}
	var x parley.Presence
	var at *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&x.User, &x.State, &at}, func() error {
		x.LastSeen = time.Time{}
		if at != nil {
			x.LastSeen = time.UnixMilli(at.UnixMilli()).UTC()
		}
		out = append(out, x)
		return nil
	}); err != nil {
		return nil, wrap("presence", err)
	}
	return out, nil
}

// Sharing implements parley.Store: one statement over the open periods.
func (db *DB) Sharing(ctx context.Context, user string, others []string) ([]string, error) {
	ids := parley.UserIDs(others)
	if len(ids) == 0 || !parley.ValidUserID(user) {
		return []string{}, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT o.user_id COLLATE "C" FROM periods mine
		JOIN periods o ON o.conv_id = mine.conv_id AND o.to_seq IS NULL
		WHERE mine.user_id = $1 AND mine.to_seq IS NULL AND o.user_id <> $1 AND o.user_id = ANY($2)
		ORDER BY 1`, user, ids)
	if err != nil {
		return nil, wrap("presence audience", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("presence audience", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// sortPresence orders ps by user (bytewise, as the other store).
func sortPresence(ps []parley.Presence) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].User < ps[j-1].User; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}
