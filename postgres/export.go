package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// Export jobs (parley.Exports) on PostgreSQL.
//
// The snapshot is exact under concurrent writers at READ COMMITTED because
// CreateExport locks the scope's conversation rows FOR KEY SHARE before it
// reads their heads. That lock does not conflict with the FOR NO KEY UPDATE
// of appenders, so sends go on while a job is created; and since a seq is
// assigned and committed under the appender's row lock, the committed
// next_seq a statement reads implies every event below it is committed: the
// head recorded is a prefix of the log that reads the same forever after.
// KEY SHARE does conflict with FOR UPDATE, which Purge and Rollback take: a
// purge or rollback that starts while a job is being created waits for its
// commit and then sees its pin (export_convs, export_periods), and one that
// started first makes the creator wait and read the heads it left.
//
// A user's creations are serialised by a transaction-level advisory lock on
// the user id, so the active-job limit holds under concurrent requests and
// two requests with one key meet as a replay rather than a unique violation
// (which is still handled: the transaction is retried once as a replay).

// exportLockSpace is the first key of the two-key advisory lock on a user's
// export creations ("pExp"); the two-key space never overlaps the one-key
// space of migrationLock.
const exportLockSpace int32 = 0x70457870

// jobCols lists an export job's columns for scanJob.
const jobCols = `id, user_id, idem_key, scope, state, error, done, total, sha256, bytes, attempts,
	lease_owner, lease_until, not_before, expires_at, created_at, files_sha256, files_bytes`

// scanJob reads a row of jobCols.
func scanJob(row pgx.Row) (parley.ExportJob, error) {
	var j parley.ExportJob
	var state string
	var leaseUntil, expiresAt *time.Time
	err := row.Scan(&j.ID, &j.User, &j.Key, &j.Scope, &state, &j.Error, &j.Done, &j.Total, &j.SHA256, &j.Bytes, &j.Attempts,
		&j.LeaseOwner, &leaseUntil, &j.NotBefore, &expiresAt, &j.CreatedAt, &j.FilesSHA256, &j.FilesBytes)
	if err != nil {
		return parley.ExportJob{}, err
	}
	j.State = parley.ExportState(state)
	if leaseUntil != nil {
		j.LeaseUntil = ms(*leaseUntil)
	}
	if expiresAt != nil {
		j.ExpiresAt = ms(*expiresAt)
	}
	j.NotBefore, j.CreatedAt = ms(j.NotBefore), ms(j.CreatedAt)
	return j, nil
}

