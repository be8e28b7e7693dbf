package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parleychat/parley"
)

const jobColumns = `id, user_id, idem_key, scope, state, error, done, total, sha256, bytes, attempts,
	lease_owner, lease_until, not_before, expires_at, created_at, files_sha256, files_bytes`

func scanJob(s scanner) (parley.ExportJob, error) {
	var j parley.ExportJob
	var state string
	var leaseUntil, expiresAt sql.NullInt64
	var notBefore, createdAt int64
	err := s.Scan(&j.ID, &j.User, &j.Key, &j.Scope, &state, &j.Error, &j.Done, &j.Total, &j.SHA256, &j.Bytes, &j.Attempts,
		&j.LeaseOwner, &leaseUntil, &notBefore, &expiresAt, &createdAt, &j.FilesSHA256, &j.FilesBytes)
	j.State = parley.ExportState(state)
	if leaseUntil.Valid {
		j.LeaseUntil = msTime(leaseUntil.Int64)
	}
	if expiresAt.Valid {
		j.ExpiresAt = msTime(expiresAt.Int64)
	}
	j.NotBefore = msTime(notBefore)
	j.CreatedAt = msTime(createdAt)
	return j, err
}

// loadJob reads a job; a missing one is ErrExportNotFound.
func loadJob(ctx context.Context, tx *txn, id string) (parley.ExportJob, error) {
	j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM export_jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
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
	var out parley.ExportJob
	err = db.write(ctx, "create export", func(tx *txn) error {
		// The write lock BEGIN IMMEDIATE holds serializes this with every
		// send, membership change, purge and rollback: the heads read
		// below are committed and stay so.
		j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM export_jobs WHERE user_id = ? AND idem_key = ?`, p.User, r.Key))
		switch {
		case err == nil:
			if err := parley.CheckExportReplay(j.Scope, r.Scope); err != nil {
				return err
			}
			j.Replayed = true
			out = j
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if convID != "" {
			if _, _, err := memberView(ctx, tx, convID, p.User); err != nil {
				return err
			}
		}
		if !r.NoReuse {
			if j, ok, err := reusable(ctx, tx, p.User, r.Scope, convID); err != nil || ok {
				out = j
				return err
			}
		}
		var active int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM export_jobs WHERE user_id = ? AND state IN ('queued', 'running')`,
			p.User).Scan(&active); err != nil {
			return err
		}
		if err := parley.CheckExportActive(active, r.MaxActive); err != nil {
			return err
		}
		id, err := insertExport(ctx, tx, p.User, r, convID)
		if err != nil {
			return err
		}
		out, err = loadJob(ctx, tx, id)
		return err
	})
	return out, err
}

// insertExport inserts a queued job and its snapshot: every conversation of
// the scope in which the caller ever had a period, at its head (with its
// epoch and min_seq, which reuse compares), and those periods cut at it.
func insertExport(ctx context.Context, tx *txn, user string, r parley.ExportRequest, convID string) (string, error) {
	id := parley.NewID()
	if _, err := tx.ExecContext(ctx, `INSERT INTO export_jobs (id, user_id, idem_key, scope, state, max_kept, not_before, created_at, updated_at)
		VALUES (?, ?, ?, ?, 'queued', ?, `+nowMS+`, `+nowMS+`, `+nowMS+`)`, id, user, r.Key, r.Scope, max(r.MaxKept, 0)); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO export_convs (job_id, conv_id, head, epoch, min_seq)
		SELECT ?, c.id, c.next_seq - 1, c.epoch, c.min_seq FROM conversations c
		WHERE c.id IN (SELECT conv_id FROM periods WHERE user_id = ?) AND (? = '' OR c.id = ?)`,
		id, user, convID, convID); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO export_periods (job_id, conv_id, from_seq, to_seq)
		SELECT x.job_id, p.conv_id, p.from_seq, min(COALESCE(p.to_seq, x.head), x.head)
		FROM export_convs x JOIN periods p ON p.conv_id = x.conv_id AND p.user_id = ? AND p.from_seq <= x.head
		WHERE x.job_id = ?`, user, id)
	return id, err
}

