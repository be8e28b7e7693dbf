package sqlite

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/parleychat/parley"
)

// The statements of the listings and the retention claim, each served by
// an index (IndexedStatements checks the plans).
const (
	qAdminUsers = `SELECT u.id, coalesce(u.email, ''), u.role, u.disabled, u.created_at,
		(SELECT max(t.last_used_at) FROM tokens t WHERE t.user_id = u.id),
		(SELECT count(*) FROM files f WHERE f.owner = u.id),
		(SELECT coalesce(sum(f.size), 0) FROM files f WHERE f.owner = u.id)
		FROM users u WHERE u.id > ? ORDER BY u.id LIMIT ?`
	qAdminConvs = `SELECT ` + convColumns + `,
		(SELECT count(*) FROM periods p WHERE p.conv_id = conversations.id AND p.to_seq IS NULL)
		FROM conversations WHERE id > ? ORDER BY id LIMIT ?`
	qAdminExports = `SELECT ` + jobColumns + `, updated_at
		FROM export_jobs WHERE id > ? ORDER BY id LIMIT ?`
	qAdminHooks = `SELECT id, conv_id, bot_user, created_by, created_at
		FROM hooks WHERE id > ? ORDER BY id LIMIT ?`
	qClaimRetention = `INSERT INTO retention_runs (conv_id, round_start, run_at)
			SELECT c.id, (` + nowMS + ` / ?1) * ?1, ` + nowMS + ` FROM conversations c
			WHERE (c.retain_max_age_ms > 0 OR c.retain_last_n > 0)
				AND NOT EXISTS (SELECT 1 FROM retention_runs x WHERE x.conv_id = c.id AND x.round_start >= (` + nowMS + ` / ?1) * ?1)
			ORDER BY c.id LIMIT ?2
			ON CONFLICT (conv_id) DO UPDATE SET round_start = excluded.round_start, run_at = excluded.run_at
				WHERE retention_runs.round_start < excluded.round_start
			RETURNING conv_id`
)

// scanPlus scans a row whose first columns a shared scanner (scanJob)
// reads, with more columns after them.
type scanPlus struct {
	row   scanner
	extra []any
}

func (s scanPlus) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra...)...) }

// adminList runs one page query in one read transaction (one snapshot)
// whose arguments are the cursor id and limit+1, and builds the page.
func adminList[T any](ctx context.Context, db *DB, op string, q parley.AdminQuery, query string,
	scan func(row *sql.Rows) (T, error), id func(T) string) (parley.AdminPage[T], error) {
	after, err := parley.CheckAdminQuery(q)
	if err != nil {
		return parley.AdminPage[T]{}, err
	}
	var items []T
	err = db.read(ctx, op, func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, query, after, q.Limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			it, err := scan(rows)
			if err != nil {
				return err
			}
			items = append(items, it)
		}
		return rows.Err()
	})
	if err != nil {
		return parley.AdminPage[T]{}, err
	}
	return parley.NewAdminPage(items, q.Limit, id), nil
}

// AdminUsers implements parley.Admin.
func (db *DB) AdminUsers(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminUser], error) {
	return adminList(ctx, db, "admin users", q, qAdminUsers,
		func(row *sql.Rows) (parley.AdminUser, error) {
			var u parley.AdminUser
			var role string
			var created int64
			var seen sql.NullInt64
			err := row.Scan(&u.ID, &u.Email, &role, &u.Disabled, &created, &seen, &u.Files.Files, &u.Files.Bytes)
			u.Role, u.CreatedAt = parley.Role(role), msTime(created)
			if seen.Valid {
				u.LastSeen = msTime(seen.Int64)
			}
			return u, err
		}, func(u parley.AdminUser) string { return u.ID })
}

// AdminConvs implements parley.Admin.
func (db *DB) AdminConvs(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminConv], error) {
	return adminList(ctx, db, "admin convs", q, qAdminConvs,
		func(row *sql.Rows) (parley.AdminConv, error) {
			var c conv
			var members int64
			err := row.Scan(&c.id, &c.kind, &c.title, &c.owner, &c.next, &c.min, &c.epoch, &c.maxAgeMS, &c.keepLast, &c.lastAt, &c.createdAt, &members)
			return parley.AdminConv{Conversation: c.public(), Members: members}, err
		}, func(c parley.AdminConv) string { return c.ID })
}

// AdminExports implements parley.Admin.
func (db *DB) AdminExports(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminExport], error) {
	return adminList(ctx, db, "admin exports", q, qAdminExports,
		func(row *sql.Rows) (parley.AdminExport, error) {
			var updated int64
			j, err := scanJob(scanPlus{row, []any{&updated}})
			e := parley.AdminExport{ExportJob: j}
			if !j.State.Pinning() {
				e.FinishedAt = msTime(updated)
			}
			return e, err
		}, func(e parley.AdminExport) string { return e.ID })
}

// AdminHooks implements parley.Admin.
func (db *DB) AdminHooks(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.Hook], error) {
	return adminList(ctx, db, "admin hooks", q, qAdminHooks,
		func(row *sql.Rows) (parley.Hook, error) {
			var h parley.Hook
			var created int64
			err := row.Scan(&h.ID, &h.Conv, &h.Bot, &h.CreatedBy, &created)
			h.CreatedAt = msTime(created)
			return h, err
		}, func(h parley.Hook) string { return h.ID })
}

// ClaimRetention implements parley.Admin. The one writer serialises
// claims; the upsert only moves a conversation's round_start forward, so a
// claim in the same round finds nothing left. 'now' is fixed within the
// statement, so every row gets the same round.
func (db *DB) ClaimRetention(ctx context.Context, every time.Duration, limit int) ([]string, error) {
	if err := parley.CheckClaimRetention(every, limit); err != nil {
		return nil, err
	}
	var ids []string
	err := db.write(ctx, "claim retention", func(tx *txn) error {
		var err error
		ids, err = scanIDs(tx.QueryContext(ctx, qClaimRetention, every.Milliseconds(), limit))
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}
