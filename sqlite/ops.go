package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/parleychat/parley"
)

// AppendAudit implements parley.Operations.
func (db *DB) AppendAudit(ctx context.Context, e parley.AuditEntry) (parley.AuditEntry, error) {
	if err := parley.ValidateAuditEntry(e); err != nil {
		return parley.AuditEntry{}, err
	}
	err := db.write(ctx, "append audit", func(tx *txn) error {
		var at int64
		err := tx.QueryRowContext(ctx, `INSERT INTO audit_log (operator, action, target, params, outcome, created_at)
			VALUES (?, ?, ?, ?, ?, `+nowMS+`) RETURNING id, created_at`,
			e.Operator, e.Action, e.Target, e.Params, e.Outcome).Scan(&e.ID, &at)
		e.At = msTime(at)
		return err
	})
	if err != nil {
		return parley.AuditEntry{}, err
	}
	return e, nil
}

// FinishAudit implements parley.Operations.
func (db *DB) FinishAudit(ctx context.Context, id int64, outcome string) error {
	if err := parley.CheckAuditOutcome(id, outcome); err != nil {
		return err
	}
	return db.write(ctx, "finish audit", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE audit_log SET outcome = ? WHERE id = ? AND outcome = ?`, outcome, id, parley.AuditPending)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = parley.Errorf(parley.CodeNotFound, "no pending audit entry %d", id)
			}
			return err
		}
		return nil
	})
}

// Audit implements parley.Operations.
func (db *DB) Audit(ctx context.Context, q parley.AuditQuery) ([]parley.AuditEntry, error) {
	q, err := parley.CheckAuditQuery(q)
	if err != nil {
		return nil, err
	}
	before := q.Before
	if before == 0 {
		before = math.MaxInt64
	}
	out := []parley.AuditEntry{}
	err = db.read(ctx, "audit", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, operator, action, target, params, outcome, created_at
			FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?`, before, q.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e parley.AuditEntry
			var at int64
			if err := rows.Scan(&e.ID, &e.Operator, &e.Action, &e.Target, &e.Params, &e.Outcome, &at); err != nil {
				return err
			}
			e.At = msTime(at)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CreateHook implements parley.Operations.
func (db *DB) CreateHook(ctx context.Context, nh parley.NewHook) (parley.Hook, error) {
	if err := parley.ValidateNewHook(nh); err != nil {
		return parley.Hook{}, err
	}
	h := parley.Hook{ID: parley.NewID(), Conv: nh.Conv, Bot: nh.Bot, Secret: parley.NewHookSecret(), CreatedBy: nh.CreatedBy}
	stored, sealed, err := parley.SealHookSecret(db.opts.Secrets, h.ID, h.Secret)
	if err != nil {
		return parley.Hook{}, err
	}
	err = db.write(ctx, "create hook", func(tx *txn) error {
		// The write lock BEGIN IMMEDIATE holds is the conversation lock:
		// the bot's membership cannot change between the check and the
		// insert.
		if _, err := loadConv(ctx, tx, nh.Conv, parley.ErrConvNotFound); err != nil {
			return err
		}
		var disabled bool
		err := tx.QueryRowContext(ctx, `SELECT disabled FROM users WHERE id = ?`, nh.Bot).Scan(&disabled)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && disabled) {
			return parley.ErrBotNotFound
		}
		if err != nil {
			return err
		}
		in, err := isOpenMember(ctx, tx, nh.Conv, nh.Bot)
		if err != nil {
			return err
		}
		if !in {
			return parley.ErrBotNotMember
		}
		var at int64
		err = tx.QueryRowContext(ctx, `INSERT INTO hooks (id, conv_id, bot_user, secret, sealed, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, `+nowMS+`) RETURNING created_at`,
			h.ID, h.Conv, h.Bot, stored, sealed, h.CreatedBy).Scan(&at)
		h.CreatedAt = msTime(at)
		return err
	})
	if err != nil {
		return parley.Hook{}, err
	}
	return h, nil
}

// Hook implements parley.Operations.
func (db *DB) Hook(ctx context.Context, id string) (parley.Hook, error) {
	if err := parley.CheckHookID(id); err != nil {
		return parley.Hook{}, err
	}
	h := parley.Hook{ID: id}
	var (
		at     int64
		stored string
		sealed bool
	)
	err := db.read(ctx, "hook", func(tx *txn) error {
		return tx.QueryRowContext(ctx, `SELECT conv_id, bot_user, secret, sealed, created_by, created_at FROM hooks WHERE id = ?`, id).
			Scan(&h.Conv, &h.Bot, &stored, &sealed, &h.CreatedBy, &at)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return parley.Hook{}, parley.ErrHookNotFound
	}
	if err != nil {
		return parley.Hook{}, err
	}
	if h.Secret, err = parley.OpenHookSecret(db.opts.Secrets, id, stored, sealed); err != nil {
		return parley.Hook{}, fmt.Errorf("sqlite: hook: %w", err)
	}
	h.CreatedAt = msTime(at)
	return h, nil
}

// DeleteHook implements parley.Operations.
func (db *DB) DeleteHook(ctx context.Context, id string) error {
	if err := parley.CheckHookID(id); err != nil {
		return err
	}
	return db.write(ctx, "delete hook", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM hooks WHERE id = ?`, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err == nil && n == 0 {
			err = parley.ErrHookNotFound
		}
		return err
	})
}