// querier is what the read helpers need: the pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// loadJob reads a job; a missing one is ErrExportNotFound.
func loadJob(ctx context.Context, q querier, id string) (parley.ExportJob, error) {
	j, err := scanJob(q.QueryRow(ctx, `SELECT `+jobCols+` FROM export_jobs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return j, parley.ErrExportNotFound
	}
	return j, err
}

// CreateExport implements parley.Exports.
func (db *DB) CreateExport(ctx context.Context, p parley.Principal, r parley.ExportRequest) (parley.ExportJob, error) {
	convID, err := parley.ValidateExport(r)
	if err != nil {
		return parley.ExportJob{}, err
	}
	out, err := db.createExport(ctx, p, r, convID)
	if isUnique(err, "export_jobs_idem") {
		// A creation with the same key committed between our lookup and
		// our insert (the advisory lock makes this unlikely): a fresh
		// transaction finds it and answers as a replay.
		out, err = db.createExport(ctx, p, r, convID)
	}
	return out, wrap("create export", err)
}

func (db *DB) createExport(ctx context.Context, p parley.Principal, r parley.ExportRequest, convID string) (parley.ExportJob, error) {
	var out parley.ExportJob
	err := inTx(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, exportLockSpace, p.User); err != nil {
			return err
		}
		j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobCols+` FROM export_jobs WHERE user_id = $1 AND idem_key = $2`, p.User, r.Key))
		switch {
		case err == nil:
			if err := parley.CheckExportReplay(j.Scope, r.Scope); err != nil {
				return err
			}
			j.Replayed = true
			out = j
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		// Lock the scope's conversations, in id order (no deadlock between
		// two creators, though KEY SHARE never conflicts with itself).
		// Every conversation in which the caller ever had a period; for
		// "conv:<id>" just that one.
		rows, err := tx.Query(ctx, `SELECT id FROM conversations
			WHERE id IN (SELECT conv_id FROM periods WHERE user_id = $1) AND ($2 = '' OR id = $2)
			ORDER BY id COLLATE "C" FOR KEY SHARE`, p.User, convID)
		if err != nil {
			return err
		}
		convs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if convID != "" && len(convs) == 0 {
			return parley.ErrNotMember
		}
		if !r.NoReuse {
			if j, ok, err := reusable(ctx, tx, p.User, r.Scope, convID); err != nil || ok {
				out = j
				return err
			}
		}
		var active int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM export_jobs WHERE user_id = $1 AND state IN ('queued', 'running')`,
			p.User).Scan(&active); err != nil {
			return err
		}
		if err := parley.CheckExportActive(active, r.MaxActive); err != nil {
			return err
		}
		id := parley.NewID()
		if out, err = scanJob(tx.QueryRow(ctx, `INSERT INTO export_jobs (id, user_id, idem_key, scope, state, max_kept)
			VALUES ($1, $2, $3, $4, 'queued', $5) RETURNING `+jobCols, id, p.User, r.Key, r.Scope, max(r.MaxKept, 0))); err != nil {
			return err
		}
		// The heads: committed next_seq under our KEY SHARE locks, so every
		// seq up to the head is committed too; with them the epoch and
		// min_seq that reuse compares. The periods come from the recorded
		// heads: those that begin at or below the head, cut at it.
		if _, err := tx.Exec(ctx, `INSERT INTO export_convs (job_id, conv_id, head, epoch, min_seq)
			SELECT $1, id, next_seq - 1, epoch, min_seq FROM conversations WHERE id = ANY($2::text[])`, id, convs); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO export_periods (job_id, conv_id, from_seq, to_seq)
			SELECT x.job_id, x.conv_id, p.from_seq, LEAST(COALESCE(p.to_seq, x.head), x.head)
			FROM export_convs x JOIN periods p ON p.conv_id = x.conv_id AND p.user_id = $2 AND p.from_seq <= x.head
			WHERE x.job_id = $1`, id, p.User)
		return err
	})
	return out, err
}

// ExportJob implements parley.Exports.
func (db *DB) ExportJob(ctx context.Context, id string) (parley.ExportJob, error) {
	if err := parley.CheckExportID(id); err != nil {
		return parley.ExportJob{}, err
	}
	j, err := loadJob(ctx, db.pool, id)
	return j, wrap("export job", err)
}

// ExportSigningKey implements parley.Exports: the insert does nothing when
// the key exists (a concurrent first insert waits for the other's commit,
// then does nothing), and the read after it, a statement of its own, sees
// whichever key won. The key is kept sealed (Options.Secrets).
func (db *DB) ExportSigningKey(ctx context.Context) (string, []byte, error) {
	key := make([]byte, parley.ExportSigningKeySize)
	rand.Read(key)
	label := parley.ExportKeyLabel(parley.ExportSigningKeyID)
	stored, sealed, err := parley.SealSecret(db.opts.Secrets, label, key)
	if err != nil {
		return "", nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO export_signing_keys (id, secret, sealed) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
		parley.ExportSigningKeyID, stored, sealed); err != nil {
		return "", nil, wrap("export signing key", err)
	}
	var got []byte
	if err := db.pool.QueryRow(ctx, `SELECT secret, sealed FROM export_signing_keys WHERE id = $1`, parley.ExportSigningKeyID).Scan(&got, &sealed); err != nil {
		return "", nil, wrap("export signing key", err)
	}
	if got, err = parley.OpenSecret(db.opts.Secrets, label, got, sealed); err != nil {
		return "", nil, wrap("export signing key", err)
	}
	return parley.ExportSigningKeyID, got, nil
}

// ExportJobs implements parley.Exports.
func (db *DB) ExportJobs(ctx context.Context, ids []string) ([]parley.ExportJob, error) {
	ids = validExportIDs(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+jobCols+` FROM export_jobs WHERE id = ANY($1::text[]) ORDER BY id COLLATE "C"`, ids)
	if err != nil {
		return nil, wrap("export jobs", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (parley.ExportJob, error) { return scanJob(r) })
	return jobs, wrap("export jobs", err)
}

// ExportCounts implements parley.Exports.
func (db *DB) ExportCounts(ctx context.Context) (map[parley.ExportState]int64, error) {
	rows, err := db.pool.Query(ctx, `SELECT state, count(*) FROM export_jobs GROUP BY state`)
	if err != nil {
		return nil, wrap("export counts", err)
	}
	out := map[parley.ExportState]int64{}
	var state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		out[parley.ExportState(state)] = n
		return nil
	})
	if err != nil {
		return nil, wrap("export counts", err)
	}
	return out, nil
}

// validExportIDs returns the well-formed ids of ids.
func validExportIDs(ids []string) []string {
	var out []string
	for _, id := range ids {
		if parley.CheckExportID(id) == nil {
			out = append(out, id)
		}
	}
	return out
}

// ClaimExport implements parley.Exports: one statement, whose subquery
// skips the jobs another worker is claiming right now.
func (db *DB) ClaimExport(ctx context.Context, owner string, lease time.Duration) (parley.ExportJob, bool, error) {
	if err := parley.CheckExportClaim(owner); err != nil {
		return parley.ExportJob{}, false, err
	}
	j, err := scanJob(db.pool.QueryRow(ctx, `UPDATE export_jobs
		SET state = 'running', lease_owner = $1, lease_until = clock_timestamp() + $2::bigint * interval '1 microsecond',
			attempts = attempts + 1, updated_at = clock_timestamp()
		WHERE id = (SELECT id FROM export_jobs
			WHERE (state = 'queued' AND not_before <= clock_timestamp()) OR (state = 'running' AND lease_until < clock_timestamp())
			ORDER BY created_at, id COLLATE "C" LIMIT 1
			FOR UPDATE SKIP LOCKED)
		RETURNING `+jobCols, owner, lease.Microseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return parley.ExportJob{}, false, nil
	}
	if err != nil {
		return parley.ExportJob{}, false, wrap("claim export", err)
	}
	return j, true, nil
}

// snapshotSQL reads job $1's snapshot: per conversation in id order, the
// head, the periods as two arrays, and the count of message events inside
// them (periods end at or below the head).
const snapshotSQL = `SELECT x.conv_id, x.head,
	ARRAY(SELECT from_seq FROM export_periods p WHERE p.job_id = x.job_id AND p.conv_id = x.conv_id ORDER BY from_seq),
	ARRAY(SELECT to_seq FROM export_periods p WHERE p.job_id = x.job_id AND p.conv_id = x.conv_id ORDER BY from_seq),
	(SELECT count(*) FROM export_periods p JOIN events e
		ON e.conv_id = p.conv_id AND e.seq >= p.from_seq AND e.seq <= p.to_seq AND e.kind = 'message'
		WHERE p.job_id = x.job_id AND p.conv_id = x.conv_id)
FROM export_convs x WHERE x.job_id = $1
ORDER BY x.conv_id COLLATE "C"`

// ExportSnapshot implements parley.Exports.
func (db *DB) ExportSnapshot(ctx context.Context, id string) ([]parley.ExportConv, error) {
	if err := parley.CheckExportID(id); err != nil {
		return nil, err
	}
	out := []parley.ExportConv{}
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := loadJob(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, snapshotSQL, id)
		if err != nil {
			return err
		}
		var c parley.ExportConv
		var from, to []int64
		_, err = pgx.ForEachRow(rows, []any{&c.Conv, &c.Head, &from, &to, &c.Messages}, func() error {
			c.Periods = toPeriods(from, to)
			out = append(out, c)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, wrap("export snapshot", err)
	}
	return out, nil
}

// exportEventsSQL reads at most $4 message events of conversation $2 that
// job $1 exports, with seq > $3: one primary-key range scan per recorded
// period (they are disjoint, ascending and end at or below the head). A
// recall counts when its seq is at or below the head; each row carries the
// head and the job's user, which Decorate needs.
const exportEventsSQL = `SELECT e.seq, e.mid, e.sender_user, e.sender_device, e.body,
	e.recall_seq IS NOT NULL AND e.recall_seq <= x.head, e.created_at, coalesce(e.reply_to, 0), coalesce(e.mentions, ''),
	e.attachments, x.head, j.user_id
FROM export_convs x
JOIN export_jobs j ON j.id = x.job_id
JOIN export_periods p ON p.job_id = x.job_id AND p.conv_id = x.conv_id AND p.to_seq > $3
CROSS JOIN LATERAL (
	SELECT * FROM events
	WHERE conv_id = x.conv_id AND seq >= GREATEST(p.from_seq, $3 + 1) AND seq <= p.to_seq AND kind = 'message'
	ORDER BY seq LIMIT $4) e
WHERE x.job_id = $1 AND x.conv_id = $2
ORDER BY e.seq LIMIT $4`

// exportDerivedSQL reads the rows parley.Decorate folds into the messages
// of conversation $2 with $3 <= seq <= $4 for job $1: the edits and
// reactions that target them (over events_targets) and the replies to them
// (over events_replies), each with seq at most the snapshot head and inside
// a recorded period, filtered here before anything is counted (only
// message events have a reply_to). Recalled counts a recall at or below
// the head only. Rows whose target is no
// message of the page are ignored by Decorate.
const exportDerivedSQL = `SELECT e.seq, e.kind, e.sender_user, e.body, e.created_at, coalesce(e.target, 0), 0::bigint,
	coalesce(e.emoji, ''), coalesce(e.react_on, false), e.recall_seq IS NOT NULL AND e.recall_seq <= x.head
FROM export_convs x
JOIN export_periods p ON p.job_id = x.job_id AND p.conv_id = x.conv_id
JOIN events e ON e.conv_id = x.conv_id AND e.seq >= p.from_seq AND e.seq <= LEAST(p.to_seq, x.head)
WHERE x.job_id = $1 AND x.conv_id = $2 AND e.kind IN ('edit', 'reaction') AND e.target >= $3 AND e.target <= $4
UNION ALL
SELECT e.seq, e.kind, e.sender_user, '', e.created_at, 0, e.reply_to,
	'', false, e.recall_seq IS NOT NULL AND e.recall_seq <= x.head
FROM export_convs x
JOIN export_periods p ON p.job_id = x.job_id AND p.conv_id = x.conv_id
JOIN events e ON e.conv_id = x.conv_id AND e.seq >= p.from_seq AND e.seq <= LEAST(p.to_seq, x.head)
WHERE x.job_id = $1 AND x.conv_id = $2 AND e.reply_to IS NOT NULL AND e.reply_to >= $3 AND e.reply_to <= $4`

// ExportEvents implements parley.Exports. The messages are decorated
// (parley.Decorate) as the job's user saw them at the snapshot: AsOf the
// head, over the edit, reaction and reply events with seq at most the head
// inside the recorded periods. The two statements need no common
// transaction: everything they read is at or below the head, which later
// writes never change (a recall after the head is not counted, a purge
// skips pinned ranges, a rollback fails the job).
func (db *DB) ExportEvents(ctx context.Context, id, convID string, after int64, limit int) ([]parley.Event, error) {
	if err := parley.CheckExportEvents(id, convID, after, limit); err != nil {
		return nil, err
	}
	limit = min(limit, parley.MaxPage)
	evs := []parley.Event{}
	rows, err := db.pool.Query(ctx, exportEventsSQL, id, convID, after, limit)
	if err != nil {
		return nil, wrap("export events", err)
	}
	var ev parley.Event
	var mentions, user string
	var head int64
	dest := []any{&ev.Seq, &ev.MID, &ev.Sender, &ev.Device, &ev.Body, &ev.Recalled, &ev.At, &ev.ReplyTo, &mentions,
		attachmentsDest{&ev.Attachments}, &head, &user}
	_, err = pgx.ForEachRow(rows, dest, func() error {
		ev.Kind, ev.Mentions = parley.EventMessage, parley.SplitMentions(mentions)
		finish(&ev, convID)
		if ev.Recalled {
			ev.Mentions = nil
		}
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		return nil, wrap("export events", err)
	}
	if len(evs) == 0 {
		// Nothing left, or nothing to read from: tell them apart.
		var known bool
		if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM export_convs WHERE job_id = $1 AND conv_id = $2)`,
			id, convID).Scan(&known); err != nil {
			return nil, wrap("export events", err)
		}
		if !known {
			return nil, parley.ErrExportNotFound
		}
		return evs, nil
	}
	ds, err := db.exportDerived(ctx, id, convID, evs[0].Seq, evs[len(evs)-1].Seq)
	if err != nil {
		return nil, wrap("export events", err)
	}
	parley.Decorate(evs, ds, user, head)
	return evs, nil
}

