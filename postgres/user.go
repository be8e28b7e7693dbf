package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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
		hash = password.Hash(nu.Password) // slow: outside any transaction
	}
	u := parley.User{ID: nu.ID, Email: nu.Email, Role: nu.Role}
	err = db.pool.QueryRow(ctx, `INSERT INTO users (id, email, password_hash, role)
		VALUES ($1, $2, $3, $4) RETURNING created_at`,
		nu.ID, optString(nu.Email), hash, string(nu.Role)).Scan(&u.CreatedAt)
	switch {
	case isUnique(err, "users_pkey"):
		return parley.User{}, parley.Errorf(parley.CodeAlreadyExists, "user id %q is taken", nu.ID)
	case isUnique(err):
		return parley.User{}, parley.Errorf(parley.CodeAlreadyExists, "email %q is taken", nu.Email)
	case err != nil:
		return parley.User{}, wrap("create user", err)
	}
	u.CreatedAt = ms(u.CreatedAt)
	return u, nil
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
	q := `SELECT id, coalesce(email, ''), password_hash, role, disabled, created_at, display_name FROM users WHERE id = $1`
	if kind == parley.LoginByEmail {
		q = `SELECT id, coalesce(email, ''), password_hash, role, disabled, created_at, display_name FROM users WHERE email = $1`
	}
	var u parley.User
	var hash, role string
	err = db.pool.QueryRow(ctx, q, value).Scan(&u.ID, &u.Email, &hash, &role, &u.Disabled, &u.CreatedAt, &u.DisplayName)
	if errors.Is(err, pgx.ErrNoRows) {
		return parley.User{}, "", parley.ErrUserNotFound
	}
	if err != nil {
		return parley.User{}, "", wrap("user", err)
	}
	u.Role = parley.Role(role)
	u.CreatedAt = ms(u.CreatedAt)
	return u, hash, nil
}

