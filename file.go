package parley

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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

// Uploaded files are derived state under the rules of derived.go: a file
// row belongs to its uploader, and a link row (file, conv, seq) written
// in the transaction of the send that attaches it is what lets anyone
// else read it. Recall, purge and rollback remove the links of the
// messages they take away, in their own transactions; a reader's access
// is decided by the link's seq against the reader's periods, inside the
// query. So a file is readable exactly where the message that carries it
// is: a former member reads the files of their periods, nobody reads the
// file of a recalled message but its owner, and a file no message links
// is collected after a grace period.

// File bounds and defaults (the policy file may lower or raise the sizes).
const (
	MaxAttachments     = 10        // files per message
	MaxFileNameChars   = 255       // code points of a file's name
	DefaultMaxFileSize = 100 << 20 // max_file_size: 100 MiB
	DefaultFileQuota   = 10 << 30  // file_quota: 10 GiB per user
)

// FileState is where an upload stands.
type FileState string

const (
	FileUploading FileState = "uploading" // created; bytes still arriving
	FileReady     FileState = "ready"     // every byte stored and measured
)

// File is one uploaded file as the store keeps it. Its ID is also its blob
// key (ValidBlobKey holds for NewID's ids).
type File struct {
	ID        string
	Owner     string
	Name      string // as the uploader named it (CheckFileName)
	Size      int64  // declared at creation; the stored bytes match it once ready
	State     FileState
	MIME      string // sniffed from the content when it finished, never the client's word
	SHA256    string // lower-case hex, when ready
	Width     int    // pixels, for an image whose header was read; else 0
	Height    int
	CreatedAt time.Time
}

// Attachment is what a message event carries of each file it attaches:
// the file as it was when the message was sent (files never change once
// ready).
type Attachment struct {
	ID     string
	Name   string
	Size   int64
	MIME   string
	SHA256 string
	Width  int
	Height int
}

// AttachmentOf is the attachment a ready file makes.
func AttachmentOf(f File) Attachment {
	return Attachment{ID: f.ID, Name: f.Name, Size: f.Size, MIME: f.MIME, SHA256: f.SHA256, Width: f.Width, Height: f.Height}
}

// NewUpload is the input of Store.CreateUpload: a name and the size the
// client declares, with the limits in force (the policy file's).
type NewUpload struct {
	Name    string
	Size    int64
	MaxSize int64 // max_file_size: a larger Size is TOO_LARGE
	Quota   int64 // file_quota: the user's files, this one included, may not pass it
}

// FileMeta is what the server measured of a finished upload.
type FileMeta struct {
	MIME   string // 1–255 bytes, type/subtype
	SHA256 string // 64 lower-case hex digits
	Width  int    // 0 when not an image
	Height int
}

// ThumbKey is the blob key of file id's thumbnail (a small JPEG made
// after upload): the id with "-thumb" appended, so a file and its
// thumbnail sit side by side and a List by the id's prefix finds both. It
// belongs to the file: the collector deletes it with the file's blob, and
// a thumbnail blob whose file has no row is an orphan.
func ThumbKey(id string) string { return id + thumbSuffix }

// thumbSuffix ends a thumbnail's blob key (ThumbKey).
const thumbSuffix = "-thumb"

// BlobFileID is the file id a blob key belongs to: the key itself, or the
// file of a thumbnail (ThumbKey).
func BlobFileID(key string) string {
	id, _ := strings.CutSuffix(key, thumbSuffix)
	return id
}

// MaxFilesPage bounds the ids of one FilesExist and the rows of one
// ReadyFiles or StaleFiles: the collector works in batches of at most
// this many, so its memory does not grow with the number of files.
const MaxFilesPage = 1000

// StaleFiles is the collector's question (Store.StaleFiles): uploads not
// finished, created before UploadingBefore, and ready files no message
// links, created before UnlinkedBefore; at most Limit of them.
type StaleFiles struct {
	UploadingBefore time.Time
	UnlinkedBefore  time.Time
	Limit           int
}

// FileUsage is what a user's files take against their quota.
type FileUsage struct {
	Files int64
	Bytes int64
}

// ErrTooLarge refuses an upload above max_file_size.
func ErrTooLarge(max int64) error {
	return Errorf(CodeTooLarge, "the file is larger than the %d bytes a file may have", max)
}

// ErrQuotaExceeded refuses an upload that would take the user's files
// past their quota.
func ErrQuotaExceeded(quota int64) error {
	return Errorf(CodeTooLarge, "the file would take your files past your quota of %d bytes", quota)
}

