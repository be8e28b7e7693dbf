// Package blobdir keeps blobs in a local directory (parley.BlobStore), the
// default blob store: DATA-DIR/files, or a directory every gateway of a
// PostgreSQL deployment shares.
//
// Layout:
//
//	ROOT/tmp/      files of writes in progress (temp → fsync → rename)
//	ROOT/00 … ff/  the blobs, ROOT/xy/KEY with xy the first byte of the
//	               SHA-256 of KEY in hex
//
// The fan-out is by a hash of the key, not by the key's own first
// characters: a UUIDv7 starts with its time, so its prefix would put a
// year's blobs in one directory. 256 directories hold millions of files
// each on the filesystems we run on (ext4's and XFS's hashed directories).
// Directories are created 0700 and blobs 0600: the server alone reads them.
package blobdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/parleychat/parley"
)

var _ parley.BlobStore = (*Dir)(nil)

// Dir is a parley.BlobStore in a local directory. Several processes may
// share one directory (gateways on one PostgreSQL): every write is a rename,
// atomic on a local filesystem and on NFS.
type Dir struct {
	root string
	// rename is os.Rename; a white-box test replaces it to take the
	// cross-filesystem path of PutFile.
	rename func(oldpath, newpath string) error
}

const (
	tmpDir = "tmp"
	// staleTemp is the age after which Open removes a temp file: the
	// leftover of a writer that crashed. A live writer touches its file
	// with every write, and no write idles for a day.
	staleTemp = 24 * time.Hour
	// copyBuffer is the buffer of a streamed write: large enough that a
	// 1 GiB blob takes few system calls.
	copyBuffer = 256 << 10
)

// Open opens the blob directory at root, creating it and its fan-out
// directories if needed, and removes temp files older than a day.
func Open(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("blobdir: no directory given")
	}
	if err := os.MkdirAll(filepath.Join(root, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("blobdir: %w", err)
	}
	for i := range 256 {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprintf("%02x", i)), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("blobdir: %w", err)
		}
	}
	if err := syncDir(root); err != nil {
		return nil, fmt.Errorf("blobdir: %w", err)
	}
	d := &Dir{root: root, rename: os.Rename}
	if err := d.sweep(time.Now().Add(-staleTemp)); err != nil {
		return nil, fmt.Errorf("blobdir: %w", err)
	}
	return d, nil
}

// Root returns the directory the store keeps its blobs in.
func (d *Dir) Root() string { return d.root }

// sweep removes the temp files last written before cutoff.
func (d *Dir) sweep(cutoff time.Time) error {
	entries, err := os.ReadDir(filepath.Join(d.root, tmpDir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || !info.ModTime().Before(cutoff) {
			continue // gone meanwhile, or not ours to judge, or young
		}
		if err := os.Remove(filepath.Join(d.root, tmpDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// fanout returns the directory of key's blob.
func (d *Dir) fanout(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.root, hex.EncodeToString(sum[:1]))
}

// path returns the file of key's blob.
func (d *Dir) path(key string) string { return filepath.Join(d.fanout(key), key) }

// Put implements parley.BlobStore: temp file, write, fsync, rename, fsync
// of the directory.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	if err := parley.ValidBlobKey(key); err != nil {
		return 0, sum, err
	}
	if err := ctx.Err(); err != nil {
		return 0, sum, err
	}
	f, err := os.CreateTemp(filepath.Join(d.root, tmpDir), "put-*")
	if err != nil {
		return 0, sum, fmt.Errorf("blobdir: put: %w", err)
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), ctxReader{ctx, r}, make([]byte, copyBuffer))
	if err != nil {
		return 0, sum, err // r's or ctx's error as it is; a disk error is internal anyway
	}
	if err := f.Sync(); err != nil {
		return 0, sum, fmt.Errorf("blobdir: put: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, sum, fmt.Errorf("blobdir: put: %w", err)
	}
	// The last moment a cancel aborts: after the rename the blob is stored.
	if err := ctx.Err(); err != nil {
		return 0, sum, err
	}
	if err := d.commit(tmp, key); err != nil {
		return 0, sum, err
	}
	committed = true
	h.Sum(sum[:0])
	return n, sum, nil
}

// commit renames the synced file from into key's place and syncs the
// directory, so the blob is durable when it returns. A failed rename leaves
// from where it was.
func (d *Dir) commit(from, key string) error {
	if err := d.rename(from, d.path(key)); err != nil {
		return fmt.Errorf("blobdir: %w", err)
	}
	if err := syncDir(d.fanout(key)); err != nil {
		return fmt.Errorf("blobdir: %w", err)
	}
	return nil
}

// PutFile implements parley.BlobStore. The file is synced and renamed in:
// no byte is copied, so moving a finished 1 GiB upload costs an fsync of
// what the page cache still holds and two metadata writes. From another
// filesystem (EXDEV) the file is copied with Put and then removed.
func (d *Dir) PutFile(ctx context.Context, key, path string) error {
	if err := parley.ValidBlobKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("blobdir: put file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("blobdir: put file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("blobdir: put file: %s is not a regular file", path)
	}
	// The blob's mode is the store's, whatever the uploader created the
	// file with; fsync, because whoever wrote it may not have.
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("blobdir: put file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("blobdir: put file: %w", err)
	}
	err = d.commit(path, key)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EXDEV) {
		return err
	}
	if _, _, err := d.Put(ctx, key, f); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("blobdir: put file: stored, but the source stays: %w", err)
	}
	return nil
}

