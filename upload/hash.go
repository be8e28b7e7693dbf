package upload

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/tus/tusd/v2/pkg/filestore"
	"github.com/tus/tusd/v2/pkg/handler"
)

// The staged bytes are hashed as they arrive, so a finish does not read a
// large file again. The SHA-256 state after the bytes stored so far is
// kept beside them (ID.sha256: the offset it covers, then the state), so
// the hash survives a resume, a restart or a crash:
//   - the state is saved after the bytes it covers are written, by a
//     rename, so it never covers bytes the file lacks; a crash between the
//     two leaves it behind the file, and the gap is hashed from the file
//     before the next bytes;
//   - staged files only grow (tusd appends), so bytes once hashed do not
//     change;
//   - a state that is missing, unreadable or ahead of the file is dropped
//     and the file hashed from its start.

// stagingStore is tusd's file store with WriteChunk replaced: bytes are
// copied in large buffers and hashed on another goroutine as they go.
type stagingStore struct {
	filestore.FileStore
}

func (s stagingStore) NewUpload(ctx context.Context, info handler.FileInfo) (handler.Upload, error) {
	u, err := s.FileStore.NewUpload(ctx, info)
	if err != nil {
		return nil, err
	}
	return s.wrap(ctx, u)
}

func (s stagingStore) GetUpload(ctx context.Context, id string) (handler.Upload, error) {
	u, err := s.FileStore.GetUpload(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.wrap(ctx, u)
}

func (s stagingStore) AsTerminatableUpload(u handler.Upload) handler.TerminatableUpload {
	return s.FileStore.AsTerminatableUpload(u.(*stagedUpload).Upload)
}

func (s stagingStore) wrap(ctx context.Context, u handler.Upload) (handler.Upload, error) {
	info, err := u.GetInfo(ctx)
	if err != nil {
		return nil, err
	}
	return &stagedUpload{Upload: u, info: info, path: info.Storage[filestore.StorageKeyPath]}, nil
}

type stagedUpload struct {
	handler.Upload
	info handler.FileInfo
	path string // the staged bytes
}

func (u *stagedUpload) GetInfo(context.Context) (handler.FileInfo, error) { return u.info, nil }

// copyBuffer is the size of each read of a request body: large, so a
// 1 GiB upload takes few system calls.
const copyBuffer = 1 << 20

// WriteChunk appends src at offset (the file's size), hashing what it
// writes, and saves the hash state after.
func (u *stagedUpload) WriteChunk(ctx context.Context, offset int64, src io.Reader) (int64, error) {
	h, err := hashUpTo(u.path, offset)
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(u.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := copyHashing(f, offset, src, h)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	u.info.Offset = offset + n
	if serr := saveHash(u.path, offset+n, h); err == nil {
		err = serr
	}
	return n, err
}

// bufferPool holds the copy buffers of finished requests: uploads reuse
// them instead of leaving 4 MiB of garbage each.
var bufferPool = sync.Pool{New: func() any { return new([copyBuffer]byte) }}

// writebackEvery is how many bytes are written between two requests to
// the kernel to start writing them to the disk.
const writebackEvery = 16 << 20

// copyHashing appends src to dst, whose size is offset; the bytes written
// go to h on another goroutine, so hashing overlaps with receiving, and
// are handed to the disk as they come.
func copyHashing(dst *os.File, offset int64, src io.Reader, h hash.Hash) (int64, error) {
	const buffers = 4
	free := make(chan []byte, buffers)
	for range buffers {
		free <- bufferPool.Get().(*[copyBuffer]byte)[:]
	}
	defer func() {
		for range buffers {
			bufferPool.Put((*[copyBuffer]byte)(<-free))
		}
	}()
	full := make(chan []byte, buffers)
	var wg sync.WaitGroup
	wg.Go(func() {
		for b := range full {
			h.Write(b)
			free <- b[:cap(b)]
		}
	})
	var n, flushed int64
	var err error
	for {
		if n-flushed >= writebackEvery {
			startWriteback(dst, offset+flushed, n-flushed)
			flushed = n
		}
		buf := <-free
		var r int
		r, err = io.ReadFull(src, buf)
		if r == 0 {
			free <- buf // every buffer goes back to the pool
		} else {
			w, werr := dst.Write(buf[:r])
			n += int64(w)
			full <- buf[:w]
			if werr != nil {
				err = werr
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = nil
			}
			break
		}
	}
	close(full)
	wg.Wait()
	return n, err
}

// hashPath is where the hash state of the bytes staged at path is kept.
func hashPath(path string) string { return path + ".sha256" }

// hashUpTo returns the SHA-256 state of the first offset bytes staged at
// path: the saved state, brought up to offset from the file if it is
// behind, or the file hashed from its start if there is none.
func hashUpTo(path string, offset int64) (hash.Hash, error) {
	h := sha256.New()
	from := int64(0)
	if b, err := os.ReadFile(hashPath(path)); err == nil {
		if at, state, ok := strings.Cut(string(b), "\n"); ok {
			n, err := strconv.ParseInt(at, 10, 64)
			if err == nil && 0 <= n && n <= offset && h.(encoding.BinaryUnmarshaler).UnmarshalBinary([]byte(state)) == nil {
				from = n
			} else {
				h.Reset()
			}
		}
	}
	if from == offset {
		return h, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	got, err := io.CopyBuffer(h, io.NewSectionReader(f, from, offset-from), make([]byte, copyBuffer))
	if err == nil && got != offset-from {
		err = fmt.Errorf("upload: staged file shorter (%d) than its offset %d", from+got, offset)
	}
	return h, err
}

// saveHash keeps h, the state after offset bytes, beside path.
func saveHash(path string, offset int64, h hash.Hash) error {
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	tmp := hashPath(path) + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(strconv.FormatInt(offset, 10)+"\n"), state...), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, hashPath(path))
}

// stagedSum returns the SHA-256 of the size bytes staged at path, from
// the saved state (reading only what it does not cover).
func stagedSum(path string, size int64) (string, error) {
	h, err := hashUpTo(path, size)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
