package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// PushKey implements parley.Push: the insert does nothing when the key
// exists (a concurrent first insert waits for the other's commit, then
// does nothing), and the read after it sees whichever key won. The key is
// kept sealed (Options.Secrets).
func (db *DB) PushKey(ctx context.Context) ([]byte, error) {
	label := parley.PushKeyLabel(parley.PushKeyID)
	stored, sealed, err := parley.SealSecret(db.opts.Secrets, label, parley.NewPushKey())
	if err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO push_keys (id, secret, sealed) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
		parley.PushKeyID, stored, sealed); err != nil {
		return nil, wrap("push key", err)
	}
	var got []byte
	if err := db.pool.QueryRow(ctx, `SELECT secret, sealed FROM push_keys WHERE id = $1`, parley.PushKeyID).Scan(&got, &sealed); err != nil {
		return nil, wrap("push key", err)
	}
	if got, err = parley.OpenSecret(db.opts.Secrets, label, got, sealed); err != nil {
		return nil, wrap("push key", err)
	}
	return got, nil
}

// SavePushSubscription implements parley.Push. Saves for one device, and
// saves of one endpoint, take turns on advisory locks (device first, then
// endpoint), so the per-device bound and the endpoint's one owner hold
// under concurrent saves.
func (db *DB) SavePushSubscription(ctx context.Context, p parley.Principal, ns parley.NewPushSubscription) (parley.PushSubscription, bool, error) {
	ns, err := parley.CheckPushSubscription(ns)
	if err != nil {
		return parley.PushSubscription{}, false, err
	}
	out := parley.PushSubscription{User: p.User, Device: p.DeviceID, Endpoint: ns.Endpoint, P256DH: ns.P256DH, Auth: ns.Auth}
	created := false
	err = db.write(ctx, "save push subscription", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('push device ' || $1 || ' ' || $2, 0)),
			pg_advisory_xact_lock(hashtextextended('push endpoint ' || $3, 0))`, p.User, p.DeviceID, ns.Endpoint); err != nil {
			return err
		}
		var id, user, device string
		err := tx.QueryRow(ctx, `SELECT id, user_id, device_id FROM push_subscriptions WHERE endpoint = $1`, ns.Endpoint).Scan(&id, &user, &device)
		switch {
		case err == nil && user == p.User && device == p.DeviceID:
			out.ID = id
			return tx.QueryRow(ctx, `UPDATE push_subscriptions SET p256dh = $1, auth = $2 WHERE id = $3 RETURNING created_at`,
				ns.P256DH, ns.Auth, id).Scan(&out.CreatedAt)
		case err == nil:
			if _, err := tx.Exec(ctx, `DELETE FROM push_subscriptions WHERE id = $1`, id); err != nil {
				return err
			}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		created, out.ID = true, parley.NewID()
		if _, err := tx.Exec(ctx, `DELETE FROM push_subscriptions WHERE id IN (
			SELECT id FROM push_subscriptions WHERE user_id = $1 AND device_id = $2 ORDER BY id COLLATE "C" DESC OFFSET $3)`,
			p.User, p.DeviceID, parley.MaxPushSubscriptions-1); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO push_subscriptions (id, user_id, device_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4, $5, $6)
			RETURNING created_at`, out.ID, p.User, p.DeviceID, ns.Endpoint, ns.P256DH, ns.Auth).Scan(&out.CreatedAt)
	})
	if err != nil {
		return parley.PushSubscription{}, false, err
	}
	out.CreatedAt = ms(out.CreatedAt)
	return out, created, nil
}

// DeletePushSubscription implements parley.Push.
func (db *DB) DeletePushSubscription(ctx context.Context, p parley.Principal, id string) error {
	if err := parley.CheckPushID(id); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM push_subscriptions WHERE id = $1 AND user_id = $2`, id, p.User)
	if err != nil {
		return wrap("delete push subscription", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.ErrNoPushSubscription
	}
	return nil
}

// RemovePushSubscription implements parley.Push.
func (db *DB) RemovePushSubscription(ctx context.Context, id, endpoint string) (bool, error) {
	if err := parley.CheckPushID(id); err != nil {
		return false, err
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM push_subscriptions WHERE id = $1 AND endpoint = $2`, id, endpoint)
	if err != nil {
		return false, wrap("remove push subscription", err)
	}
	return tag.RowsAffected() > 0, nil
}

