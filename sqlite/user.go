package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/password"
)

// CreateUser implements parley.Store.
func (db *DB) CreateUser(ctx context.Context, nu parley.NewUser) (parley.User, error) {
	nu, err := parley.ValidateNewUser(nu)
	if err != nil {
		return parley.User{}, err
	}
	hash := ""
	if nu.Password != "" {
		hash = password.Hash(nu.Password) // slow: outside the transaction
	}
	var email any
	if nu.Email != "" {
		email = nu.Email
	}
	var u parley.User
	err = db.write(ctx, "create user", func(tx *txn) error {
		var created int64
		err := tx.QueryRowContext(ctx, `INSERT INTO users (id, email, password_hash, role, created_at)
			VALUES (?, ?, ?, ?, `+nowMS+`) RETURNING created_at`,
			nu.ID, email, hash, string(nu.Role)).Scan(&created)
		if isUnique(err) {
			return parley.Errorf(parley.CodeAlreadyExists, "a user with this id or email already exists")
		}
		if err != nil {
			return err
		}
		u = parley.User{ID: nu.ID, Email: nu.Email, Role: nu.Role, CreatedAt: msTime(created)}
		return nil
	})
	return u, err
}

// User implements parley.Store.
func (db *DB) User(ctx context.Context, login string) (parley.User, error) {
	u, _, err := db.lookupUser(ctx, login)
	return u, err
}

// lookupUser resolves a login and returns the user and password hash.
func (db *DB) lookupUser(ctx context.Context, login string) (parley.User, string, error) {
	kind, value, err := parley.ResolveLogin(login)
	if err != nil {
		return parley.User{}, "", err
	}
	q := `SELECT id, COALESCE(email, ''), password_hash, role, disabled, created_at, display_name FROM users WHERE id = ?`
	if kind == parley.LoginByEmail {
		q = `SELECT id, COALESCE(email, ''), password_hash, role, disabled, created_at, display_name FROM users WHERE email = ?`
	}
	var u parley.User
	var hash, role string
	var created int64
	err = db.read(ctx, "user", func(tx *txn) error {
		return tx.QueryRowContext(ctx, q, value).Scan(&u.ID, &u.Email, &hash, &role, &u.Disabled, &created, &u.DisplayName)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return parley.User{}, "", parley.ErrUserNotFound
	}
	if err != nil {
		return parley.User{}, "", err
	}
	u.Role = parley.Role(role)
	u.CreatedAt = msTime(created)
	return u, hash, nil
}

// SetUserDisabled implements parley.Store.
func (db *DB) SetUserDisabled(ctx context.Context, id string, disabled bool) error {
	return db.write(ctx, "set user disabled", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET disabled = ? WHERE id = ?`, disabled, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = parley.ErrUserNotFound
			}
			return err
		}
		if disabled {
			_, err = tx.ExecContext(ctx, qRevokeUser, id)
		}
		return err
	})
}

// SetPassword implements parley.Store.
func (db *DB) SetPassword(ctx context.Context, id, pw string) error {
	if err := parley.CheckSetPassword(id, pw); err != nil {
		return err
	}
	hash := password.Hash(pw) // slow: outside the transaction
	return db.write(ctx, "set password", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET password_hash = ? WHERE id = ?`, hash, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = parley.ErrUserNotFound
			}
			return err
		}
		_, err = tx.ExecContext(ctx, qRevokeUser, id)
		return err
	})
}

