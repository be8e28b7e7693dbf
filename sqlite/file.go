package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/parleychat/parley"
)

// Uploaded files (file.go in the root): a files row per upload, a
// file_links row per message that attaches it (written by appendEvent in
// the send's transaction; removed by recall, purge and rollback in
// theirs). Every write runs in the one writer's immediate transaction,
// which holds the database's write lock from its first statement: that is
// the contract's lock of the user's row for the quota, and what makes
// DeleteFile's re-check and a send's link exclusive of each other.

const fileColumns = `id, owner, name, size, state, mime, sha256, width, height, created_at`

const (
	// qFileUsage sums a user's files over files_by_owner alone.
	qFileUsage = `SELECT count(*), coalesce(sum(size), 0) FROM files WHERE owner = ?`
	// qAttachable reads a file a send attaches: a ready file of the
	// sender's (?2), by the primary key.
	qAttachable = `SELECT ` + fileColumns + ` FROM files WHERE id = ?1 AND owner = ?2 AND state = 'ready'`
	// qFileAccess reads file ?1 for user ?2: their own, or a ready file
	// with a link whose seq lies in one of the user's periods of the
	// link's conversation (rule 2, inside the query: the file's links by
	// file_links' primary key, then per link a probe of periods'; CROSS
	// JOIN keeps that order, or SQLite walks all of the reader's periods).
	qFileAccess = `SELECT ` + fileColumns + ` FROM files f
		WHERE f.id = ?1 AND (f.owner = ?2 OR (f.state = 'ready' AND EXISTS (
			SELECT 1 FROM file_links l CROSS JOIN periods p
			WHERE l.file_id = f.id AND p.conv_id = l.conv_id AND p.user_id = ?2
			AND p.from_seq <= l.seq AND (p.to_seq IS NULL OR l.seq <= p.to_seq))))`
	// qStaleFiles lists the collector's files oldest first: each arm a
	// walk of files_stale in created_at order, merged. Arguments:
	// uploading before, unlinked before (Unix ms), limit.
	qStaleFiles = `SELECT ` + fileColumns + ` FROM files
		WHERE state = 'uploading' AND created_at < ?1
	UNION ALL
	SELECT ` + fileColumns + ` FROM files f
		WHERE state = 'ready' AND created_at < ?2 AND NOT EXISTS (SELECT 1 FROM file_links l WHERE l.file_id = f.id)
	ORDER BY created_at, id LIMIT ?3`
	// qDeleteFile deletes file ?1 if it is still stale by the bounds ?2
	// (uploading) and ?3 (unlinked), by the primary key.
	qDeleteFile = `DELETE FROM files WHERE id = ?1 AND (
		(state = 'uploading' AND created_at < ?2)
		OR (state = 'ready' AND created_at < ?3 AND NOT EXISTS (SELECT 1 FROM file_links l WHERE l.file_id = ?1)))`
	// qUnlinkMessage deletes the links of one message (a recall),
	// qUnlinkUpTo those of the events up to a seq (a purge), qUnlinkConv
	// all of a conversation's (a rollback, before qRelink), over
	// file_links_by_event.
	qUnlinkMessage = `DELETE FROM file_links WHERE conv_id = ? AND seq = ?`
	qUnlinkUpTo    = `DELETE FROM file_links WHERE conv_id = ? AND seq <= ?`
	qUnlinkConv    = `DELETE FROM file_links WHERE conv_id = ?`
	// qRelink rebuilds a conversation's links from its messages that are
	// not recalled and attach files, for the files that still exist (a
	// recalled message's file may have been collected before a rollback
	// undid the recall). A message lists a file once, so the rows are
	// distinct. INDEXED BY: without statistics the planner takes the
	// primary key and walks every event of the conversation.
	qRelink = `INSERT INTO file_links (file_id, conv_id, seq)
		SELECT j.value ->> '$.id', e.conv_id, e.seq FROM events e INDEXED BY events_attachments, json_each(e.attachments) j
		WHERE e.conv_id = ?1 AND e.attachments IS NOT NULL AND e.kind = 'message' AND e.recall_seq IS NULL
		AND EXISTS (SELECT 1 FROM files f WHERE f.id = j.value ->> '$.id')`
)