// exportDerived runs exportDerivedSQL.
func (db *DB) exportDerived(ctx context.Context, id, convID string, first, last int64) ([]parley.DerivedRow, error) {
	rows, err := db.pool.Query(ctx, exportDerivedSQL, id, convID, first, last)
	if err != nil {
		return nil, err
	}
	var out []parley.DerivedRow
	var r parley.DerivedRow
	dest := []any{&r.Seq, &r.Kind, &r.Sender, &r.Body, &r.At, &r.Target, &r.ReplyTo, &r.Emoji, &r.On, &r.Recalled}
	_, err = pgx.ForEachRow(rows, dest, func() error {
		r.Conv, r.At = convID, ms(r.At)
		out = append(out, r)
		return nil
	})
	return out, err
}

// leaseSQL locks job $1 and reports whether owner $2 holds a live lease on
// it; no row means no such job.
const leaseSQL = `SELECT state = 'running' AND lease_owner = $2 AND lease_until >= clock_timestamp()
FROM export_jobs WHERE id = $1 FOR NO KEY UPDATE`

// leased runs fn in a transaction that holds job id's row lock and has
// checked that owner's lease on it is live: ErrLeaseLost otherwise,
// ErrExportNotFound for no such job.
func (db *DB) leased(ctx context.Context, op, owner, id string, fn func(tx pgx.Tx) error) error {
	return db.write(ctx, op, func(tx pgx.Tx) error {
		var live bool
		err := tx.QueryRow(ctx, leaseSQL, id, owner).Scan(&live)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return parley.ErrExportNotFound
		case err != nil:
			return err
		case !live:
			return parley.ErrLeaseLost
		}
		return fn(tx)
	})
}

