package sqlite

import (
	"context"

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
	err = db.write(ctx, "set display name", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET display_name = ? WHERE id = ?`, name, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmpOr(err, parley.ErrUserNotFound)
		}
		return nil
	})
	if err != nil {
		return parley.User{}, err
	}
	return db.User(ctx, id)
}

// cmpOr returns err when it is not nil, else alt.
func cmpOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// ChangePassword implements parley.Store. The update names the hash the
// check was made against, so a concurrent change in between makes this
// one fail as a wrong password rather than overwrite it unchecked.
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
	hash := password.Hash(next) // slow: outside the transaction
	return db.write(ctx, "change password", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET password_hash = ? WHERE id = ? AND password_hash = ?`, hash, p.User, old)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmpOr(err, parley.ErrWrongPassword)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM tokens WHERE user_id = ? AND token_hash <> ?`, p.User, parley.HashToken(keep))
		return err
	})
}

// Sessions implements parley.Store: the live tokens of the user's current
// installs (over tokens_by_user), one row per device.
func (db *DB) Sessions(ctx context.Context, p parley.Principal) ([]parley.DeviceSession, error) {
	var out []parley.DeviceSession
	err := db.read(ctx, "sessions", func(tx *txn) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `SELECT t.device_id, min(t.created_at), max(t.last_used_at) FROM tokens t
			JOIN devices d ON d.user_id = t.user_id AND d.device_id = t.device_id AND d.install_id = t.install_id
			WHERE t.user_id = ? AND t.replaced_at IS NULL
			AND t.last_used_at >= `+nowMS+` - ? AND t.created_at >= `+nowMS+` - ?
			GROUP BY t.device_id ORDER BY t.device_id`,
			p.User, db.opts.TokenIdle.Milliseconds(), db.opts.TokenMax.Milliseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s parley.DeviceSession
			var created, seen int64
			if err := rows.Scan(&s.DeviceID, &created, &seen); err != nil {
				return err
			}
			s.CreatedAt, s.LastSeen, s.Current = msTime(created), msTime(seen), s.DeviceID == p.DeviceID
			out = append(out, s)
		}
		return rows.Err()
	})
	return out, err
}

// RevokeDevice implements parley.Store.
func (db *DB) RevokeDevice(ctx context.Context, p parley.Principal, device string) error {
	if err := parley.CheckDeviceID(device); err != nil {
		return err
	}
	return db.write(ctx, "revoke device", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE user_id = ? AND device_id = ?`, p.User, device)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmpOr(err, parley.Errorf(parley.CodeNotFound, "no signed-in device %q", device))
		}
		return nil
	})
}