// KnownInstall implements parley.Store.
func (db *DB) KnownInstall(ctx context.Context, login, installID string) (bool, error) {
	kind, value, err := parley.ResolveLogin(login)
	if err != nil || installID == "" {
		return false, nil
	}
	col := "u.id"
	if kind == parley.LoginByEmail {
		col = "u.email"
	}
	var known bool
	err = db.read(ctx, "known install", func(tx *txn) error {
		return tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM users u JOIN devices d ON d.user_id = u.id
			WHERE `+col+` = ? AND d.install_id = ?)`, value, installID).Scan(&known)
	})
	return known, err
}

// Login implements parley.Store.
func (db *DB) Login(ctx context.Context, r parley.LoginRequest) (parley.Session, error) {
	if err := parley.ValidateLogin(r); err != nil {
		return parley.Session{}, err
	}
	u, hash, err := db.lookupUser(ctx, r.Login)
	found := parley.ErrorCode(err) != parley.CodeNotFound
	if err != nil && found {
		return parley.Session{}, err
	}
	if err := password.CheckLogin(found, hash, u.Disabled, r.Password); err != nil {
		return parley.Session{}, err
	}
	token, tokenHash := parley.NewToken()
	replaced := false
	err = db.write(ctx, "login", func(tx *txn) error {
		replaced = false // a retried transaction decides again
		var current string
		err := tx.QueryRowContext(ctx, `SELECT install_id FROM devices WHERE user_id = ? AND device_id = ?`, u.ID, r.DeviceID).Scan(&current)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, `INSERT INTO devices (user_id, device_id, install_id, created_at) VALUES (?, ?, ?, `+nowMS+`)`,
				u.ID, r.DeviceID, r.InstallID); err != nil {
				return err
			}
		case err != nil:
			return err
		case current != r.InstallID:
			// A new install: the old one's tokens turn stale (and start
			// their grace) and its delivered cursors go, so the new
			// install starts at 0.
			replaced = true
			if _, err := tx.ExecContext(ctx, `UPDATE devices SET install_id = ? WHERE user_id = ? AND device_id = ?`,
				r.InstallID, u.ID, r.DeviceID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, qMarkReplaced, u.ID, r.DeviceID, r.InstallID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM delivered_cursors WHERE user_id = ? AND device_id = ?`, u.ID, r.DeviceID); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO tokens (token_hash, user_id, device_id, install_id, created_at, last_used_at)
			VALUES (?, ?, ?, ?, `+nowMS+`, `+nowMS+`)`,
			tokenHash, u.ID, r.DeviceID, r.InstallID)
		return err
	})
	if err != nil {
		return parley.Session{}, err
	}
	return parley.Session{
		Principal: parley.Principal{User: u.ID, Role: u.Role, DeviceID: r.DeviceID, InstallID: r.InstallID},
		Token:     token,
		Replaced:  replaced,
	}, nil
}

// Authenticate implements parley.Store. The lookup is a read; only a
// refresh (at most once per TokenRefresh) or an expired token's deletion
// takes the writer.
func (db *DB) Authenticate(ctx context.Context, token string) (parley.Principal, error) {
	if err := parley.CheckTokenShape(token); err != nil {
		return parley.Principal{}, err
	}
	hash := parley.HashToken(token)
	var r parley.TokenRecord
	var idle, age, replaced int64
	err := db.read(ctx, "authenticate", func(tx *txn) error {
		return tx.QueryRowContext(ctx, `SELECT t.user_id, t.device_id, t.install_id, u.role, u.disabled, COALESCE(d.install_id, ''),
				`+nowMS+` - t.last_used_at, `+nowMS+` - t.created_at, t.replaced_at IS NOT NULL, COALESCE(`+nowMS+` - t.replaced_at, 0)
			FROM tokens t
			JOIN users u ON u.id = t.user_id
			LEFT JOIN devices d ON d.user_id = t.user_id AND d.device_id = t.device_id
			WHERE t.token_hash = ?`, hash).Scan(&r.User, &r.DeviceID, &r.InstallID, &r.Role, &r.Disabled, &r.DeviceInstall, &idle, &age, &r.Replaced, &replaced)
	})
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return parley.Principal{}, err
	}
	r.Idle = time.Duration(idle) * time.Millisecond
	r.Age = time.Duration(age) * time.Millisecond
	r.ReplacedFor = time.Duration(replaced) * time.Millisecond
	p, action, err := db.opts.CheckToken(err == nil, r)
	// The refresh and the deletion are housekeeping after a decision made
	// on one consistent read: when one fails, the answer stands, and the
	// next lookup (or the sweep) does it again.
	switch action {
	case parley.TokenRefresh:
		_ = db.write(ctx, "refresh token", func(tx *txn) error {
			_, err := tx.ExecContext(ctx, `UPDATE tokens SET last_used_at = `+nowMS+` WHERE token_hash = ?`, hash)
			return err
		})
	case parley.TokenDelete:
		// The condition again: a refresh by another process since the read
		// keeps the token (this request still gets the refusal it read).
		_ = db.write(ctx, "expire token", func(tx *txn) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE token_hash = ? AND (`+qTokenDead+`)`,
				hash, db.opts.TokenIdle.Milliseconds(), db.opts.StaleInstallGrace.Milliseconds(), db.opts.TokenMax.Milliseconds())
			return err
		})
	}
	return p, err
}

