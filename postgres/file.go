package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// fileCols are a files row's columns for scanFile.
const fileCols = `id, owner, name, size, state, mime, sha256, width, height, created_at`

// scanFile scans fileCols.
func scanFile(row pgx.Row) (parley.File, error) {
	var f parley.File
	err := row.Scan(&f.ID, &f.Owner, &f.Name, &f.Size, &f.State, &f.MIME, &f.SHA256, &f.Width, &f.Height, &f.CreatedAt)
	f.CreatedAt = ms(f.CreatedAt)
	return f, err
}

// createFileSQL inserts upload $1 of owner $2 (name $3, size $4) unless the
// owner's files already take more than quota $5 minus the new size; no row
// back means over quota. It runs after the owner's row is locked, in a
// statement of its own: its snapshot then holds every upload committed
// before the lock was granted.
const createFileSQL = `WITH used AS (SELECT coalesce(sum(size), 0) AS n FROM files WHERE owner = $2)
INSERT INTO files (id, owner, name, size, state)
SELECT $1, $2, $3, $4, 'uploading' FROM used WHERE used.n <= $5::bigint - $4::bigint
RETURNING ` + fileCols

// CreateUpload implements parley.Store: the owner's users row is locked
// (FOR NO KEY UPDATE: uploads of one user queue on it, while the key-share
// locks of foreign keys to the row, a login's new device, do not wait), so
// the sum the insert checks counts every concurrent upload that went
// first.
func (db *DB) CreateUpload(ctx context.Context, p parley.Principal, r parley.NewUpload) (parley.File, error) {
	r, err := parley.CheckUpload(r)
	if err != nil {
		return parley.File{}, err
	}
	if r.Size > r.MaxSize {
		return parley.File{}, parley.ErrTooLarge(r.MaxSize)
	}
	if r.Size > r.Quota {
		return parley.File{}, parley.ErrQuotaExceeded(r.Quota)
	}
	var f parley.File
	err = db.write(ctx, "create upload", func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE`, p.User).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return parley.ErrUserNotFound
		}
		if err != nil {
			return err
		}
		f, err = scanFile(tx.QueryRow(ctx, createFileSQL, parley.NewID(), p.User, r.Name, r.Size, r.Quota))
		if errors.Is(err, pgx.ErrNoRows) {
			return parley.ErrQuotaExceeded(r.Quota)
		}
		return err
	})
	return f, err
}

// FinishUpload implements parley.Store: one update of an uploading file;
// when it finds none, the file as it is answers (missing or another's:
// NOT_FOUND; ready: a retry, or other meta).
func (db *DB) FinishUpload(ctx context.Context, p parley.Principal, id string, meta parley.FileMeta) (parley.File, error) {
	if err := parley.CheckFileID(id); err != nil {
		return parley.File{}, err
	}
	if err := parley.CheckFileMeta(meta); err != nil {
		return parley.File{}, err
	}
	f, err := scanFile(db.pool.QueryRow(ctx, `UPDATE files SET state = 'ready', mime = $3, sha256 = $4, width = $5, height = $6
		WHERE id = $1 AND owner = $2 AND state = 'uploading' RETURNING `+fileCols,
		id, p.User, meta.MIME, meta.SHA256, meta.Width, meta.Height))
	if !errors.Is(err, pgx.ErrNoRows) {
		return f, wrap("finish upload", err)
	}
	f, err = scanFile(db.pool.QueryRow(ctx, `SELECT `+fileCols+` FROM files WHERE id = $1 AND owner = $2`, id, p.User))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return parley.File{}, parley.ErrNoSuchFile()
	case err != nil:
		return parley.File{}, wrap("finish upload", err)
	case f.State != parley.FileReady:
		// Only a finish makes a file ready and nothing makes it
		// uploading again: the update above cannot have missed it.
		return parley.File{}, errors.New("postgres: finish upload: the file is still uploading after the update")
	case (parley.FileMeta{MIME: f.MIME, SHA256: f.SHA256, Width: f.Width, Height: f.Height}) != meta:
		return parley.File{}, parley.Errorf(parley.CodeInvalidArgument, "file %s is already finished with other content", id)
	}
	return f, nil
}

// fileSQL reads file $1 for user $2: theirs, or ready and linked at a seq
// inside one of their periods of the link's conversation (rule 2, in the
// query). The plan is the file's links (file_links_pkey), each probing the
// user's periods of its conversation (periods_by_user): the links are
// those of $1 rather than of f.id, and the periods a LATERAL per link,
// since under the OR the planner would otherwise hash every link of the
// user's conversations, or every period of the user.
const fileSQL = `SELECT ` + fileCols + ` FROM files f
WHERE f.id = $1 AND (f.owner = $2 OR f.state = 'ready' AND EXISTS (
	SELECT 1 FROM file_links l
	CROSS JOIN LATERAL (
		SELECT 1 FROM periods p
		WHERE p.conv_id = l.conv_id AND p.user_id = $2 AND p.from_seq <= l.seq AND (p.to_seq IS NULL OR l.seq <= p.to_seq)
		LIMIT 1) p
	WHERE l.file_id = $1))`

// File implements parley.Store in one statement (fileSQL).
func (db *DB) File(ctx context.Context, p parley.Principal, id string) (parley.File, error) {
	if err := parley.CheckFileID(id); err != nil {
		return parley.File{}, err
	}
	f, err := scanFile(db.pool.QueryRow(ctx, fileSQL, id, p.User))
	if errors.Is(err, pgx.ErrNoRows) {
		return parley.File{}, parley.ErrNoSuchFile()
	}
	return f, wrap("file", err)
}

// FileUsage implements parley.Store over files_by_owner.
func (db *DB) FileUsage(ctx context.Context, p parley.Principal) (parley.FileUsage, error) {
	var u parley.FileUsage
	err := db.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(size), 0) FROM files WHERE owner = $1`, p.User).
		Scan(&u.Files, &u.Bytes)
	return u, wrap("file usage", err)
}