// ExtendExport implements parley.Exports.
func (db *DB) ExtendExport(ctx context.Context, owner, id string, total int, lease time.Duration) error {
	if err := parley.CheckExportExtend(owner, id, total); err != nil {
		return err
	}
	return db.leased(ctx, "extend export", owner, id, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE export_jobs SET lease_until = clock_timestamp() + $2::bigint * interval '1 microsecond',
			total = $3, updated_at = clock_timestamp() WHERE id = $1`, id, lease.Microseconds(), total)
		return err
	})
}

// RecordShard implements parley.Exports. Under the job's row lock (which
// every call on the job takes) the batch's indexes that are recorded
// already are counted, the batch is upserted from arrays in one statement,
// and Done grows by the rest: no count over the job's shards.
func (db *DB) RecordShard(ctx context.Context, owner string, shards ...parley.ExportShard) error {
	job, err := parley.CheckExportShards(owner, shards)
	if err != nil {
		return err
	}
	n := len(shards)
	idx, conv, after, last, count, sha := make([]int32, n), make([]string, n), make([]int64, n), make([]int64, n), make([]int32, n), make([]string, n)
	for i, s := range shards {
		idx[i], conv[i], after[i], last[i], count[i], sha[i] = int32(s.Index), s.Conv, s.After, s.Last, int32(s.Count), s.SHA256
	}
	return db.leased(ctx, "record shard", owner, job, func(tx pgx.Tx) error {
		var old int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM export_shards WHERE job_id = $1 AND idx = ANY($2::int[])`,
			job, idx).Scan(&old); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO export_shards (job_id, idx, conv_id, after_seq, last_seq, count, sha256)
			SELECT $1, r.* FROM unnest($2::int[], $3::text[], $4::bigint[], $5::bigint[], $6::int[], $7::text[]) AS r
			ON CONFLICT (job_id, idx) DO UPDATE SET conv_id = EXCLUDED.conv_id, after_seq = EXCLUDED.after_seq,
				last_seq = EXCLUDED.last_seq, count = EXCLUDED.count, sha256 = EXCLUDED.sha256`,
			job, idx, conv, after, last, count, sha); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE export_jobs SET done = done + $2, updated_at = clock_timestamp() WHERE id = $1`,
			job, n-old)
		return err
	})
}