// qRevokeUser deletes every token of a user (over tokens_by_user).
const qRevokeUser = `DELETE FROM tokens WHERE user_id = ?`

// qMarkReplaced starts the grace of a device's tokens of other installs.
const qMarkReplaced = `UPDATE tokens SET replaced_at = ` + nowMS + `
	WHERE user_id = ? AND device_id = ? AND install_id <> ? AND replaced_at IS NULL`

// qTokenDead is true for a token past its lifetime; its arguments are the
// idle lifetime, the replaced install's grace and the absolute lifetime,
// in milliseconds.
const qTokenDead = `last_used_at < ` + nowMS + ` - ? OR replaced_at < ` + nowMS + ` - ? OR created_at < ` + nowMS + ` - ?`

// SweepTokens implements parley.Store: idle tokens first, then those of
// replaced installs, then those past the absolute lifetime, each walk over its index, oldest first.
func (db *DB) SweepTokens(ctx context.Context, limit int) (int, error) {
	if err := parley.CheckSweep(limit); err != nil {
		return 0, err
	}
	var n int64
	err := db.write(ctx, "sweep tokens", func(tx *txn) error {
		for _, q := range []struct {
			query string
			age   int64
		}{
			{qSweepIdle, db.opts.TokenIdle.Milliseconds()},
			{qSweepReplaced, db.opts.StaleInstallGrace.Milliseconds()},
			{qSweepOld, db.opts.TokenMax.Milliseconds()},
		} {
			if n >= int64(limit) {
				break
			}
			res, err := tx.ExecContext(ctx, q.query, q.age, int64(limit)-n)
			if err != nil {
				return err
			}
			d, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += d
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

const (
	qSweepIdle = `DELETE FROM tokens WHERE token_hash IN (SELECT token_hash FROM tokens
		WHERE last_used_at < ` + nowMS + ` - ? ORDER BY last_used_at LIMIT ?)`
	qSweepReplaced = `DELETE FROM tokens WHERE token_hash IN (SELECT token_hash FROM tokens
		WHERE replaced_at < ` + nowMS + ` - ? ORDER BY replaced_at LIMIT ?)`
	qSweepOld = `DELETE FROM tokens WHERE token_hash IN (SELECT token_hash FROM tokens
		WHERE created_at < ` + nowMS + ` - ? ORDER BY created_at LIMIT ?)`
)

// Logout implements parley.Store.
func (db *DB) Logout(ctx context.Context, token string) error {
	return db.write(ctx, "logout", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE token_hash = ?`, parley.HashToken(token))
		return err
	})
}

// checkInstall answers STALE_INSTALL when the principal's install is no
// longer the device's current one.
func checkInstall(ctx context.Context, tx *txn, p parley.Principal) error {
	var current string
	err := tx.QueryRowContext(ctx, `SELECT install_id FROM devices WHERE user_id = ? AND device_id = ?`, p.User, p.DeviceID).Scan(&current)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && current != p.InstallID) {
		return parley.ErrStaleInstall
	}
	return err
}
