package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/parleychat/parley"
)

// errNoBlobs answers the file use cases of a server built without a blob
// store.
var errNoBlobs = parley.Errorf(parley.CodeUnavailable, "files are not available on this server")

// storeCtx bounds one store call by the configured store timeout.
func (s *Service) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.config().StoreTimeout())
}

// readable returns file id if p may read it (Store.File: the owner, or a
// link's seq in p's periods on a message not recalled) and it is ready.
// An upload still in progress is NOT_FOUND to its owner too: it has no
// bytes to serve yet, and the owner learns when it finishes from the
// upload itself.
func (s *Service) readable(ctx context.Context, p parley.Principal, id string) (parley.File, error) {
	if s.blobs == nil {
		return parley.File{}, errNoBlobs
	}
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	f, err := s.store.File(sctx, p, id)
	if err != nil {
		return f, err
	}
	if f.State != parley.FileReady {
		return parley.File{}, parley.Errorf(parley.CodeNotFound, "file %s is still uploading", id)
	}
	return f, nil
}

// OpenFile opens file id for p to download: the file's row and a reader
// of its bytes with the blob's size and time (what http.ServeContent
// needs). The store is read under the store timeout; the blob under ctx
// alone, which bounds every later read of the reader (a download takes as
// long as the client needs): pass the request's context. The caller
// closes the reader.
//
// Errors: INVALID_ARGUMENT (id), NOT_FOUND (a missing file, one p may not
// read, an upload not finished), UNAVAILABLE (no blob store). A ready
// file whose blob is missing, or of another size than the row's, is an
// internal error (logged by Explain with the request id, UNAVAILABLE to
// the client): the row says the file exists, so the fault is the
// server's, and it may be repaired (a blob directory not mounted, a
// backup restored); a NOT_FOUND would make clients give the file up.
func (s *Service) OpenFile(ctx context.Context, p parley.Principal, id string) (parley.File, io.ReadSeekCloser, parley.Blob, error) {
	f, err := s.readable(ctx, p, id)
	if err != nil {
		return parley.File{}, nil, parley.Blob{}, err
	}
	r, b, err := s.blobs.Open(ctx, id)
	switch {
	case errors.Is(err, parley.ErrBlobNotFound):
		// Not wrapped: ErrBlobNotFound's code must not reach the client.
		return parley.File{}, nil, parley.Blob{}, fmt.Errorf("lost file %s: ready, but its blob is missing", id)
	case err != nil:
		return parley.File{}, nil, parley.Blob{}, fmt.Errorf("open file %s: %v", id, err)
	case b.Size != f.Size:
		r.Close()
		return parley.File{}, nil, parley.Blob{}, fmt.Errorf("damaged file %s: its blob has %d bytes, the row %d", id, b.Size, f.Size)
	}
	return f, r, b, nil
}

// OpenThumb opens the thumbnail of file id (a small JPEG) for p, with the
// access check of OpenFile. A file without a thumbnail (not an image, not
// made yet, or refused) is NOT_FOUND: the client shows an icon instead.
// Errors as OpenFile's.
func (s *Service) OpenThumb(ctx context.Context, p parley.Principal, id string) (io.ReadSeekCloser, parley.Blob, error) {
	f, err := s.readable(ctx, p, id)
	if err != nil {
		return nil, parley.Blob{}, err
	}
	r, b, err := s.blobs.Open(ctx, parley.ThumbKey(id))
	switch {
	case errors.Is(err, parley.ErrBlobNotFound):
		// Asked for and missing: have it made (a job dropped from a full
		// queue, a server stopped before it ran). The jobs skip what is
		// not an image, so asking again costs little.
		if s.fileReady != nil && strings.HasPrefix(f.MIME, "image/") {
			s.fileReady(f)
		}
		return nil, parley.Blob{}, parley.Errorf(parley.CodeNotFound, "file %s has no thumbnail", id)
	case err != nil:
		return nil, parley.Blob{}, fmt.Errorf("open thumbnail of %s: %v", id, err)
	}
	return r, b, nil
}