// PushSettings implements parley.Push.
func (db *DB) PushSettings(ctx context.Context, p parley.Principal) ([]parley.PushSetting, error) {
	rows, err := db.pool.Query(ctx, `SELECT conv_id, level FROM push_settings WHERE user_id = $1 ORDER BY conv_id COLLATE "C"`, p.User)
	if err != nil {
		return nil, wrap("push settings", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (parley.PushSetting, error) {
		var s parley.PushSetting
		err := r.Scan(&s.Conv, &s.Level)
		return s, err
	})
	if err != nil {
		return nil, wrap("push settings", err)
	}
	if out == nil {
		out = []parley.PushSetting{}
	}
	return out, nil
}

// SetPushLevel implements parley.Push. The open period is checked in the
// statement that writes, so a level is never stored for a non-member.
func (db *DB) SetPushLevel(ctx context.Context, p parley.Principal, conv string, level parley.PushLevel) (parley.PushSetting, error) {
	if err := parley.CheckConvID(conv); err != nil {
		return parley.PushSetting{}, err
	}
	if err := parley.CheckPushLevel(level); err != nil {
		return parley.PushSetting{}, err
	}
	err := db.write(ctx, "set push level", func(tx pgx.Tx) error {
		var open bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL)`,
			conv, p.User).Scan(&open); err != nil {
			return err
		}
		if !open {
			return parley.ErrNotMember
		}
		if level == parley.PushAll {
			_, err := tx.Exec(ctx, `DELETE FROM push_settings WHERE user_id = $1 AND conv_id = $2`, p.User, conv)
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO push_settings (user_id, conv_id, level) VALUES ($1, $2, $3)
			ON CONFLICT (user_id, conv_id) DO UPDATE SET level = excluded.level`, p.User, conv, string(level))
		return err
	})
	if err != nil {
		return parley.PushSetting{}, err
	}
	return parley.PushSetting{Conv: conv, Level: level}, nil
}

// qPushTargets is parley.Push.PushTargets in one query for the whole
// batch (the messages as two arrays, kept in their order; per message the
// same filter as sqlite/push.go).
const qPushTargets = `SELECT m.ord, s.id, s.user_id, s.device_id, s.endpoint, s.p256dh, s.auth, s.created_at
FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS m(conv_id, seq, ord)
JOIN events e ON e.conv_id = m.conv_id AND e.seq = m.seq
JOIN periods p ON p.conv_id = e.conv_id AND p.to_seq IS NULL AND p.from_seq <= e.seq AND p.user_id <> e.sender_user
JOIN push_subscriptions s ON s.user_id = p.user_id
LEFT JOIN push_settings ps ON ps.user_id = p.user_id AND ps.conv_id = e.conv_id
LEFT JOIN delivered_cursors d ON d.user_id = s.user_id AND d.device_id = s.device_id AND d.conv_id = e.conv_id
WHERE e.kind = 'message' AND e.recall_seq IS NULL
  AND (ps.level IS NULL
    OR (ps.level = 'mentions' AND EXISTS (SELECT 1 FROM mentions mn WHERE mn.conv_id = e.conv_id AND mn.user_id = p.user_id AND mn.seq = e.seq)))
  AND coalesce(d.seq, 0) < e.seq
  AND EXISTS (SELECT 1 FROM tokens t WHERE t.user_id = s.user_id AND t.device_id = s.device_id AND t.replaced_at IS NULL)
ORDER BY m.ord, s.id COLLATE "C"`

// PushTargets implements parley.Push: one round trip for the batch.
func (db *DB) PushTargets(ctx context.Context, msgs []parley.PushMessage) ([]parley.PushTarget, error) {
	if err := parley.CheckPushTargets(msgs); err != nil || len(msgs) == 0 {
		return nil, err
	}
	convs, seqs := make([]string, len(msgs)), make([]int64, len(msgs))
	for i, m := range msgs {
		convs[i], seqs[i] = m.Conv, m.Seq
	}
	rows, err := db.pool.Query(ctx, qPushTargets, convs, seqs)
	if err != nil {
		return nil, wrap("push targets", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (parley.PushTarget, error) {
		var t parley.PushTarget
		var ord int64
		s := &t.Sub
		err := r.Scan(&ord, &s.ID, &s.User, &s.Device, &s.Endpoint, &s.P256DH, &s.Auth, &s.CreatedAt)
		s.CreatedAt = ms(s.CreatedAt)
		if err == nil {
			t.Msg = msgs[ord-1]
		}
		return t, err
	})
	return out, wrap("push targets", err)
}
