package app

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	// The image formats whose header gives a file's pixel size.
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/webp"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// CreateUpload starts an upload by p of a file named name that will have
// size bytes, under the limits of the policy in force (max_file_size,
// file_quota): the file row, counted against p's quota before any byte is
// stored. Errors: INVALID_ARGUMENT (name, size), TOO_LARGE (the file size
// limit or the quota), UNAVAILABLE (no blob store, the store).
func (s *Service) CreateUpload(ctx context.Context, p parley.Principal, name string, size int64) (parley.File, error) {
	if s.blobs == nil {
		return parley.File{}, errNoBlobs
	}
	cfg := s.config()
	return s.store.CreateUpload(ctx, p, parley.NewUpload{Name: name, Size: size, MaxSize: cfg.MaxFileSize(), Quota: cfg.FileQuota()})
}

// FileAllowance is what a user's files take and may take: their usage
// (uploading and ready files) and the limits of the policy in force.
type FileAllowance struct {
	Usage       parley.FileUsage
	Quota       int64 // file_quota: bytes all of the user's files may take
	MaxFileSize int64 // max_file_size: bytes one file may have
}

// MyFiles returns p's file allowance, so a client can show what is used
// and refuse a file too large before it uploads a byte. ok is false when
// the server stores no files (no blob store): there is nothing to show.
func (s *Service) MyFiles(ctx context.Context, p parley.Principal) (a FileAllowance, ok bool, err error) {
	if s.blobs == nil {
		return FileAllowance{}, false, nil
	}
	u, err := s.store.FileUsage(ctx, p)
	if err != nil {
		return FileAllowance{}, false, err
	}
	cfg := s.config()
	return FileAllowance{Usage: u, Quota: cfg.FileQuota(), MaxFileSize: cfg.MaxFileSize()}, true, nil
}

// Upload returns p's own file id, in any state. A file of someone else's,
// even one p may read through a message, is the same NOT_FOUND as a
// missing one: only the uploader may resume, finish or cancel an upload.
func (s *Service) Upload(ctx context.Context, p parley.Principal, id string) (parley.File, error) {
	f, err := s.store.File(ctx, p, id)
	if err != nil {
		return parley.File{}, err
	}
	if f.Owner != p.User {
		return parley.File{}, parley.ErrNoSuchFile()
	}
	return f, nil
}

// FinishUpload makes p's upload id ready from its bytes, staged complete
// at path: it measures them (SHA-256, the MIME type sniffed from the
// content, the pixel size from an image's header), moves them into the
// blob store under id, and records the measure. A file already ready is
// returned as it is. When nothing is at path the bytes may already be in
// the blob store (a finish that stopped after the move): they are measured
// there. Errors: NOT_FOUND (no such upload of p's, or its bytes are gone),
// UNAVAILABLE (no blob store), internal.
func (s *Service) FinishUpload(ctx context.Context, p parley.Principal, id, path string) (parley.File, error) {
	return s.FinishUploadSum(ctx, p, id, path, "")
}

// FinishUploadSum is FinishUpload for a caller that hashed the bytes as it
// staged them: sum, when not "", is their SHA-256 (lower-case hex) and is
// recorded instead of reading every byte again. The size is still checked.
// Bytes found in the blob store instead are measured there, sum or not.
func (s *Service) FinishUploadSum(ctx context.Context, p parley.Principal, id, path, sum string) (parley.File, error) {
	if s.blobs == nil {
		return parley.File{}, errNoBlobs
	}
	f, err := s.Upload(ctx, p, id)
	if err != nil || f.State == parley.FileReady {
		return f, err
	}
	meta, err := measureFile(path, f.Size, sum)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		meta, err = s.measureBlob(ctx, id, f.Size, "")
	case err == nil:
		err = s.blobs.PutFile(ctx, id, path)
	}
	if err != nil {
		return parley.File{}, err
	}
	if err := fault.Hit(fault.UploadAfterBlob); err != nil {
		return parley.File{}, err
	}
	f, err = s.store.FinishUpload(ctx, p, id, meta)
	if err == nil && s.fileReady != nil {
		s.fileReady(f)
	}
	return f, err
}