// CollectResult is what one pass of CollectFiles did and found.
type CollectResult struct {
	// Collected counts the files deleted: uploads not finished within
	// the expiry and ready files no message linked within the grace,
	// each row with its blob and thumbnail.
	Collected int
	// Orphans counts the blobs deleted that no file row owned, older
	// than the grace (a crash between a row's delete and its blob's, an
	// upload finished after its row expired, a thumbnail made for a file
	// deleted meanwhile).
	Orphans int
	// Blobs and Bytes are the blobs the walk kept (thumbnails included)
	// and their size: what the blob store holds.
	Blobs, Bytes int64
	// Lost counts the ready files whose blob is missing or of another
	// size than the row's (logged by id). They are kept: their rows are
	// what a restored blob needs.
	Lost int
}

// CollectFiles runs one pass of the file collector at now, in three
// steps, each in batches of at most parley.MaxFilesPage (memory does not
// grow with the number of files or blobs):
//
//  1. Stale files (Store.StaleFiles): uploads created before now-expiry
//     and not finished, ready files created before now-grace that no
//     message links. Each row is deleted first (Store.DeleteFile, which
//     re-checks it in its transaction, so a send that attached the file
//     meanwhile keeps it), then its blob and thumbnail. A crash between
//     the two leaves a blob without a row, which step 2 deletes; the
//     other order could delete the bytes of a file a send just linked.
//  2. Orphan blobs: every blob is listed (BlobStore.List); one older
//     than now-grace whose file (parley.BlobFileID) has no row
//     (Store.FilesExist) is deleted. Rows precede their blobs (an upload
//     is created before its bytes are stored), so a blob without a row
//     never gains one.
//  3. Lost files: every ready file (Store.ReadyFiles) whose blob is
//     missing, or of another size, is counted and logged, never deleted.
//     A miss is checked again against the row, so a file another
//     collector deleted meanwhile (row first) is not counted.
//
// Every step is idempotent, and passes may run at once on several
// gateways: each delete is re-checked by the store or is of a blob no row
// owns, and deleting a missing blob is no error. An error stops the pass
// (the next one starts over); what it did so far is in the result.
func (s *Service) CollectFiles(ctx context.Context, now time.Time, grace, expiry time.Duration) (CollectResult, error) {
	var res CollectResult
	if s.blobs == nil {
		return res, errNoBlobs
	}
	if grace < 0 || expiry < 0 {
		return res, parley.Errorf(parley.CodeInvalidArgument, "the grace and the upload expiry must not be negative")
	}
	q := parley.StaleFiles{UploadingBefore: now.Add(-expiry), UnlinkedBefore: now.Add(-grace), Limit: parley.MaxFilesPage}
	if err := s.collectStale(ctx, q, &res); err != nil {
		return res, fmt.Errorf("collect stale files: %w", err)
	}
	if err := s.collectOrphans(ctx, now.Add(-grace), &res); err != nil {
		return res, fmt.Errorf("collect orphan blobs: %w", err)
	}
	if err := s.findLost(ctx, &res); err != nil {
		return res, fmt.Errorf("find lost files: %w", err)
	}
	return res, nil
}

// collectStale is step 1 of CollectFiles.
func (s *Service) collectStale(ctx context.Context, q parley.StaleFiles, res *CollectResult) error {
	for {
		sctx, cancel := s.storeCtx(ctx)
		stale, err := s.store.StaleFiles(sctx, q)
		cancel()
		if err != nil {
			return err
		}
		deleted := 0
		for _, f := range stale {
			sctx, cancel := s.storeCtx(ctx)
			gone, err := s.store.DeleteFile(sctx, f.ID, q)
			cancel()
			if err != nil {
				return err
			}
			if !gone {
				continue // linked or finished meanwhile: kept
			}
			deleted++
			res.Collected++
			for _, key := range []string{f.ID, parley.ThumbKey(f.ID)} {
				if err := s.blobs.Delete(ctx, key); err != nil {
					return fmt.Errorf("file %s deleted, its blob %s not (an orphan now): %w", f.ID, key, err)
				}
			}
			s.log.Info("file collected", "file", f.ID, "owner", f.Owner, "state", string(f.State), "size", f.Size)
		}
		// A short page is the last; a page of which nothing could be
		// deleted would come back the same.
		if len(stale) < q.Limit || deleted == 0 {
			return nil
		}
	}
}