// ErrNoSuchFile is the one answer for a file that does not exist and for a
// file the caller may not read: the two are not told apart.
func ErrNoSuchFile() error { return Errorf(CodeNotFound, "no such file") }

// CheckFileName trims a file's name and checks it: 1–MaxFileNameChars code
// points of valid UTF-8, no control characters, no '/' or '\' (a name is
// shown and offered as a download name, never used as a path).
func CheckFileName(name string) (string, error) {
	name = strings.TrimSpace(name)
	n := utf8.RuneCountInString(name)
	bad := !utf8.ValidString(name) || n < 1 || n > MaxFileNameChars || strings.ContainsAny(name, `/\`)
	for _, r := range name {
		bad = bad || unicode.IsControl(r)
	}
	if bad {
		return "", Errorf(CodeInvalidArgument, "a file name must be 1–%d characters without control characters, '/' or '\\'", MaxFileNameChars)
	}
	return name, nil
}

// CheckUpload validates an upload's creation and returns it with its name
// trimmed; the size limits are checked by the store, in the order of its
// contract.
func CheckUpload(r NewUpload) (NewUpload, error) {
	name, err := CheckFileName(r.Name)
	if err != nil {
		return r, err
	}
	r.Name = name
	if r.Size < 0 {
		return r, Errorf(CodeInvalidArgument, "a file's size must not be negative")
	}
	if r.MaxSize < 1 || r.Quota < 1 {
		return r, Errorf(CodeInvalidArgument, "the file size limit and the quota must be positive")
	}
	return r, nil
}

// CheckFileID validates a file id (a blob key).
func CheckFileID(id string) error {
	if ValidBlobKey(id) != nil {
		return Errorf(CodeInvalidArgument, "a file id is 1–%d characters of a-z, 0-9, '-' and '_'", MaxBlobKey)
	}
	return nil
}

// CheckFileMeta validates what FinishUpload records.
func CheckFileMeta(m FileMeta) error {
	typ, sub, ok := strings.Cut(m.MIME, "/")
	if !ok || typ == "" || sub == "" || len(m.MIME) > 255 || strings.ContainsAny(m.MIME, " \t\r\n") {
		return Errorf(CodeInvalidArgument, "a file's type must be a MIME type/subtype")
	}
	if len(m.SHA256) != 2*sha256.Size || strings.Trim(m.SHA256, "0123456789abcdef") != "" {
		return Errorf(CodeInvalidArgument, "a file's sha256 must be 64 lower-case hex digits")
	}
	if m.Width < 0 || m.Height < 0 {
		return Errorf(CodeInvalidArgument, "a file's pixel size must not be negative")
	}
	return nil
}

// CheckAttachments validates a send's attachment list: at most
// MaxAttachments file ids, each once.
func CheckAttachments(ids []string) error {
	if len(ids) > MaxAttachments {
		return Errorf(CodeInvalidArgument, "a message attaches at most %d files", MaxAttachments)
	}
	for i, id := range ids {
		if err := CheckFileID(id); err != nil {
			return err
		}
		if slices.Contains(ids[:i], id) {
			return Errorf(CodeInvalidArgument, "attachment %s is listed twice", id)
		}
	}
	return nil
}

// ErrNotAttachable refuses an attachment that is not a ready file of the
// sender's own.
func ErrNotAttachable(id string) error {
	return Errorf(CodeNotFound, "attachment %s is not a finished upload of yours", id)
}

// attachmentJSON is an attachment as the stores keep it in an event's
// attachments column.
type attachmentJSON struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	MIME   string `json:"mime"`
	SHA256 string `json:"sha256"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

// EncodeAttachments is the text both stores keep for an event's
// attachments: a JSON array; "" for none (the column is then NULL).
func EncodeAttachments(as []Attachment) string {
	if len(as) == 0 {
		return ""
	}
	out := make([]attachmentJSON, len(as))
	for i, a := range as {
		out[i] = attachmentJSON(a)
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // strings and integers always marshal
	}
	return string(b)
}

// DecodeAttachments reads what EncodeAttachments wrote ("" is none).
func DecodeAttachments(text string) ([]Attachment, error) {
	if text == "" {
		return nil, nil
	}
	var in []attachmentJSON
	if err := json.Unmarshal([]byte(text), &in); err != nil {
		return nil, fmt.Errorf("attachments column: %w", err)
	}
	out := make([]Attachment, len(in))
	for i, a := range in {
		out[i] = Attachment(a)
	}
	return out, nil
}