// Open implements parley.BlobStore. The reader is the open file: a Put or
// Delete of the key meanwhile replaces or removes the name, not the file
// being read.
func (d *Dir) Open(ctx context.Context, key string) (io.ReadSeekCloser, parley.Blob, error) {
	if err := parley.ValidBlobKey(key); err != nil {
		return nil, parley.Blob{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, parley.Blob{}, err
	}
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, parley.Blob{}, notFound(err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, parley.Blob{}, fmt.Errorf("blobdir: open: %w", err)
	}
	return f, parley.Blob{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil
}

// Stat implements parley.BlobStore.
func (d *Dir) Stat(ctx context.Context, key string) (parley.Blob, error) {
	if err := parley.ValidBlobKey(key); err != nil {
		return parley.Blob{}, err
	}
	if err := ctx.Err(); err != nil {
		return parley.Blob{}, err
	}
	info, err := os.Stat(d.path(key))
	if err != nil {
		return parley.Blob{}, notFound(err)
	}
	return parley.Blob{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil
}

// Delete implements parley.BlobStore. The directory is not synced: a
// deletion lost in a crash comes back as a blob without a row, which the
// collector deletes again.
func (d *Dir) Delete(ctx context.Context, key string) error {
	if err := parley.ValidBlobKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blobdir: delete: %w", err)
	}
	return nil
}

// listBatch is how many directory entries List reads at a time.
const listBatch = 512

// List implements parley.BlobStore: the fan-out directories in order, each
// read in batches of listBatch entries. Names that are not valid keys
// (nothing the store wrote) are skipped.
func (d *Dir) List(ctx context.Context, prefix string, fn func(parley.Blob) error) error {
	if err := parley.ValidBlobPrefix(prefix); err != nil {
		return err
	}
	for i := range 256 {
		if err := d.listDir(ctx, filepath.Join(d.root, fmt.Sprintf("%02x", i)), prefix, fn); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dir) listDir(ctx context.Context, dir, prefix string, fn func(parley.Blob) error) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("blobdir: list: %w", err)
	}
	defer f.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := f.ReadDir(listBatch)
		for _, e := range entries {
			name := e.Name()
			if !strings.HasPrefix(name, prefix) || parley.ValidBlobKey(name) != nil {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile
			}
			if err != nil {
				return fmt.Errorf("blobdir: list: %w", err)
			}
			if !info.Mode().IsRegular() {
				continue
			}
			if err := fn(parley.Blob{Key: name, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("blobdir: list: %w", err)
		}
	}
}

// notFound translates a missing file into parley.ErrBlobNotFound.
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return parley.ErrBlobNotFound
	}
	return fmt.Errorf("blobdir: %w", err)
}

// syncDir makes the entries of dir durable: a rename is on disk once its
// directory is synced.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