// maxStaleFiles bounds StaleFiles' Limit.
const maxStaleFiles = 1000

// staleSQL lists the oldest $3 of the uploads created before $1 and the
// ready files no link names created before $2, each walked over
// files_stale. A ready file that is linked is passed over on every call:
// the walk costs the old linked files before the stale ones.
const staleSQL = `SELECT ` + fileCols + ` FROM (
	(SELECT * FROM files WHERE state = 'uploading' AND created_at < $1 ORDER BY created_at LIMIT $3)
	UNION ALL
	(SELECT * FROM files f WHERE state = 'ready' AND created_at < $2
		AND NOT EXISTS (SELECT 1 FROM file_links l WHERE l.file_id = f.id)
		ORDER BY created_at LIMIT $3)
) s ORDER BY created_at, id COLLATE "C" LIMIT $3`

// checkStale validates a collector's question.
func checkStale(q parley.StaleFiles) error {
	if q.Limit < 1 || q.Limit > maxStaleFiles {
		return parley.Errorf(parley.CodeInvalidArgument, "limit must be 1–%d", maxStaleFiles)
	}
	return nil
}

// StaleFiles implements parley.Store in one statement (staleSQL).
func (db *DB) StaleFiles(ctx context.Context, q parley.StaleFiles) ([]parley.File, error) {
	if err := checkStale(q); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, staleSQL, q.UploadingBefore, q.UnlinkedBefore, q.Limit)
	if err != nil {
		return nil, wrap("stale files", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (parley.File, error) { return scanFile(row) })
	if err != nil {
		return nil, wrap("stale files", err)
	}
	return out, nil
}