// qStaleConvs counts the reasons the snapshot of job ? is no longer current
// for user ? and scope conversation ? (” for all): a conversation of the
// scope in which the user now has a period that the snapshot lacks; a
// snapshot conversation that is gone, was rolled back (epoch) or purged
// (min_seq), or has a seq above the recorded head inside one of the user's
// periods (an event the user may see). Arguments: user, conv, conv, job,
// job, user, user.
const qStaleConvs = `SELECT
	(SELECT count(DISTINCT p.conv_id) FROM periods p WHERE p.user_id = ? AND (? = '' OR p.conv_id = ?)
		AND p.conv_id NOT IN (SELECT conv_id FROM export_convs WHERE job_id = ?))
	+ (SELECT count(*) FROM export_convs x LEFT JOIN conversations c ON c.id = x.conv_id
		WHERE x.job_id = ? AND (c.id IS NULL OR x.epoch IS NOT c.epoch OR x.min_seq IS NOT c.min_seq
			OR NOT EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = x.conv_id AND p.user_id = ?)
			OR EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = x.conv_id AND p.user_id = ?
				AND p.from_seq <= c.next_seq - 1 AND min(COALESCE(p.to_seq, c.next_seq - 1), c.next_seq - 1) > x.head)))`

// reusable returns the caller's newest live job of scope when its snapshot
// is still current (parley.Exports.CreateExport). Inside the creating
// write, so nothing changes between the check and the answer.
func reusable(ctx context.Context, tx *txn, user, scope, convID string) (parley.ExportJob, bool, error) {
	j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM export_jobs
		WHERE user_id = ? AND scope = ? AND state = 'done' AND expires_at > `+nowMS+`
		ORDER BY created_at DESC, id DESC LIMIT 1`, user, scope))
	if errors.Is(err, sql.ErrNoRows) {
		return parley.ExportJob{}, false, nil
	}
	if err != nil {
		return parley.ExportJob{}, false, err
	}
	var stale int
	if err := tx.QueryRowContext(ctx, qStaleConvs, user, convID, convID, j.ID, j.ID, user, user).Scan(&stale); err != nil {
		return parley.ExportJob{}, false, err
	}
	if stale > 0 {
		return parley.ExportJob{}, false, nil
	}
	j.Replayed, j.Reused = true, true
	return j, true, nil
}

// ExportJob implements parley.Exports.
func (db *DB) ExportJob(ctx context.Context, id string) (parley.ExportJob, error) {
	if err := parley.CheckExportID(id); err != nil {
		return parley.ExportJob{}, err
	}
	var out parley.ExportJob
	err := db.read(ctx, "export job", func(tx *txn) error {
		var err error
		out, err = loadJob(ctx, tx, id)
		return err
	})
	return out, err
}

// ExportSigningKey implements parley.Exports: one writer, so the insert
// and the read see one key. The key is kept sealed (Options.Secrets).
func (db *DB) ExportSigningKey(ctx context.Context) (string, []byte, error) {
	key := make([]byte, parley.ExportSigningKeySize)
	rand.Read(key)
	label := parley.ExportKeyLabel(parley.ExportSigningKeyID)
	stored, sealed, err := parley.SealSecret(db.opts.Secrets, label, key)
	if err != nil {
		return "", nil, err
	}
	var got []byte
	err = db.write(ctx, "export signing key", func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO export_signing_keys (id, secret, sealed) VALUES (?, ?, ?)`,
			parley.ExportSigningKeyID, stored, sealed); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT secret, sealed FROM export_signing_keys WHERE id = ?`, parley.ExportSigningKeyID).Scan(&got, &sealed)
	})
	if err != nil {
		return "", nil, err
	}
	if got, err = parley.OpenSecret(db.opts.Secrets, label, got, sealed); err != nil {
		return "", nil, fmt.Errorf("sqlite: export signing key: %w", err)
	}
	return parley.ExportSigningKeyID, got, nil
}

// ExportJobs implements parley.Exports.
// ExportCounts implements parley.Exports.
func (db *DB) ExportCounts(ctx context.Context) (map[parley.ExportState]int64, error) {
	out := map[parley.ExportState]int64{}
	err := db.read(ctx, "export counts", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT state, count(*) FROM export_jobs GROUP BY state`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var state string
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				return err
			}
			out[parley.ExportState(state)] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (db *DB) ExportJobs(ctx context.Context, ids []string) ([]parley.ExportJob, error) {
	var valid []string
	for _, id := range ids {
		if parley.CheckExportID(id) == nil {
			valid = append(valid, id)
		}
	}
	if len(valid) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(valid)
	if err != nil {
		return nil, err
	}
	var out []parley.ExportJob
	err = db.read(ctx, "export jobs", func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+jobColumns+` FROM export_jobs
			WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`, string(list))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return rows.Err()
	})
	return out, err
}