func scanFile(s scanner) (parley.File, error) {
	var f parley.File
	var state string
	var at int64
	err := s.Scan(&f.ID, &f.Owner, &f.Name, &f.Size, &state, &f.MIME, &f.SHA256, &f.Width, &f.Height, &at)
	f.State, f.CreatedAt = parley.FileState(state), msTime(at)
	return f, err
}

// CreateUpload implements parley.Store.
func (db *DB) CreateUpload(ctx context.Context, p parley.Principal, r parley.NewUpload) (parley.File, error) {
	r, err := parley.CheckUpload(r)
	if err != nil {
		return parley.File{}, err
	}
	if r.Size > r.MaxSize {
		return parley.File{}, parley.ErrTooLarge(r.MaxSize)
	}
	var out parley.File
	err = db.write(ctx, "create upload", func(tx *txn) error {
		var n, used int64
		if err := tx.QueryRowContext(ctx, qFileUsage, p.User).Scan(&n, &used); err != nil {
			return err
		}
		if used+r.Size > r.Quota {
			return parley.ErrQuotaExceeded(r.Quota)
		}
		var err error
		out, err = scanFile(tx.QueryRowContext(ctx, `INSERT INTO files (id, owner, name, size, state, created_at)
			VALUES (?, ?, ?, ?, 'uploading', `+nowMS+`) RETURNING `+fileColumns, parley.NewID(), p.User, r.Name, r.Size))
		return err
	})
	return out, err
}