// deleteStaleSQL deletes file $1 if it still is stale by bounds $2
// (uploading) and $3 (ready, unlinked).
const deleteStaleSQL = `DELETE FROM files f WHERE f.id = $1 AND (
	f.state = 'uploading' AND f.created_at < $2
	OR f.state = 'ready' AND f.created_at < $3 AND NOT EXISTS (SELECT 1 FROM file_links l WHERE l.file_id = f.id))`

// DeleteFile implements parley.Store in a transaction: the row is locked
// first (FOR UPDATE, which a send attaching the file conflicts with, as it
// holds FOR KEY SHARE on it until its commit), then deleteStaleSQL checks
// it in a statement of its own, whose snapshot holds the links of every
// send that locked the file before.
func (db *DB) DeleteFile(ctx context.Context, id string, q parley.StaleFiles) (bool, error) {
	if err := parley.CheckFileID(id); err != nil {
		return false, err
	}
	deleted := false
	err := db.write(ctx, "delete file", func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM files WHERE id = $1 FOR UPDATE`, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, deleteStaleSQL, id, q.UploadingBefore, q.UnlinkedBefore)
		deleted = tag.RowsAffected() == 1
		return err
	})
	return deleted, err
}

// attachSQL reads and key-share locks the files a send attaches that are
// ready and owner $2's: a DeleteFile of one of them waits for the send's
// commit and then finds the link.
const attachSQL = `SELECT id, name, size, mime, sha256, width, height FROM files
WHERE id = ANY ($1::text[]) AND owner = $2 AND state = 'ready' FOR KEY SHARE`

// lockAttachments returns the attachments of files ids (in their order)
// for user's send, or ErrNotAttachable for the first that is not a ready
// file of theirs.
func lockAttachments(ctx context.Context, tx pgx.Tx, user string, ids []string) ([]parley.Attachment, error) {
	rows, err := tx.Query(ctx, attachSQL, ids, user)
	if err != nil {
		return nil, err
	}
	found := make(map[string]parley.Attachment, len(ids))
	var a parley.Attachment
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.Name, &a.Size, &a.MIME, &a.SHA256, &a.Width, &a.Height}, func() error {
		found[a.ID] = a
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]parley.Attachment, len(ids))
	for i, id := range ids {
		f, ok := found[id]
		if !ok {
			return nil, parley.ErrNotAttachable(id)
		}
		out[i] = f
	}
	return out, nil
}

// attachmentIDs are the file ids of as, for the links of a send.
func attachmentIDs(as []parley.Attachment) []string {
	if len(as) == 0 {
		return nil
	}
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
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

// FilesExist implements parley.Store in one statement over files_pkey.
func (db *DB) FilesExist(ctx context.Context, ids []string) (map[string]bool, error) {
	if err := checkFileIDs(ids); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT id FROM files WHERE id = ANY ($1::text[])`, ids)
	if err != nil {
		return nil, wrap("files exist", err)
	}
	out := make(map[string]bool)
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { out[id] = true; return nil }); err != nil {
		return nil, wrap("files exist", err)
	}
	return out, nil
}

// ReadyFiles implements parley.Store in one statement: a walk of
// files_pkey from after, in the column's collation (the comparison and the
// order agree, so the pages neither skip nor repeat).
func (db *DB) ReadyFiles(ctx context.Context, after string, limit int) ([]parley.File, error) {
	if limit < 1 || limit > parley.MaxFilesPage {
		return nil, parley.Errorf(parley.CodeInvalidArgument, "the limit of ready files must be 1 to %d", parley.MaxFilesPage)
	}
	if after != "" {
		if err := parley.CheckFileID(after); err != nil {
			return nil, err
		}
	}
	rows, err := db.pool.Query(ctx, `SELECT `+fileCols+` FROM files WHERE id > $1 AND state = 'ready' ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, wrap("ready files", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (parley.File, error) { return scanFile(row) })
	if err != nil {
		return nil, wrap("ready files", err)
	}
	return out, nil
}