// ClaimExport implements parley.Exports.
func (db *DB) ClaimExport(ctx context.Context, owner string, lease time.Duration) (parley.ExportJob, bool, error) {
	if err := parley.CheckExportClaim(owner); err != nil {
		return parley.ExportJob{}, false, err
	}
	var out parley.ExportJob
	found := false
	err := db.write(ctx, "claim export", func(tx *txn) error {
		// One writer: nobody else can claim between the pick and the update.
		j, err := scanJob(tx.QueryRowContext(ctx, `UPDATE export_jobs
			SET state = 'running', lease_owner = ?, lease_until = `+nowMS+` + ?, attempts = attempts + 1, updated_at = `+nowMS+`
			WHERE id = (SELECT id FROM export_jobs
				WHERE (state = 'queued' AND not_before <= `+nowMS+`) OR (state = 'running' AND lease_until < `+nowMS+`)
				ORDER BY created_at, id LIMIT 1)
			RETURNING `+jobColumns, owner, lease.Milliseconds()))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		out, found = j, true
		return nil
	})
	if err != nil {
		return parley.ExportJob{}, false, err
	}
	return out, found, nil
}

// snapshotPeriods returns the recorded periods of conv in job id, ordered.
func snapshotPeriods(ctx context.Context, tx *txn, id, convID string) (parley.Periods, error) {
	return scanPeriods(tx.QueryContext(ctx, `SELECT from_seq, to_seq FROM export_periods
		WHERE job_id = ? AND conv_id = ? ORDER BY from_seq`, id, convID))
}