// ExportShards implements parley.Exports.
func (db *DB) ExportShards(ctx context.Context, id string) ([]parley.ExportShard, error) {
	if err := parley.CheckExportID(id); err != nil {
		return nil, err
	}
	out := []parley.ExportShard{}
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := loadJob(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT job_id, idx, conv_id, after_seq, last_seq, count, sha256
			FROM export_shards WHERE job_id = $1 ORDER BY idx`, id)
		if err != nil {
			return err
		}
		var s parley.ExportShard
		_, err = pgx.ForEachRow(rows, []any{&s.Job, &s.Index, &s.Conv, &s.After, &s.Last, &s.Count, &s.SHA256}, func() error {
			out = append(out, s)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, wrap("export shards", err)
	}
	return out, nil
}

// RecordExportFiles implements parley.Exports.
func (db *DB) RecordExportFiles(ctx context.Context, owner, id, sha256 string, bytes int64) error {
	if err := parley.CheckExportFiles(owner, id, sha256, bytes); err != nil {
		return err
	}
	return db.leased(ctx, "record export files", owner, id, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE export_jobs SET files_sha256 = $2, files_bytes = $3, updated_at = clock_timestamp() WHERE id = $1`,
			id, sha256, bytes)
		return err
	})
}

// FinishExport implements parley.Exports.
func (db *DB) FinishExport(ctx context.Context, owner, id, sha256 string, bytes int64, keep time.Duration) error {
	if err := parley.CheckExportFinish(owner, id, sha256, bytes); err != nil {
		return err
	}
	return db.leased(ctx, "finish export", owner, id, func(tx pgx.Tx) error {
		var user string
		var maxKept int
		if err := tx.QueryRow(ctx, `UPDATE export_jobs SET state = 'done', sha256 = $2, bytes = $3, error = '',
			expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond',
			lease_owner = '', lease_until = NULL, finished_at = clock_timestamp(), updated_at = clock_timestamp()
			WHERE id = $1 RETURNING user_id, max_kept`,
			id, sha256, bytes, keep.Microseconds()).Scan(&user, &maxKept); err != nil {
			return err
		}
		if maxKept <= 0 {
			return nil
		}
		// The bound on kept artifacts, under the user's export lock so two
		// finishes of one user see each other (at READ COMMITTED they
		// would not otherwise). The job row lock is taken before the
		// advisory one here and never after it elsewhere: CreateExport
		// locks no job row.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, exportLockSpace, user); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE export_jobs SET state = 'expired', updated_at = clock_timestamp()
			WHERE id IN (SELECT id FROM export_jobs WHERE user_id = $1 AND state = 'done' AND id <> $2
				ORDER BY finished_at DESC NULLS LAST, id COLLATE "C" DESC OFFSET $3)`,
			user, id, maxKept-1)
		return err
	})
}

// qStaleConvs counts the reasons the snapshot of job $1 is no longer
// current for user $2 and scope conversation $3 (” for all): a
// conversation of the scope in which the user now has a period that the
// snapshot lacks; a snapshot conversation that is gone, was rolled back
// (epoch) or purged (min_seq), or has a seq above the recorded head inside
// one of the user's periods (an event the user may see).
const qStaleConvs = `SELECT
	(SELECT count(DISTINCT p.conv_id) FROM periods p WHERE p.user_id = $2 AND ($3 = '' OR p.conv_id = $3)
		AND p.conv_id NOT IN (SELECT conv_id FROM export_convs WHERE job_id = $1))
	+ (SELECT count(*) FROM export_convs x LEFT JOIN conversations c ON c.id = x.conv_id
		WHERE x.job_id = $1 AND (c.id IS NULL OR x.epoch IS DISTINCT FROM c.epoch OR x.min_seq IS DISTINCT FROM c.min_seq
			OR NOT EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = x.conv_id AND p.user_id = $2)
			OR EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = x.conv_id AND p.user_id = $2
				AND p.from_seq <= c.next_seq - 1 AND LEAST(COALESCE(p.to_seq, c.next_seq - 1), c.next_seq - 1) > x.head)))`

// reusable returns the caller's newest live job of scope when its snapshot
// is still current (parley.Exports.CreateExport). Inside the creating
// transaction, under the user's export lock and KEY SHARE locks on the
// scope's conversations, which a send does not block: an event committed
// after this read is after the answer too, as it would be after a new
// snapshot.
func reusable(ctx context.Context, tx pgx.Tx, user, scope, convID string) (parley.ExportJob, bool, error) {
	j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobCols+` FROM export_jobs
		WHERE user_id = $1 AND scope = $2 AND state = 'done' AND expires_at > clock_timestamp()
		ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT 1`, user, scope))
	if errors.Is(err, pgx.ErrNoRows) {
		return parley.ExportJob{}, false, nil
	}
	if err != nil {
		return parley.ExportJob{}, false, err
	}
	var stale int64
	if err := tx.QueryRow(ctx, qStaleConvs, j.ID, user, convID).Scan(&stale); err != nil {
		return parley.ExportJob{}, false, err
	}
	if stale > 0 {
		return parley.ExportJob{}, false, nil
	}
	j.Replayed, j.Reused = true, true
	return j, true, nil
}

// FailExport implements parley.Exports.
func (db *DB) FailExport(ctx context.Context, owner, id, reason string, retryAfter time.Duration) error {
	if err := parley.CheckExportStep(owner, id); err != nil {
		return err
	}
	return db.leased(ctx, "fail export", owner, id, func(tx pgx.Tx) error {
		if retryAfter > 0 {
			_, err := tx.Exec(ctx, `UPDATE export_jobs SET state = 'queued', error = $2,
				not_before = clock_timestamp() + $3::bigint * interval '1 microsecond',
				lease_owner = '', lease_until = NULL, updated_at = clock_timestamp() WHERE id = $1`,
				id, parley.ExportReason(reason), retryAfter.Microseconds())
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE export_jobs SET state = 'failed', error = $2,
			lease_owner = '', lease_until = NULL, updated_at = clock_timestamp() WHERE id = $1`,
			id, parley.ExportReason(reason))
		return err
	})
}