// CancelUpload deletes p's file id: an upload not finished, or a ready
// file no message attaches (its blob too). The staged bytes of an
// unfinished upload are the caller's to remove. Errors: NOT_FOUND (no
// such file of p's), PERMISSION_DENIED (a message attaches it: recall the
// message instead), UNAVAILABLE.
func (s *Service) CancelUpload(ctx context.Context, p parley.Principal, id string) error {
	if s.blobs == nil {
		return errNoBlobs
	}
	f, err := s.Upload(ctx, p, id)
	if err != nil {
		return err
	}
	// Every file of p's was created before this bound: DeleteFile then
	// deletes it unless a message links it.
	bound := time.Now().Add(time.Hour)
	deleted, err := s.store.DeleteFile(ctx, id, parley.StaleFiles{UploadingBefore: bound, UnlinkedBefore: bound, Limit: 1})
	if err != nil {
		return err
	}
	if !deleted {
		if f.State == parley.FileReady {
			return parley.Errorf(parley.CodePermissionDenied, "file %s is attached to a message: recall the message to remove it", id)
		}
		return parley.ErrNoSuchFile()
	}
	// The upload may have finished meanwhile and moved its bytes in;
	// deleting a missing key is no error. A failure leaves an orphan blob
	// for the collector's reconciliation, not an error for the caller.
	if err := s.blobs.Delete(ctx, id); err != nil {
		s.log.Warn("cancelled upload: blob not deleted; the collector will", "file", id, "err", err)
	}
	return nil
}

// measureFile measures the size bytes staged at path (sum: see measure).
func measureFile(path string, size int64, sum string) (parley.FileMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return parley.FileMeta{}, err
	}
	defer f.Close()
	return measure(f, size, sum)
}

// measureBlob measures the blob of id, for a finish whose bytes were moved
// in before it stopped. No blob is NOT_FOUND: the upload's bytes are gone.
func (s *Service) measureBlob(ctx context.Context, id string, size int64, sum string) (parley.FileMeta, error) {
	r, _, err := s.blobs.Open(ctx, id)
	if errors.Is(err, parley.ErrBlobNotFound) {
		return parley.FileMeta{}, parley.ErrNoSuchFile()
	}
	if err != nil {
		return parley.FileMeta{}, err
	}
	defer r.Close()
	return measure(r, size, sum)
}

// Measure reads what a ready file's row records of its bytes: the MIME
// type sniffed from the first 512 bytes (http.DetectContentType, without
// parameters), the pixel size from an image's header only (PNG, JPEG, GIF,
// WebP; 0 when the header does not decode), and the SHA-256 of all of
// them, which must be exactly size bytes; a sum already known (not "") is
// taken as it is, and only the size is checked. Memory is a fixed buffer,
// whatever the size.
func measure(r io.ReadSeeker, size int64, sum string) (parley.FileMeta, error) {
	head := make([]byte, 512)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return parley.FileMeta{}, fmt.Errorf("measure: %w", err)
	}
	var meta parley.FileMeta
	meta.MIME, _, _ = strings.Cut(http.DetectContentType(head[:n]), ";")
	if strings.HasPrefix(meta.MIME, "image/") {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return parley.FileMeta{}, fmt.Errorf("measure: %w", err)
		}
		if c, _, err := image.DecodeConfig(bufio.NewReader(r)); err == nil && c.Width > 0 && c.Height > 0 {
			meta.Width, meta.Height = c.Width, c.Height
		}
	}
	if sum != "" {
		end, err := r.Seek(0, io.SeekEnd)
		if err != nil {
			return parley.FileMeta{}, fmt.Errorf("measure: %w", err)
		}
		if end != size {
			return parley.FileMeta{}, fmt.Errorf("measure: %d bytes stored, %d declared", end, size)
		}
		meta.SHA256 = sum
		return meta, nil
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return parley.FileMeta{}, fmt.Errorf("measure: %w", err)
	}
	h := sha256.New()
	got, err := io.CopyBuffer(h, r, make([]byte, 256<<10))
	if err != nil {
		return parley.FileMeta{}, fmt.Errorf("measure: %w", err)
	}
	if got != size {
		return parley.FileMeta{}, fmt.Errorf("measure: %d bytes stored, %d declared", got, size)
	}
	meta.SHA256 = hex.EncodeToString(h.Sum(nil))
	return meta, nil
}
