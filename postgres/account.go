package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/password"
)

// SetDisplayName implements parley.Store.
func (db *DB) SetDisplayName(ctx context.Context, id, name string) (parley.User, error) {
	name, err := parley.CheckDisplayName(name)
	if err != nil {
		return parley.User{}, err
	}
	if !parley.ValidUserID(id) {
		return parley.User{}, parley.ErrUserNotFound
	}
	tag, err := db.pool.Exec(ctx, `UPDATE users SET display_name = $1 WHERE id = $2`, name, id)
	if err != nil {
		return parley.User{}, wrap("set display name", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.User{}, parley.ErrUserNotFound
	}
	return db.User(ctx, id)
}

// ChangePassword implements parley.Store. The update names the hash the
// check was made against, so a concurrent change in between makes this
// one fail as a wrong password rather than overwrite it unchecked; one
// statement (an implicit transaction) sets the hash and revokes the
// other tokens together.
func (db *DB) ChangePassword(ctx context.Context, p parley.Principal, keep, current, next string) error {
	if err := parley.CheckChangePassword(current, next); err != nil {
		return err
	}
	_, old, err := db.lookupUser(ctx, p.User)
	if err != nil {
		return err
	}
	if !password.Check(old, current) {
		return parley.ErrWrongPassword
	}
	hash := password.Hash(next) // slow: outside any transaction
	var n int64
	err = db.pool.QueryRow(ctx, `WITH u AS (UPDATE users SET password_hash = $1 WHERE id = $2 AND password_hash = $3 RETURNING id),
		t AS (DELETE FROM tokens WHERE user_id IN (SELECT id FROM u) AND token_hash <> $4)
		SELECT count(*) FROM u`, hash, p.User, old, parley.HashToken(keep)).Scan(&n)
	if err != nil {
		return wrap("change password", err)
	}
	if n == 0 {
		return parley.ErrWrongPassword
	}
	return nil
}

// Sessions implements parley.Store: the live tokens of the user's current
// installs (over tokens_by_user), one row per device.
func (db *DB) Sessions(ctx context.Context, p parley.Principal) ([]parley.DeviceSession, error) {
	rows, err := db.pool.Query(ctx, `SELECT t.device_id, min(t.created_at), max(t.last_used_at) FROM tokens t
		JOIN devices d ON d.user_id = t.user_id AND d.device_id = t.device_id AND d.install_id = t.install_id
		WHERE t.user_id = $1 AND t.replaced_at IS NULL
		AND t.last_used_at >= clock_timestamp() - $2::bigint * interval '1 millisecond'
		AND t.created_at >= clock_timestamp() - $3::bigint * interval '1 millisecond'
		GROUP BY t.device_id ORDER BY t.device_id COLLATE "C"`,
		p.User, db.opts.TokenIdle.Milliseconds(), db.opts.TokenMax.Milliseconds())
	if err != nil {
		return nil, wrap("sessions", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (parley.DeviceSession, error) {
		var s parley.DeviceSession
		err := row.Scan(&s.DeviceID, &s.CreatedAt, &s.LastSeen)
		s.CreatedAt, s.LastSeen, s.Current = ms(s.CreatedAt), ms(s.LastSeen), s.DeviceID == p.DeviceID
		return s, err
	})
	return out, wrap("sessions", err)
}

// RevokeDevice implements parley.Store.
func (db *DB) RevokeDevice(ctx context.Context, p parley.Principal, device string) error {
	if err := parley.CheckDeviceID(device); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM tokens WHERE user_id = $1 AND device_id = $2`, p.User, device)
	if err != nil {
		return wrap("revoke device", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.Errorf(parley.CodeNotFound, "no signed-in device %q", device)
	}
	return nil
}