// FinishUpload implements parley.Store.
func (db *DB) FinishUpload(ctx context.Context, p parley.Principal, id string, meta parley.FileMeta) (parley.File, error) {
	if err := parley.CheckFileID(id); err != nil {
		return parley.File{}, err
	}
	if err := parley.CheckFileMeta(meta); err != nil {
		return parley.File{}, err
	}
	var out parley.File
	err := db.write(ctx, "finish upload", func(tx *txn) error {
		f, err := scanFile(tx.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM files WHERE id = ? AND owner = ?`, id, p.User))
		if errors.Is(err, sql.ErrNoRows) {
			return parley.ErrNoSuchFile()
		}
		if err != nil {
			return err
		}
		if f.State == parley.FileReady {
			if (parley.FileMeta{MIME: f.MIME, SHA256: f.SHA256, Width: f.Width, Height: f.Height}) != meta {
				return parley.Errorf(parley.CodeInvalidArgument, "upload %s is finished already, with other content", id)
			}
			out = f
			return nil
		}
		out, err = scanFile(tx.QueryRowContext(ctx, `UPDATE files SET state = 'ready', mime = ?, sha256 = ?, width = ?, height = ?
			WHERE id = ? RETURNING `+fileColumns, meta.MIME, meta.SHA256, meta.Width, meta.Height, id))
		return err
	})
	return out, err
}

// File implements parley.Store.
func (db *DB) File(ctx context.Context, p parley.Principal, id string) (parley.File, error) {
	if err := parley.CheckFileID(id); err != nil {
		return parley.File{}, err
	}
	var out parley.File
	err := db.read(ctx, "file", func(tx *txn) error {
		var err error
		out, err = scanFile(tx.QueryRowContext(ctx, qFileAccess, id, p.User))
		if errors.Is(err, sql.ErrNoRows) {
			return parley.ErrNoSuchFile()
		}
		return err
	})
	return out, err
}

// FileUsage implements parley.Store.
func (db *DB) FileUsage(ctx context.Context, p parley.Principal) (parley.FileUsage, error) {
	var out parley.FileUsage
	err := db.read(ctx, "file usage", func(tx *txn) error {
		return tx.QueryRowContext(ctx, qFileUsage, p.User).Scan(&out.Files, &out.Bytes)
	})
	return out, err
}

// checkStale validates the collector's question.
func checkStale(q parley.StaleFiles) error {
	if q.Limit < 1 || q.Limit > 1000 {
		return parley.Errorf(parley.CodeInvalidArgument, "the limit of stale files must be 1 to 1000")
	}
	return nil
}

// StaleFiles implements parley.Store.
func (db *DB) StaleFiles(ctx context.Context, q parley.StaleFiles) ([]parley.File, error) {
	if err := checkStale(q); err != nil {
		return nil, err
	}
	return db.files(ctx, "stale files", qStaleFiles, q.UploadingBefore.UnixMilli(), q.UnlinkedBefore.UnixMilli(), q.Limit)
}

// DeleteFile implements parley.Store. The one statement re-checks the row
// inside the writer's transaction: a send that linked the file committed
// before it (the link is seen) or waits for it (and then finds no file).
func (db *DB) DeleteFile(ctx context.Context, id string, q parley.StaleFiles) (bool, error) {
	if err := parley.CheckFileID(id); err != nil {
		return false, err
	}
	var deleted bool
	err := db.write(ctx, "delete file", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, qDeleteFile, id, q.UploadingBefore.UnixMilli(), q.UnlinkedBefore.UnixMilli())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		deleted = n == 1
		return err
	})
	return deleted, err
}

// attachable returns the attachments of a send's files, in the listed
// order: each a ready file of user's own, else NOT_FOUND
// (ErrNotAttachable) for the first that is not.
func attachable(ctx context.Context, tx *txn, user string, ids []string) ([]parley.Attachment, error) {
	var out []parley.Attachment
	for _, id := range ids {
		f, err := scanFile(tx.QueryRowContext(ctx, qAttachable, id, user))
		if errors.Is(err, sql.ErrNoRows) {
			return nil, parley.ErrNotAttachable(id)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, parley.AttachmentOf(f))
	}
	return out, nil
}

// checkFileIDs validates FilesExist's ids.
func checkFileIDs(ids []string) error {
	if len(ids) < 1 || len(ids) > parley.MaxFilesPage {
		return parley.Errorf(parley.CodeInvalidArgument, "ask about 1–%d file ids at a time", parley.MaxFilesPage)
	}
	for _, id := range ids {
		if err := parley.CheckFileID(id); err != nil {
			return err
		}
	}
	return nil
}

// checkReadyPage validates ReadyFiles' page.
func checkReadyPage(after string, limit int) error {
	if limit < 1 || limit > parley.MaxFilesPage {
		return parley.Errorf(parley.CodeInvalidArgument, "the limit of ready files must be 1 to %d", parley.MaxFilesPage)
	}
	if after != "" {
		return parley.CheckFileID(after)
	}
	return nil
}

// FilesExist implements parley.Store: the ids as a JSON array, joined to
// files by the primary key.
func (db *DB) FilesExist(ctx context.Context, ids []string) (map[string]bool, error) {
	if err := checkFileIDs(ids); err != nil {
		return nil, err
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	var out map[string]bool
	err = db.read(ctx, "files exist", func(tx *txn) error {
		out = make(map[string]bool)
		rows, err := tx.QueryContext(ctx, `SELECT f.id FROM json_each(?) j CROSS JOIN files f WHERE f.id = j.value`, string(list))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			out[id] = true
		}
		return rows.Err()
	})
	return out, err
}

// ReadyFiles implements parley.Store: a walk of the primary key (ids in
// byte order).
func (db *DB) ReadyFiles(ctx context.Context, after string, limit int) ([]parley.File, error) {
	if err := checkReadyPage(after, limit); err != nil {
		return nil, err
	}
	return db.files(ctx, "ready files", `SELECT `+fileColumns+` FROM files WHERE id > ? AND state = 'ready' ORDER BY id LIMIT ?`, after, limit)
}

// files reads the file rows query selects (fileColumns), in one read
// transaction named op.
func (db *DB) files(ctx context.Context, op, query string, args ...any) ([]parley.File, error) {
	var out []parley.File
	err := db.read(ctx, op, func(tx *txn) error {
		out = nil
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			f, err := scanFile(rows)
			if err != nil {
				return err
			}
			out = append(out, f)
		}
		return rows.Err()
	})
	return out, err
}
