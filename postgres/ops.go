package postgres

import (
	"context"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// lockShare is CreateHook's lock on the conversation row: it queues behind
// membership changes (FOR NO KEY UPDATE) so the bot's period cannot end
// between the check and the insert, and lets hook creations and cursor
// moves run beside each other.
const lockShare = "FOR SHARE"

// AppendAudit implements parley.Operations.
func (db *DB) AppendAudit(ctx context.Context, e parley.AuditEntry) (parley.AuditEntry, error) {
	if err := parley.ValidateAuditEntry(e); err != nil {
		return parley.AuditEntry{}, err
	}
	err := db.pool.QueryRow(ctx, `INSERT INTO audit_log (operator, action, target, params, outcome)
		VALUES ($1, $2, $3, $4, $5) RETURNING id, created_at`,
		e.Operator, e.Action, e.Target, e.Params, e.Outcome).Scan(&e.ID, &e.At)
	if err != nil {
		return parley.AuditEntry{}, wrap("append audit", err)
	}
	e.At = ms(e.At)
	return e, nil
}

// FinishAudit implements parley.Operations.
func (db *DB) FinishAudit(ctx context.Context, id int64, outcome string) error {
	if err := parley.CheckAuditOutcome(id, outcome); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE audit_log SET outcome = $1 WHERE id = $2 AND outcome = $3`, outcome, id, parley.AuditPending)
	if err != nil {
		return wrap("finish audit", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.Errorf(parley.CodeNotFound, "no pending audit entry %d", id)
	}
	return nil
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
	rows, err := db.pool.Query(ctx, `SELECT id, operator, action, target, params, outcome, created_at
		FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, q.Limit)
	if err != nil {
		return nil, wrap("audit", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (parley.AuditEntry, error) {
		var e parley.AuditEntry
		err := row.Scan(&e.ID, &e.Operator, &e.Action, &e.Target, &e.Params, &e.Outcome, &e.At)
		e.At = ms(e.At)
		return e, err
	})
	if err != nil {
		return nil, wrap("audit", err)
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
	err = db.write(ctx, "create hook", func(tx pgx.Tx) error {
		if _, err := lockConv(ctx, tx, nh.Conv, lockShare, parley.ErrConvNotFound); err != nil {
			return err
		}
		var disabled bool
		err := tx.QueryRow(ctx, `SELECT disabled FROM users WHERE id = $1`, nh.Bot).Scan(&disabled)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && disabled) {
			return parley.ErrBotNotFound
		}
		if err != nil {
			return err
		}
		var in bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL)`,
			nh.Conv, nh.Bot).Scan(&in); err != nil {
			return err
		}
		if !in {
			return parley.ErrBotNotMember
		}
		return tx.QueryRow(ctx, `INSERT INTO hooks (id, conv_id, bot_user, secret, sealed, created_by)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at`,
			h.ID, h.Conv, h.Bot, stored, sealed, h.CreatedBy).Scan(&h.CreatedAt)
	})
	if err != nil {
		return parley.Hook{}, err
	}
	h.CreatedAt = ms(h.CreatedAt)
	return h, nil
}

// Hook implements parley.Operations.
func (db *DB) Hook(ctx context.Context, id string) (parley.Hook, error) {
	if err := parley.CheckHookID(id); err != nil {
		return parley.Hook{}, err
	}
	h := parley.Hook{ID: id}
	var (
		stored string
		sealed bool
	)
	err := db.pool.QueryRow(ctx, `SELECT conv_id, bot_user, secret, sealed, created_by, created_at FROM hooks WHERE id = $1`, id).
		Scan(&h.Conv, &h.Bot, &stored, &sealed, &h.CreatedBy, &h.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return parley.Hook{}, parley.ErrHookNotFound
	}
	if err != nil {
		return parley.Hook{}, wrap("hook", err)
	}
	if h.Secret, err = parley.OpenHookSecret(db.opts.Secrets, id, stored, sealed); err != nil {
		return parley.Hook{}, wrap("hook", err)
	}
	h.CreatedAt = ms(h.CreatedAt)
	return h, nil
}

// DeleteHook implements parley.Operations.
func (db *DB) DeleteHook(ctx context.Context, id string) error {
	if err := parley.CheckHookID(id); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM hooks WHERE id = $1`, id)
	if err != nil {
		return wrap("delete hook", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.ErrHookNotFound
	}
	return nil
}
