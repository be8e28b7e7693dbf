package parley

import (
	"context"
	"crypto/sha256"
	"io"
	"time"
)

// Files keep their bytes in a blob store, apart from the database: the
// store's rows say which files exist and who may read them, the blob store
// holds the bytes under a key the server chose. Two implementations exist,
// blobdir.Dir (a local directory) and s3.Store (an S3-compatible bucket),
// and both pass the one behaviour suite in blobtest.
//
// The blob store knows nothing of owners, conversations or access: every
// check happens before a key reaches it. Its users are the uploads (a
// finished upload is moved in with PutFile), the downloads (Open gives
// what http.ServeContent needs: a seekable reader, a size and a
// modification time), the collector (List and Delete reconcile blobs
// against rows) and the exports (Open).
//
// General guarantees:
//   - A key is validated (ValidBlobKey) before any storage work: a bad key
//     is INVALID_ARGUMENT (ErrBadBlobKey) and nothing changes.
//   - Writes are atomic per key: a reader sees a key's whole old blob, or
//     its whole new blob, or (for a new key) no blob, never a part. A write
//     that fails before its bytes are complete (the reader's error, the
//     context cancelled) leaves the key as it was. A write whose reply is
//     lost (any other error) may or may not have stored the blob: the
//     caller treats the key as unknown and may Delete it.
//   - No method holds a blob in memory: memory per call is bounded by a
//     constant of the implementation, whatever the blob's size.
//   - A missing key is ErrBlobNotFound (NOT_FOUND) from Open and Stat; any
//     error without a protocol code is an internal failure (the disk, the
//     network, the S3 server) whose message may name paths or hosts and is
//     never shown to a client (ErrorMessage).
//   - Blobs are durable when a write returns: the local store has synced
//     the file and its directory, an S3 server has acknowledged it.
type BlobStore interface {
	// Put stores the bytes of r under key, replacing any blob the key
	// held, and reports their size and SHA-256. r is read to EOF; the
	// store streams it (it never knows the size in advance). An error
	// from r, or ctx done before the last byte, aborts the Put: the key
	// keeps what it held. Errors: INVALID_ARGUMENT (key), r's error,
	// ctx's error, internal.
	Put(ctx context.Context, key string, r io.Reader) (size int64, sum [sha256.Size]byte, err error)

	// PutFile moves the finished local file at path in under key,
	// replacing any blob the key held. On success the file is no longer
	// at path: the local store renames it (no copy when path is on the
	// blob directory's filesystem; a streamed copy otherwise), the S3
	// store uploads it in parts of a bounded size and then removes it.
	// The file must not change while PutFile runs. On error the file is
	// still at path (except when the error says only its removal failed:
	// the blob is then stored) and the key keeps what it held or holds
	// the file (a lost reply, see above). PutFile computes no digest:
	// the caller hashed the bytes as it received them. Errors:
	// INVALID_ARGUMENT (key), internal (path missing or not a regular
	// file, the write).
	PutFile(ctx context.Context, key, path string) error

	// Open returns a reader of the blob under key and the blob's size
	// and modification time. The reader supports Seek (every whence; a
	// Read after a Seek reads from there), so http.ServeContent can
	// answer Range requests from it; it reads the blob as it was when
	// Open returned even if a Put replaces or a Delete removes the key
	// meanwhile, or fails rather than mix two blobs. ctx bounds the open
	// and, for a store that reads over the network, every later read:
	// the reader must not outlive ctx. The caller closes the reader.
	// Errors: INVALID_ARGUMENT (key), NOT_FOUND (ErrBlobNotFound),
	// internal.
	Open(ctx context.Context, key string) (io.ReadSeekCloser, Blob, error)

	// Stat returns the size and modification time of the blob under key.
	// Errors: INVALID_ARGUMENT (key), NOT_FOUND (ErrBlobNotFound),
	// internal.
	Stat(ctx context.Context, key string) (Blob, error)

	// Delete removes the blob under key. A missing key is not an error,
	// so the collector may delete twice. A reader opened before keeps
	// reading the old bytes (or fails; it never reads another blob's).
	// Errors: INVALID_ARGUMENT (key), internal.
	Delete(ctx context.Context, key string) error

	// List calls fn with every blob whose key starts with prefix ("" for
	// all), one at a time, in no particular order, holding only a bounded
	// batch of keys in memory: the collector walks millions of blobs with
	// it. A blob written or deleted during the walk may or may not be
	// reported; every other blob is reported exactly once. An error from
	// fn stops the walk and is returned as it is. Errors:
	// INVALID_ARGUMENT (a prefix that no valid key starts with), fn's
	// error, ctx's error, internal.
	List(ctx context.Context, prefix string, fn func(Blob) error) error
}

// Blob describes one stored blob.
type Blob struct {
	Key  string
	Size int64
	// ModTime is when the blob's bytes were last written, by the store's
	// clock (for a file PutFile renamed in: the file's own modification
	// time). It serves ages (the collector's grace period) and
	// Last-Modified, not an ordering of writes.
	ModTime time.Time
}

// MaxBlobKey is the longest blob key, in bytes.
const MaxBlobKey = 128

// ErrBlobNotFound is the answer of Open and Stat for a key that holds no
// blob. For a file whose row exists it means the blob is lost: the caller
// decides what a client sees.
var ErrBlobNotFound = &Error{Code: CodeNotFound, Msg: "no such blob"}

// ErrBadBlobKey refuses a key (or List prefix) outside the key alphabet.
var ErrBadBlobKey = &Error{Code: CodeInvalidArgument, Msg: "invalid blob key: 1 to 128 characters of a-z, 0-9, '-' and '_'"}

// ValidBlobKey checks a blob key: 1 to MaxBlobKey characters of a-z, 0-9,
// '-' and '_' (NewID's ids and such ids with a suffix like "-thumb"). The
// alphabet has no path separator and no dot, so a key is a file name on
// every filesystem ("." and ".." included) and an S3 object name that
// needs no escaping, and has no upper case, so two keys never name one file
// on a case-insensitive filesystem.
func ValidBlobKey(key string) error {
	if key == "" {
		return ErrBadBlobKey
	}
	return ValidBlobPrefix(key)
}

// ValidBlobPrefix checks a List prefix: "" or the start of a valid key.
func ValidBlobPrefix(prefix string) error {
	if len(prefix) > MaxBlobKey {
		return ErrBadBlobKey
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return ErrBadBlobKey
		}
	}
	return nil
}
