package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/parleychat/parley"
)

// liveState is a user's presence from the unexpired leases (u.user_id
// names the user in the enclosing query).
const liveState = `CASE
	WHEN EXISTS (SELECT 1 FROM presence_leases l WHERE l.user_id = u.user_id AND l.expires_at > ` + nowMS + ` AND l.state = 'online') THEN 'online'
	WHEN EXISTS (SELECT 1 FROM presence_leases l WHERE l.user_id = u.user_id AND l.expires_at > ` + nowMS + `) THEN 'away'
	ELSE 'offline' END`

// PutPresence implements parley.Store. The writer's transaction makes the
// change and its announcement one step: no other gateway's call comes
// between them.
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
	ul, _ := json.Marshal(users)
	sl, _ := json.Marshal(states)
	err := db.write(ctx, "put presence", func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM presence_leases WHERE gateway = ? AND user_id IN
			(SELECT u.value FROM json_each(?) u JOIN json_each(?) s ON s.key = u.key WHERE s.value = 'offline')`, gateway, string(ul), string(sl)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO presence_leases (user_id, gateway, state, expires_at)
			SELECT u.value, ?, s.value, `+nowMS+` + ? FROM json_each(?) u JOIN json_each(?) s ON s.key = u.key WHERE s.value <> 'offline'
			ON CONFLICT (user_id, gateway) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at`,
			gateway, ttl.Milliseconds(), string(ul), string(sl)); err != nil {
			return err
		}
		var err error
		out, err = settlePresence(ctx, tx, string(ul), true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SweepPresence implements parley.Store.
func (db *DB) SweepPresence(ctx context.Context, limit int) ([]parley.Presence, error) {
	if limit < 1 {
		return nil, parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1")
	}
	out := []parley.Presence{}
	err := db.write(ctx, "sweep presence", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `DELETE FROM presence_leases WHERE rowid IN
			(SELECT rowid FROM presence_leases WHERE expires_at <= `+nowMS+` ORDER BY expires_at LIMIT ?) RETURNING user_id`, limit)
		if err != nil {
			return err
		}
		users, err := scanStrings(rows)
		if err != nil || len(users) == 0 {
			return err
		}
		ul, _ := json.Marshal(users)
		out, err = settlePresence(ctx, tx, string(ul), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// settlePresence makes the announced presence of users (a JSON array) the
// one their leases say, last seen now when seen, and returns those whose
// presence changed.
func settlePresence(ctx context.Context, tx *txn, users string, seen bool) ([]parley.Presence, error) {
	if _, err := tx.ExecContext(ctx, `INSERT INTO presence (user_id, state, last_seen)
		SELECT DISTINCT value, 'offline', `+nowMS+` FROM json_each(?) WHERE true ON CONFLICT (user_id) DO NOTHING`, users); err != nil {
		return nil, err
	}
	before := map[string]string{}
	rows, err := tx.QueryContext(ctx, `SELECT user_id, state FROM presence WHERE user_id IN (SELECT value FROM json_each(?))`, users)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var u, st string
		if err := rows.Scan(&u, &st); err != nil {
			rows.Close()
			return nil, err
		}
		before[u] = st
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `UPDATE presence AS u SET state = `+liveState+`,
		last_seen = CASE WHEN ? THEN max(last_seen + 1, `+nowMS+`) WHEN state <> `+liveState+` THEN last_seen + 1 ELSE last_seen END
		WHERE user_id IN (SELECT value FROM json_each(?)) RETURNING user_id, state, last_seen`, seen, users)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []parley.Presence{}
	for rows.Next() {
		var p parley.Presence
		var ms int64
		if err := rows.Scan(&p.User, &p.State, &ms); err != nil {
			return nil, err
		}
		if before[p.User] != string(p.State) {
			p.LastSeen = time.UnixMilli(ms).UTC()
			out = append(out, p)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortPresence(out)
	return out, nil
}

// Presence implements parley.Store.
func (db *DB) Presence(ctx context.Context, p parley.Principal, users []string) ([]parley.Presence, error) {
	if err := parley.CheckPresenceUsers(users); err != nil {
		return nil, err
	}
	ul, _ := json.Marshal(users)
	out := []parley.Presence{}
	err := db.read(ctx, "presence", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `WITH asked(a) AS (SELECT DISTINCT value FROM json_each(?2)),
			visible(user_id) AS (
				SELECT a FROM asked WHERE a = ?1 AND EXISTS (SELECT 1 FROM users WHERE id = ?1)
				UNION
				SELECT o.user_id FROM periods mine JOIN periods o ON o.conv_id = mine.conv_id AND o.to_seq IS NULL
				WHERE mine.user_id = ?1 AND mine.to_seq IS NULL AND o.user_id IN (SELECT a FROM asked))
			SELECT u.user_id, `+liveState+`, coalesce(pr.last_seen, -1)
			FROM visible u LEFT JOIN presence pr ON pr.user_id = u.user_id ORDER BY u.user_id`, p.User, string(ul))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var x parley.Presence
			var ms int64
			if err := rows.Scan(&x.User, &x.State, &ms); err != nil {
				return err
			}
			if ms >= 0 {
				x.LastSeen = time.UnixMilli(ms).UTC()
			}
			out = append(out, x)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Sharing implements parley.Store.
func (db *DB) Sharing(ctx context.Context, user string, others []string) ([]string, error) {
	ids := parley.UserIDs(others)
	if len(ids) == 0 || !parley.ValidUserID(user) {
		return []string{}, nil
	}
	ol, _ := json.Marshal(ids)
	var out []string
	err := db.read(ctx, "presence audience", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT o.user_id FROM periods mine
			JOIN periods o ON o.conv_id = mine.conv_id AND o.to_seq IS NULL
			WHERE mine.user_id = ?1 AND mine.to_seq IS NULL AND o.user_id <> ?1
			AND o.user_id IN (SELECT value FROM json_each(?2)) ORDER BY o.user_id`, user, string(ol))
		if err != nil {
			return err
		}
		out, err = scanStrings(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanStrings reads and closes rows of one text column; never nil.
func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// sortPresence orders ps by user.
func sortPresence(ps []parley.Presence) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].User < ps[j-1].User; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}