// collectOrphans is step 2 of CollectFiles: blobs older than before are
// checked against the rows a batch at a time.
func (s *Service) collectOrphans(ctx context.Context, before time.Time, res *CollectResult) error {
	batch := make([]parley.Blob, 0, parley.MaxFilesPage)
	flush := func() error {
		err := s.deleteOrphans(ctx, batch, res)
		batch = batch[:0]
		return err
	}
	err := s.blobs.List(ctx, "", func(b parley.Blob) error {
		if !b.ModTime.Before(before) {
			res.Blobs++
			res.Bytes += b.Size
			return nil
		}
		batch = append(batch, b)
		if len(batch) == cap(batch) {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// deleteOrphans deletes the blobs of batch whose file has no row, and
// counts the others as kept.
func (s *Service) deleteOrphans(ctx context.Context, batch []parley.Blob, res *CollectResult) error {
	ids := make([]string, 0, len(batch))
	for _, b := range batch {
		if id := parley.BlobFileID(b.Key); parley.CheckFileID(id) == nil {
			ids = append(ids, id)
		}
	}
	exist := map[string]bool{}
	if len(ids) > 0 {
		sctx, cancel := s.storeCtx(ctx)
		var err error
		exist, err = s.store.FilesExist(sctx, ids)
		cancel()
		if err != nil {
			return err
		}
	}
	for _, b := range batch {
		if exist[parley.BlobFileID(b.Key)] {
			res.Blobs++
			res.Bytes += b.Size
			continue
		}
		if err := s.blobs.Delete(ctx, b.Key); err != nil {
			return err
		}
		res.Orphans++
		s.log.Info("orphan blob deleted", "key", b.Key, "size", b.Size, "modified", b.ModTime)
	}
	return nil
}

// findLost is step 3 of CollectFiles.
func (s *Service) findLost(ctx context.Context, res *CollectResult) error {
	after := ""
	for {
		sctx, cancel := s.storeCtx(ctx)
		page, err := s.store.ReadyFiles(sctx, after, parley.MaxFilesPage)
		cancel()
		if err != nil {
			return err
		}
		for _, f := range page {
			if err := s.checkBlob(ctx, f, res); err != nil {
				return err
			}
		}
		if len(page) < parley.MaxFilesPage {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// checkBlob counts and logs ready file f as lost when its blob is missing
// (and its row still there) or of another size.
func (s *Service) checkBlob(ctx context.Context, f parley.File, res *CollectResult) error {
	b, err := s.blobs.Stat(ctx, f.ID)
	switch {
	case errors.Is(err, parley.ErrBlobNotFound):
		sctx, cancel := s.storeCtx(ctx)
		exist, err := s.store.FilesExist(sctx, []string{f.ID})
		cancel()
		if err != nil {
			return err
		}
		if exist[f.ID] {
			res.Lost++
			s.log.Error("lost file: its row is ready but its blob is missing", "file", f.ID, "owner", f.Owner, "size", f.Size, "sha256", f.SHA256)
		}
	case err != nil:
		return err
	case b.Size != f.Size:
		res.Lost++
		s.log.Error("lost file: its blob's size differs from its row's", "file", f.ID, "owner", f.Owner, "size", f.Size, "blob_size", b.Size, "sha256", f.SHA256)
	}
	return nil
}
