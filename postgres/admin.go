package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// The statements of the listings and the retention claim, each served by
// an index of migration 0006 (IndexedStatements checks the plans).
const (
	qAdminUsers = `SELECT u.id, coalesce(u.email, ''), u.role, u.disabled, u.created_at,
		(SELECT max(t.last_used_at) FROM tokens t WHERE t.user_id = u.id),
		f.files, f.bytes
		FROM users u CROSS JOIN LATERAL (
			SELECT count(*) AS files, coalesce(sum(size), 0)::bigint AS bytes FROM files WHERE owner = u.id) f
		WHERE u.id COLLATE "C" > $1 ORDER BY u.id COLLATE "C" LIMIT $2`
	qAdminConvs = `SELECT c.id, c.kind, c.title, c.owner, c.next_seq - 1, c.min_seq, c.epoch,
		c.retain_max_age_ms, c.retain_last_n, c.created_at,
		(SELECT count(*) FROM periods p WHERE p.conv_id = c.id AND p.to_seq IS NULL)
		FROM conversations c WHERE c.id COLLATE "C" > $1 ORDER BY c.id COLLATE "C" LIMIT $2`
	qAdminExports = `SELECT ` + jobCols + `, updated_at
		FROM export_jobs WHERE id COLLATE "C" > $1 ORDER BY id COLLATE "C" LIMIT $2`
	qAdminHooks = `SELECT id, conv_id, bot_user, created_by, created_at
		FROM hooks WHERE id COLLATE "C" > $1 ORDER BY id COLLATE "C" LIMIT $2`
	qClaimRetention = `WITH r AS (
		SELECT (floor(extract(epoch FROM clock_timestamp()) * 1000 / $1) * $1)::bigint AS round_start)
	INSERT INTO retention_runs (conv_id, round_start, run_at)
	SELECT c.id, r.round_start, clock_timestamp() FROM conversations c, r
	WHERE (c.retain_max_age_ms > 0 OR c.retain_last_n > 0)
		AND NOT EXISTS (SELECT 1 FROM retention_runs x WHERE x.conv_id = c.id AND x.round_start >= r.round_start)
	ORDER BY c.id COLLATE "C" LIMIT $2
	ON CONFLICT (conv_id) DO UPDATE SET round_start = excluded.round_start, run_at = excluded.run_at
		WHERE retention_runs.round_start < excluded.round_start
	RETURNING conv_id`
)

// scanPlus scans a row whose first columns a shared scanner (scanJob)
// reads, with more columns after them.
type scanPlus struct {
	row   pgx.Row
	extra []any
}

func (s scanPlus) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra...)...) }

// adminList runs one page query (one statement: one snapshot) whose
// arguments are the cursor id and limit+1, and builds the page.
func adminList[T any](ctx context.Context, db *DB, op string, q parley.AdminQuery, query string,
	scan func(row pgx.CollectableRow) (T, error), id func(T) string) (parley.AdminPage[T], error) {
	after, err := parley.CheckAdminQuery(q)
	if err != nil {
		return parley.AdminPage[T]{}, err
	}
	rows, err := db.pool.Query(ctx, query, after, q.Limit+1)
	if err != nil {
		return parley.AdminPage[T]{}, wrap(op, err)
	}
	items, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return parley.AdminPage[T]{}, wrap(op, err)
	}
	return parley.NewAdminPage(items, q.Limit, id), nil
}

// AdminUsers implements parley.Admin.
func (db *DB) AdminUsers(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminUser], error) {
	return adminList(ctx, db, "admin users", q, qAdminUsers,
		func(row pgx.CollectableRow) (parley.AdminUser, error) {
			var u parley.AdminUser
			var role string
			var seen *time.Time
			err := row.Scan(&u.ID, &u.Email, &role, &u.Disabled, &u.CreatedAt, &seen, &u.Files.Files, &u.Files.Bytes)
			u.Role, u.CreatedAt = parley.Role(role), ms(u.CreatedAt)
			if seen != nil {
				u.LastSeen = ms(*seen)
			}
			return u, err
		}, func(u parley.AdminUser) string { return u.ID })
}

// AdminConvs implements parley.Admin.
func (db *DB) AdminConvs(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminConv], error) {
	return adminList(ctx, db, "admin convs", q, qAdminConvs,
		func(row pgx.CollectableRow) (parley.AdminConv, error) {
			var c parley.AdminConv
			var kind string
			var maxAgeMS int64
			err := row.Scan(&c.ID, &kind, &c.Title, &c.Owner, &c.Head, &c.MinSeq, &c.Epoch,
				&maxAgeMS, &c.Retention.KeepLast, &c.CreatedAt, &c.Members)
			c.Kind, c.CreatedAt = parley.ConvKind(kind), ms(c.CreatedAt)
			c.Retention.MaxAge = time.Duration(maxAgeMS) * time.Millisecond
			return c, err
		}, func(c parley.AdminConv) string { return c.ID })
}

// AdminExports implements parley.Admin.
func (db *DB) AdminExports(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminExport], error) {
	return adminList(ctx, db, "admin exports", q, qAdminExports,
		func(row pgx.CollectableRow) (parley.AdminExport, error) {
			var updated time.Time
			j, err := scanJob(scanPlus{row, []any{&updated}})
			e := parley.AdminExport{ExportJob: j}
			if !j.State.Pinning() {
				e.FinishedAt = ms(updated)
			}
			return e, err
		}, func(e parley.AdminExport) string { return e.ID })
}

// AdminHooks implements parley.Admin.
func (db *DB) AdminHooks(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.Hook], error) {
	return adminList(ctx, db, "admin hooks", q, qAdminHooks,
		func(row pgx.CollectableRow) (parley.Hook, error) {
			var h parley.Hook
			err := row.Scan(&h.ID, &h.Conv, &h.Bot, &h.CreatedBy, &h.CreatedAt)
			h.CreatedAt = ms(h.CreatedAt)
			return h, err
		}, func(h parley.Hook) string { return h.ID })
}

// ClaimRetention implements parley.Admin. The upsert only moves a
// conversation's round forward: a second gateway inserting the same id at
// the same time waits for the first's commit, then finds the round taken
// and returns nothing for it.
func (db *DB) ClaimRetention(ctx context.Context, every time.Duration, limit int) ([]string, error) {
	if err := parley.CheckClaimRetention(every, limit); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, qClaimRetention, every.Milliseconds(), limit)
	if err != nil {
		return nil, wrap("claim retention", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("claim retention", err)
	}
	slices.Sort(ids)
	return ids, nil
}
