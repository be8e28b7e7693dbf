package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/parleychat/parley"
)

// PushKey implements parley.Push: one writer, so the insert and the read
// see one key. The key is kept sealed (Options.Secrets).
func (db *DB) PushKey(ctx context.Context) ([]byte, error) {
	label := parley.PushKeyLabel(parley.PushKeyID)
	stored, sealed, err := parley.SealSecret(db.opts.Secrets, label, parley.NewPushKey())
	if err != nil {
		return nil, err
	}
	var got []byte
	err = db.write(ctx, "push key", func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO push_keys (id, secret, sealed) VALUES (?, ?, ?)`,
			parley.PushKeyID, stored, sealed); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT secret, sealed FROM push_keys WHERE id = ?`, parley.PushKeyID).Scan(&got, &sealed)
	})
	if err != nil {
		return nil, err
	}
	if got, err = parley.OpenSecret(db.opts.Secrets, label, got, sealed); err != nil {
		return nil, fmt.Errorf("sqlite: push key: %w", err)
	}
	return got, nil
}

// SavePushSubscription implements parley.Push.
func (db *DB) SavePushSubscription(ctx context.Context, p parley.Principal, ns parley.NewPushSubscription) (parley.PushSubscription, bool, error) {
	ns, err := parley.CheckPushSubscription(ns)
	if err != nil {
		return parley.PushSubscription{}, false, err
	}
	out := parley.PushSubscription{User: p.User, Device: p.DeviceID, Endpoint: ns.Endpoint, P256DH: ns.P256DH, Auth: ns.Auth}
	created := false
	err = db.write(ctx, "save push subscription", func(tx *txn) error {
		var id, user, device string
		err := tx.QueryRowContext(ctx, `SELECT id, user_id, device_id FROM push_subscriptions WHERE endpoint = ?`, ns.Endpoint).Scan(&id, &user, &device)
		switch {
		case err == nil && user == p.User && device == p.DeviceID:
			out.ID = id
			_, err = tx.ExecContext(ctx, `UPDATE push_subscriptions SET p256dh = ?, auth = ? WHERE id = ?`, ns.P256DH, ns.Auth, id)
			if err != nil {
				return err
			}
			return readCreated(ctx, tx, &out)
		case err == nil:
			if _, err := tx.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE id = ?`, id); err != nil {
				return err
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		created, out.ID = true, parley.NewID()
		if _, err := tx.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE id IN (
			SELECT id FROM push_subscriptions WHERE user_id = ? AND device_id = ? ORDER BY id DESC LIMIT -1 OFFSET ?)`,
			p.User, p.DeviceID, parley.MaxPushSubscriptions-1); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO push_subscriptions (id, user_id, device_id, endpoint, p256dh, auth) VALUES (?, ?, ?, ?, ?, ?)`,
			out.ID, p.User, p.DeviceID, ns.Endpoint, ns.P256DH, ns.Auth); err != nil {
			return err
		}
		return readCreated(ctx, tx, &out)
	})
	if err != nil {
		return parley.PushSubscription{}, false, err
	}
	return out, created, nil
}

func readCreated(ctx context.Context, tx *txn, s *parley.PushSubscription) error {
	var ms int64
	if err := tx.QueryRowContext(ctx, `SELECT created_at FROM push_subscriptions WHERE id = ?`, s.ID).Scan(&ms); err != nil {
		return err
	}
	s.CreatedAt = msTime(ms)
	return nil
}

// DeletePushSubscription implements parley.Push.
func (db *DB) DeletePushSubscription(ctx context.Context, p parley.Principal, id string) error {
	if err := parley.CheckPushID(id); err != nil {
		return err
	}
	return db.write(ctx, "delete push subscription", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE id = ? AND user_id = ?`, id, p.User)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmpErr(err, parley.ErrNoPushSubscription)
		}
		return nil
	})
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// RemovePushSubscription implements parley.Push.
func (db *DB) RemovePushSubscription(ctx context.Context, id, endpoint string) (bool, error) {
	if err := parley.CheckPushID(id); err != nil {
		return false, err
	}
	var n int64
	err := db.write(ctx, "remove push subscription", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE id = ? AND endpoint = ?`, id, endpoint)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// PushSettings implements parley.Push.
func (db *DB) PushSettings(ctx context.Context, p parley.Principal) ([]parley.PushSetting, error) {
	out := []parley.PushSetting{}
	err := db.read(ctx, "push settings", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT conv_id, level FROM push_settings WHERE user_id = ? ORDER BY conv_id`, p.User)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s parley.PushSetting
			if err := rows.Scan(&s.Conv, &s.Level); err != nil {
				return err
			}
			out = append(out, s)
		}
		return rows.Err()
	})
	return out, err
}