// ExportSnapshot implements parley.Exports.
func (db *DB) ExportSnapshot(ctx context.Context, id string) ([]parley.ExportConv, error) {
	if err := parley.CheckExportID(id); err != nil {
		return nil, err
	}
	out := []parley.ExportConv{}
	err := db.read(ctx, "export snapshot", func(tx *txn) error {
		if _, err := loadJob(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT conv_id, head FROM export_convs WHERE job_id = ? ORDER BY conv_id`, id)
		if err != nil {
			return err
		}
		for rows.Next() {
			var c parley.ExportConv
			if err := rows.Scan(&c.Conv, &c.Head); err != nil {
				rows.Close()
				return err
			}
			out = append(out, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range out {
			c := &out[i]
			if c.Periods, err = snapshotPeriods(ctx, tx, id, c.Conv); err != nil {
				return err
			}
			for _, p := range c.Periods {
				var n int64
				if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM events
					WHERE conv_id = ? AND kind = 'message' AND seq >= ? AND seq <= ?`, c.Conv, p.From, p.To).Scan(&n); err != nil {
					return err
				}
				c.Messages += n
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ExportEvents implements parley.Exports. The messages are decorated
// (parley.Decorate) as the job's user saw them at the snapshot: AsOf the
// head, over the edit, reaction and reply events with seq at most the head
// inside the recorded periods, so a re-read gives the same events.
func (db *DB) ExportEvents(ctx context.Context, id, convID string, after int64, limit int) ([]parley.Event, error) {
	if err := parley.CheckExportEvents(id, convID, after, limit); err != nil {
		return nil, err
	}
	limit = min(limit, parley.MaxPage)
	evs := []parley.Event{}
	err := db.read(ctx, "export events", func(tx *txn) error {
		var head int64
		var user string
		err := tx.QueryRowContext(ctx, `SELECT x.head, j.user_id FROM export_convs x JOIN export_jobs j ON j.id = x.job_id
			WHERE x.job_id = ? AND x.conv_id = ?`, id, convID).Scan(&head, &user)
		if errors.Is(err, sql.ErrNoRows) {
			return parley.ErrExportNotFound
		}
		if err != nil {
			return err
		}
		ps, err := snapshotPeriods(ctx, tx, id, convID)
		if err != nil {
			return err
		}
		// Periods are disjoint and ascending and end at or below the head:
		// walk them in order over the message index.
		for _, p := range ps {
			from, to := max(p.From, after+1), min(p.To, head)
			if from > to {
				continue
			}
			if evs, err = exportMessages(ctx, tx, evs, convID, head, from, to, limit-len(evs)); err != nil {
				return err
			}
			if len(evs) >= limit {
				break
			}
		}
		if len(evs) == 0 {
			return nil
		}
		rows, err := exportDerived(ctx, tx, convID, ps, head, evs[0].Seq, evs[len(evs)-1].Seq)
		if err != nil {
			return err
		}
		parley.Decorate(evs, rows, user, head)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// exportMessages appends to evs the message events with from <= seq <= to,
// at most limit, with their reply_to, mentions and attachments; a recall
// counts when its seq is at or below head (a recalled message shows no
// body, no mentions and no attachments).
func exportMessages(ctx context.Context, tx *txn, evs []parley.Event, convID string, head, from, to int64, limit int) ([]parley.Event, error) {
	rows, err := tx.QueryContext(ctx, `SELECT seq, mid, sender_user, sender_device, body,
		recall_seq IS NOT NULL AND recall_seq <= ?, created_at, COALESCE(reply_to, 0), COALESCE(mentions, ''),
		COALESCE(attachments, '')
		FROM events WHERE conv_id = ? AND kind = 'message' AND seq >= ? AND seq <= ? ORDER BY seq LIMIT ?`,
		head, convID, from, to, limit)
	if err != nil {
		return evs, err
	}
	defer rows.Close()
	for rows.Next() {
		ev := parley.Event{Conv: convID, Kind: parley.EventMessage}
		var at int64
		var mentions, files string
		if err := rows.Scan(&ev.Seq, &ev.MID, &ev.Sender, &ev.Device, &ev.Body, &ev.Recalled, &at, &ev.ReplyTo, &mentions, &files); err != nil {
			return evs, err
		}
		ev.At = msTime(at)
		ev.Mentions = parley.SplitMentions(mentions)
		if ev.Recalled {
			ev.Body, ev.Mentions, files = "", nil, ""
		}
		var err error
		if ev.Attachments, err = parley.DecodeAttachments(files); err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// qExportDerived reads the edits and reactions of targets in [first,
// last] (over events_targets) and the replies to them (over
// events_replies) with seq in [from, to], a recall counting at or below
// head. Arguments: head, conv, first, last, from, to, twice.
const qExportDerived = `SELECT seq, kind, sender_user, body, created_at, COALESCE(target, 0), 0,
		COALESCE(emoji, ''), COALESCE(react_on, 0), recall_seq IS NOT NULL AND recall_seq <= ?
	FROM events WHERE conv_id = ? AND kind IN ('edit', 'reaction') AND target >= ? AND target <= ?
		AND seq >= ? AND seq <= ?
	UNION ALL
	SELECT seq, kind, sender_user, '', created_at, 0, reply_to, '', 0, recall_seq IS NOT NULL AND recall_seq <= ?
	FROM events WHERE conv_id = ? AND reply_to IS NOT NULL AND reply_to >= ? AND reply_to <= ?
		AND seq >= ? AND seq <= ?`

// exportDerived reads the rows parley.Decorate folds into the messages
// with first <= seq <= last: the edits and reactions that target them and
// the replies to them, each with seq at most head and inside one of the
// periods ps (filtered here, before Decorate counts anything; only
// message events have a reply_to). A row's
// Recalled counts a recall at or below head only. Rows whose target is no
// message of the page are read too and ignored by Decorate.
func exportDerived(ctx context.Context, tx *txn, convID string, ps parley.Periods, head, first, last int64) ([]parley.DerivedRow, error) {
	var out []parley.DerivedRow
	for _, p := range ps {
		from, to := p.From, min(p.To, head)
		if from > to || to < first {
			continue
		}
		rows, err := tx.QueryContext(ctx, qExportDerived,
			head, convID, first, last, from, to, head, convID, first, last, from, to)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			r := parley.DerivedRow{Conv: convID}
			var kind string
			var at int64
			if err := rows.Scan(&r.Seq, &kind, &r.Sender, &r.Body, &at, &r.Target, &r.ReplyTo, &r.Emoji, &r.On, &r.Recalled); err != nil {
				rows.Close()
				return nil, err
			}
			r.Kind, r.At = parley.EventKind(kind), msTime(at)
			out = append(out, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// leased checks, inside a write, that owner holds a live lease on job id.
func leased(ctx context.Context, tx *txn, owner, id string) error {
	var state, leaseOwner string
	var live bool
	err := tx.QueryRowContext(ctx, `SELECT state, lease_owner, COALESCE(lease_until >= `+nowMS+`, 0)
		FROM export_jobs WHERE id = ?`, id).Scan(&state, &leaseOwner, &live)
	if errors.Is(err, sql.ErrNoRows) {
		return parley.ErrExportNotFound
	}
	if err != nil {
		return err
	}
	if state != string(parley.ExportRunning) || leaseOwner != owner || !live {
		return parley.ErrLeaseLost
	}
	return nil
}

// ExtendExport implements parley.Exports.
func (db *DB) ExtendExport(ctx context.Context, owner, id string, total int, lease time.Duration) error {
	if err := parley.CheckExportExtend(owner, id, total); err != nil {
		return err
	}
	return db.write(ctx, "extend export", func(tx *txn) error {
		if err := leased(ctx, tx, owner, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET lease_until = `+nowMS+` + ?, total = ?, updated_at = `+nowMS+`
			WHERE id = ?`, lease.Milliseconds(), total, id)
		return err
	})
}

// RecordShard implements parley.Exports: inside the write, the batch's
// indexes that are recorded already are counted and Done grows by the
// rest (no count over the job's shards).
func (db *DB) RecordShard(ctx context.Context, owner string, shards ...parley.ExportShard) error {
	job, err := parley.CheckExportShards(owner, shards)
	if err != nil {
		return err
	}
	idx := make([]any, 0, len(shards)+1)
	idx = append(idx, job)
	for _, s := range shards {
		idx = append(idx, s.Index)
	}
	return db.write(ctx, "record shard", func(tx *txn) error {
		if err := leased(ctx, tx, owner, job); err != nil {
			return err
		}
		var old int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM export_shards WHERE job_id = ? AND idx IN (?`+
			strings.Repeat(", ?", len(shards)-1)+`)`, idx...).Scan(&old); err != nil {
			return err
		}
		for _, s := range shards {
			if _, err := tx.ExecContext(ctx, `INSERT INTO export_shards (job_id, idx, conv_id, after_seq, last_seq, count, sha256)
				VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (job_id, idx) DO UPDATE SET conv_id = excluded.conv_id, after_seq = excluded.after_seq,
					last_seq = excluded.last_seq, count = excluded.count, sha256 = excluded.sha256`,
				s.Job, s.Index, s.Conv, s.After, s.Last, s.Count, s.SHA256); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET done = done + ?, updated_at = `+nowMS+` WHERE id = ?`,
			len(shards)-old, job)
		return err
	})
}

// ExportShards implements parley.Exports.
func (db *DB) ExportShards(ctx context.Context, id string) ([]parley.ExportShard, error) {
	if err := parley.CheckExportID(id); err != nil {
		return nil, err
	}
	out := []parley.ExportShard{}
	err := db.read(ctx, "export shards", func(tx *txn) error {
		if _, err := loadJob(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT job_id, idx, conv_id, after_seq, last_seq, count, sha256
			FROM export_shards WHERE job_id = ? ORDER BY idx`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s parley.ExportShard
			if err := rows.Scan(&s.Job, &s.Index, &s.Conv, &s.After, &s.Last, &s.Count, &s.SHA256); err != nil {
				return err
			}
			out = append(out, s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RecordExportFiles implements parley.Exports.
func (db *DB) RecordExportFiles(ctx context.Context, owner, id, sha256 string, bytes int64) error {
	if err := parley.CheckExportFiles(owner, id, sha256, bytes); err != nil {
		return err
	}
	return db.write(ctx, "record export files", func(tx *txn) error {
		if err := leased(ctx, tx, owner, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET files_sha256 = ?, files_bytes = ?, updated_at = `+nowMS+` WHERE id = ?`,
			sha256, bytes, id)
		return err
	})
}

// FinishExport implements parley.Exports.
func (db *DB) FinishExport(ctx context.Context, owner, id, sha256 string, bytes int64, keep time.Duration) error {
	if err := parley.CheckExportFinish(owner, id, sha256, bytes); err != nil {
		return err
	}
	return db.write(ctx, "finish export", func(tx *txn) error {
		if err := leased(ctx, tx, owner, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET state = 'done', sha256 = ?, bytes = ?, error = '',
			expires_at = `+nowMS+` + ?, lease_owner = '', lease_until = NULL, finished_at = `+nowMS+`,
			updated_at = `+nowMS+` WHERE id = ?`,
			sha256, bytes, keep.Milliseconds(), id)
		if err != nil {
			return err
		}
		// The bound on kept artifacts: one writer, so two finishes of one
		// user cannot both miss each other.
		_, err = tx.ExecContext(ctx, `UPDATE export_jobs SET state = 'expired', updated_at = `+nowMS+`
			WHERE id IN (SELECT o.id FROM export_jobs j JOIN export_jobs o ON o.user_id = j.user_id
				AND o.state = 'done' AND o.id <> j.id
				WHERE j.id = ? AND j.max_kept > 0
				ORDER BY o.finished_at DESC, o.id DESC LIMIT -1 OFFSET (SELECT max_kept - 1 FROM export_jobs WHERE id = ?))`,
			id, id)
		return err
	})
}

// FailExport implements parley.Exports.
func (db *DB) FailExport(ctx context.Context, owner, id, reason string, retryAfter time.Duration) error {
	if err := parley.CheckExportStep(owner, id); err != nil {
		return err
	}
	return db.write(ctx, "fail export", func(tx *txn) error {
		if err := leased(ctx, tx, owner, id); err != nil {
			return err
		}
		if retryAfter > 0 {
			_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET state = 'queued', error = ?, not_before = `+nowMS+` + ?,
				lease_owner = '', lease_until = NULL, updated_at = `+nowMS+` WHERE id = ?`,
				parley.ExportReason(reason), retryAfter.Milliseconds(), id)
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET state = 'failed', error = ?,
			lease_owner = '', lease_until = NULL, updated_at = `+nowMS+` WHERE id = ?`,
			parley.ExportReason(reason), id)
		return err
	})
}

// RevokeExport implements parley.Exports.
func (db *DB) RevokeExport(ctx context.Context, id string) (parley.ExportJob, error) {
	if err := parley.CheckExportID(id); err != nil {
		return parley.ExportJob{}, err
	}
	var out parley.ExportJob
	err := db.write(ctx, "revoke export", func(tx *txn) error {
		j, err := loadJob(ctx, tx, id)
		if err != nil {
			return err
		}
		if j.State == parley.ExportRevoked || j.State == parley.ExportExpired {
			out = j
			return nil
		}
		out, err = scanJob(tx.QueryRowContext(ctx, `UPDATE export_jobs SET state = 'revoked', lease_owner = '', lease_until = NULL,
			updated_at = `+nowMS+` WHERE id = ? RETURNING `+jobColumns, id))
		return err
	})
	return out, err
}

// ExpireExports implements parley.Exports.
func (db *DB) ExpireExports(ctx context.Context) ([]string, error) {
	var ids []string
	err := db.write(ctx, "expire exports", func(tx *txn) error {
		var err error
		ids, err = scanIDs(tx.QueryContext(ctx, `UPDATE export_jobs SET state = 'expired', updated_at = `+nowMS+`
			WHERE state = 'done' AND expires_at < `+nowMS+` RETURNING id`))
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// exportPin returns the lowest seq a queued or running export of conv may
// export (0: none pins it). Inside the purge's write transaction.
func exportPin(ctx context.Context, tx *txn, convID string) (int64, error) {
	var from int64
	err := tx.QueryRowContext(ctx, `SELECT COALESCE(min(p.from_seq), 0)
		FROM export_convs x
		JOIN export_jobs j ON j.id = x.job_id AND j.state IN ('queued', 'running')
		JOIN export_periods p ON p.job_id = x.job_id AND p.conv_id = x.conv_id
		WHERE x.conv_id = ?`, convID).Scan(&from)
	return from, err
}

// failRolledBack fails every queued or running export whose snapshot of
// conv ends above toSeq. Inside the rollback's write transaction.
func failRolledBack(ctx context.Context, tx *txn, convID string, toSeq int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE export_jobs SET state = 'failed', error = ?, lease_owner = '', lease_until = NULL,
		updated_at = `+nowMS+`
		WHERE state IN ('queued', 'running') AND id IN (SELECT job_id FROM export_convs WHERE conv_id = ? AND head > ?)`,
		parley.ExportRolledBack(convID, toSeq), convID, toSeq)
	return err
}