// RevokeExport implements parley.Exports.
func (db *DB) RevokeExport(ctx context.Context, id string) (parley.ExportJob, error) {
	if err := parley.CheckExportID(id); err != nil {
		return parley.ExportJob{}, err
	}
	var out parley.ExportJob
	err := db.write(ctx, "revoke export", func(tx pgx.Tx) error {
		// The update waits for a worker's transaction on the job and then
		// re-checks the state; a revoked or expired job is left as it is.
		j, err := scanJob(tx.QueryRow(ctx, `UPDATE export_jobs SET state = 'revoked', lease_owner = '', lease_until = NULL,
			updated_at = clock_timestamp() WHERE id = $1 AND state NOT IN ('revoked', 'expired') RETURNING `+jobCols, id))
		switch {
		case err == nil:
			out = j
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		out, err = loadJob(ctx, tx, id)
		return err
	})
	return out, err
}

// ExpireExports implements parley.Exports.
func (db *DB) ExpireExports(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, `UPDATE export_jobs SET state = 'expired', updated_at = clock_timestamp()
		WHERE state = 'done' AND expires_at < clock_timestamp() RETURNING id`)
	if err != nil {
		return nil, wrap("expire exports", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("expire exports", err)
	}
	if ids == nil {
		ids = []string{}
	}
	slices.Sort(ids)
	return ids, nil
}

// exportPin returns the lowest seq a queued or running export of conv may
// export (0: none pins it). It runs inside the purge's transaction, under
// the FOR UPDATE lock on the conversation row, so no job that would pin the
// conversation can be being created meanwhile (CreateExport's KEY SHARE).
func exportPin(ctx context.Context, tx pgx.Tx, convID string) (int64, error) {
	var from int64
	err := tx.QueryRow(ctx, `SELECT coalesce(min(p.from_seq), 0)
		FROM export_convs x
		JOIN export_jobs j ON j.id = x.job_id AND j.state IN ('queued', 'running')
		JOIN export_periods p ON p.job_id = x.job_id AND p.conv_id = x.conv_id
		WHERE x.conv_id = $1`, convID).Scan(&from)
	return from, err
}

// failRolledBack fails every queued or running export whose snapshot of
// conv ends above toSeq, inside the rollback's transaction (which holds the
// conversation row FOR UPDATE). A worker's transaction on such a job makes
// the update wait and then re-check the state.
func failRolledBack(ctx context.Context, tx pgx.Tx, convID string, toSeq int64) error {
	_, err := tx.Exec(ctx, `UPDATE export_jobs SET state = 'failed', error = $3, lease_owner = '', lease_until = NULL,
		updated_at = clock_timestamp()
		WHERE state IN ('queued', 'running') AND id IN (SELECT job_id FROM export_convs WHERE conv_id = $1 AND head > $2)`,
		convID, toSeq, parley.ExportRolledBack(convID, toSeq))
	return err
}