// SetPushLevel implements parley.Push.
func (db *DB) SetPushLevel(ctx context.Context, p parley.Principal, conv string, level parley.PushLevel) (parley.PushSetting, error) {
	if err := parley.CheckConvID(conv); err != nil {
		return parley.PushSetting{}, err
	}
	if err := parley.CheckPushLevel(level); err != nil {
		return parley.PushSetting{}, err
	}
	err := db.write(ctx, "set push level", func(tx *txn) error {
		var open int
		if err := tx.QueryRowContext(ctx, qOpenMember, conv, p.User).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return parley.ErrNotMember
		}
		if level == parley.PushAll {
			_, err := tx.ExecContext(ctx, `DELETE FROM push_settings WHERE user_id = ? AND conv_id = ?`, p.User, conv)
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO push_settings (user_id, conv_id, level) VALUES (?, ?, ?)
			ON CONFLICT (user_id, conv_id) DO UPDATE SET level = excluded.level`, p.User, conv, string(level))
		return err
	})
	if err != nil {
		return parley.PushSetting{}, err
	}
	return parley.PushSetting{Conv: conv, Level: level}, nil
}

// qPushTargets is parley.Push.PushTargets in one query (the same in
// postgres/push.go).
const qPushTargets = `SELECT s.id, s.user_id, s.device_id, s.endpoint, s.p256dh, s.auth, s.created_at
FROM events e
JOIN periods p ON p.conv_id = e.conv_id AND p.to_seq IS NULL AND p.from_seq <= e.seq AND p.user_id <> e.sender_user
JOIN push_subscriptions s ON s.user_id = p.user_id
LEFT JOIN push_settings ps ON ps.user_id = p.user_id AND ps.conv_id = e.conv_id
LEFT JOIN delivered_cursors d ON d.user_id = s.user_id AND d.device_id = s.device_id AND d.conv_id = e.conv_id
WHERE e.conv_id = ? AND e.seq = ? AND e.kind = 'message' AND e.recall_seq IS NULL
  AND (ps.level IS NULL
    OR (ps.level = 'mentions' AND EXISTS (SELECT 1 FROM mentions m WHERE m.conv_id = e.conv_id AND m.user_id = p.user_id AND m.seq = e.seq)))
  AND coalesce(d.seq, 0) < e.seq
  AND EXISTS (SELECT 1 FROM tokens t WHERE t.user_id = s.user_id AND t.device_id = s.device_id AND t.replaced_at IS NULL)
ORDER BY s.id`

// PushTargets implements parley.Push: one query per message, all in one
// read transaction (SQLite is in process: a statement costs no round trip).
func (db *DB) PushTargets(ctx context.Context, msgs []parley.PushMessage) ([]parley.PushTarget, error) {
	if err := parley.CheckPushTargets(msgs); err != nil || len(msgs) == 0 {
		return nil, err
	}
	var out []parley.PushTarget
	err := db.read(ctx, "push targets", func(tx *txn) error {
		out = out[:0]
		for _, m := range msgs {
			if err := pushTargets(ctx, tx, m, &out); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

func pushTargets(ctx context.Context, tx *txn, m parley.PushMessage, out *[]parley.PushTarget) error {
	rows, err := tx.QueryContext(ctx, qPushTargets, m.Conv, m.Seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		t := parley.PushTarget{Msg: m}
		s := &t.Sub
		var ms int64
		if err := rows.Scan(&s.ID, &s.User, &s.Device, &s.Endpoint, &s.P256DH, &s.Auth, &ms); err != nil {
			return err
		}
		s.CreatedAt = msTime(ms)
		*out = append(*out, t)
	}
	return rows.Err()
}