// SetUserDisabled implements parley.Store.
func (db *DB) SetUserDisabled(ctx context.Context, id string, disabled bool) error {
	// One implicit transaction: the flag and the revocation land together.
	var n int64
	err := db.pool.QueryRow(ctx, qSetDisabled, disabled, id).Scan(&n)
	if err != nil {
		return wrap("set user disabled", err)
	}
	if n == 0 {
		return parley.ErrUserNotFound
	}
	return nil
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
	err = db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users u JOIN devices d ON d.user_id = u.id
		WHERE `+col+` = $1 AND d.install_id = $2)`, value, installID).Scan(&known)
	if err != nil {
		return false, wrap("known install", err)
	}
	return known, nil
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
	err = db.write(ctx, "login", func(tx pgx.Tx) error {
		// A row comes back when the device is new or its install changed:
		// the old install's tokens turn stale (marked replaced: their
		// grace starts) and its delivered cursors go, so the new install
		// starts at 0.
		// xmax is 0 for an inserted row and set for an updated one, so
		// "inserted" tells a new device from a replaced install.
		rows, err := tx.Query(ctx, `INSERT INTO devices (user_id, device_id, install_id) VALUES ($1, $2, $3)
			ON CONFLICT (user_id, device_id) DO UPDATE SET install_id = EXCLUDED.install_id
			WHERE devices.install_id <> EXCLUDED.install_id
			RETURNING (xmax = 0) AS inserted`, u.ID, r.DeviceID, r.InstallID)
		if err != nil {
			return err
		}
		changed, err := pgx.CollectRows(rows, pgx.RowTo[bool])
		if err != nil {
			return err
		}
		replaced = len(changed) > 0 && !changed[0]
		if len(changed) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM delivered_cursors WHERE user_id = $1 AND device_id = $2`, u.ID, r.DeviceID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, qMarkReplaced, u.ID, r.DeviceID, r.InstallID); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, device_id, install_id) VALUES ($1, $2, $3, $4)`,
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

// Authenticate implements parley.Store. Only a refresh (at most once per
// TokenRefresh) or an expired token's deletion writes.
func (db *DB) Authenticate(ctx context.Context, token string) (parley.Principal, error) {
	if err := parley.CheckTokenShape(token); err != nil {
		return parley.Principal{}, err
	}
	hash := parley.HashToken(token)
	var r parley.TokenRecord
	var idle, age, replaced int64
	err := db.pool.QueryRow(ctx, `SELECT t.user_id, t.device_id, t.install_id, u.role, u.disabled, coalesce(d.install_id, ''),
			(extract(epoch FROM clock_timestamp() - t.last_used_at) * 1000)::bigint,
			(extract(epoch FROM clock_timestamp() - t.created_at) * 1000)::bigint,
			t.replaced_at IS NOT NULL, coalesce((extract(epoch FROM clock_timestamp() - t.replaced_at) * 1000)::bigint, 0)
		FROM tokens t
		JOIN users u ON u.id = t.user_id
		LEFT JOIN devices d ON d.user_id = t.user_id AND d.device_id = t.device_id
		WHERE t.token_hash = $1`, hash).Scan(&r.User, &r.DeviceID, &r.InstallID, &r.Role, &r.Disabled, &r.DeviceInstall, &idle, &age, &r.Replaced, &replaced)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return parley.Principal{}, wrap("authenticate", err)
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
		_, _ = db.pool.Exec(ctx, `UPDATE tokens SET last_used_at = clock_timestamp() WHERE token_hash = $1`, hash)
	case parley.TokenDelete:
		// The condition again: a refresh by another gateway since the read
		// keeps the token (this request still gets the refusal it read).
		_, _ = db.pool.Exec(ctx, `DELETE FROM tokens WHERE token_hash = $1 AND (`+qTokenDead+`)`,
			hash, db.opts.TokenIdle.Milliseconds(), db.opts.StaleInstallGrace.Milliseconds(), db.opts.TokenMax.Milliseconds())
	}
	return p, err
}

// SetPassword implements parley.Store.
func (db *DB) SetPassword(ctx context.Context, id, pw string) error {
	if err := parley.CheckSetPassword(id, pw); err != nil {
		return err
	}
	hash := password.Hash(pw) // slow: outside any transaction
	// One implicit transaction: the new hash and the revocation land together.
	var n int64
	err := db.pool.QueryRow(ctx, qSetPassword, hash, id).Scan(&n)
	if err != nil {
		return wrap("set password", err)
	}
	if n == 0 {
		return parley.ErrUserNotFound
	}
	return nil
}

// qSetPassword sets the hash and deletes the user's tokens (over
// tokens_by_user); it returns how many users it found.
const qSetPassword = `WITH u AS (UPDATE users SET password_hash = $1 WHERE id = $2 RETURNING id),
	t AS (DELETE FROM tokens WHERE user_id IN (SELECT id FROM u))
	SELECT count(*) FROM u`

// qSetDisabled sets the flag and, when disabling, deletes the user's tokens
// (over tokens_by_user); it returns how many users it found.
const qSetDisabled = `WITH u AS (UPDATE users SET disabled = $1 WHERE id = $2 RETURNING id),
	t AS (DELETE FROM tokens WHERE $1 AND user_id IN (SELECT id FROM u))
	SELECT count(*) FROM u`

// qMarkReplaced starts the grace of a device's tokens of other installs.
const qMarkReplaced = `UPDATE tokens SET replaced_at = clock_timestamp()
	WHERE user_id = $1 AND device_id = $2 AND install_id <> $3 AND replaced_at IS NULL`

// qTokenDead is true for a token past its lifetime; $2 is the idle
// lifetime, $3 the replaced install's grace and $4 the absolute lifetime,
// in milliseconds.
const qTokenDead = `last_used_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
	OR replaced_at < clock_timestamp() - $3::bigint * interval '1 millisecond'
	OR created_at < clock_timestamp() - $4::bigint * interval '1 millisecond'`

// SweepTokens implements parley.Store: idle tokens first, then those of
// replaced installs, then those past the absolute lifetime, each walk over its index, oldest first. Every gateway
// sweeps: SKIP LOCKED lets concurrent sweeps take disjoint rows instead of
// queueing (or deadlocking) on each other's.
func (db *DB) SweepTokens(ctx context.Context, limit int) (int, error) {
	if err := parley.CheckSweep(limit); err != nil {
		return 0, err
	}
	var n int64
	err := db.write(ctx, "sweep tokens", func(tx pgx.Tx) error {
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
			tag, err := tx.Exec(ctx, q.query, q.age, int64(limit)-n)
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
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
		WHERE last_used_at < clock_timestamp() - $1::bigint * interval '1 millisecond' ORDER BY last_used_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
	qSweepReplaced = `DELETE FROM tokens WHERE token_hash IN (SELECT token_hash FROM tokens
		WHERE replaced_at < clock_timestamp() - $1::bigint * interval '1 millisecond' ORDER BY replaced_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
	qSweepOld = `DELETE FROM tokens WHERE token_hash IN (SELECT token_hash FROM tokens
		WHERE created_at < clock_timestamp() - $1::bigint * interval '1 millisecond' ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
)

// Logout implements parley.Store.
func (db *DB) Logout(ctx context.Context, token string) error {
	_, err := db.pool.Exec(ctx, `DELETE FROM tokens WHERE token_hash = $1`, parley.HashToken(token))
	return wrap("logout", err)
}

// qDirectory is one page of Directory: active users with id > $1 in byte
// order whose id or lower-cased email starts with $2, and with $3 only
// those with an open period in a conversation where caller $4 has one;
// $6, when not empty, names the one user to list.
const qDirectory = `SELECT u.id, u.display_name FROM users u
WHERE u.id COLLATE "C" > $1 AND NOT u.disabled AND ($6 = '' OR u.id = $6)
	AND ($2 = '' OR starts_with(u.id, $2) OR starts_with(lower(coalesce(u.email, '')), $2))
	AND (NOT $3::boolean OR EXISTS (
		SELECT 1 FROM periods mine
		JOIN periods theirs ON theirs.conv_id = mine.conv_id AND theirs.user_id = u.id AND theirs.to_seq IS NULL
		WHERE mine.user_id = $4 AND mine.to_seq IS NULL))
ORDER BY u.id COLLATE "C" LIMIT $5`

// Directory implements parley.Store: one statement, keyset paged over
// users_id_bytes like the admin listings.
func (db *DB) Directory(ctx context.Context, p parley.Principal, q parley.DirectoryQuery) (parley.AdminPage[parley.DirectoryEntry], error) {
	prefix, after, err := parley.CheckDirectoryQuery(q)
	if err != nil {
		return parley.AdminPage[parley.DirectoryEntry]{}, err
	}
	rows, err := db.pool.Query(ctx, qDirectory, after, prefix, q.Shared, p.User, q.Limit+1, q.ID)
	if err != nil {
		return parley.AdminPage[parley.DirectoryEntry]{}, wrap("directory", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (parley.DirectoryEntry, error) {
		var e parley.DirectoryEntry
		return e, row.Scan(&e.ID, &e.DisplayName)
	})
	if err != nil {
		return parley.AdminPage[parley.DirectoryEntry]{}, wrap("directory", err)
	}
	return parley.NewAdminPage(items, q.Limit, func(e parley.DirectoryEntry) string { return e.ID }), nil
}
