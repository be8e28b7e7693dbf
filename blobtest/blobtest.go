// Package blobtest is the one behaviour suite of parley.BlobStore. Every
// blob store runs it (as storetest is run for every Store):
//
//	func TestContract(t *testing.T) {
//		blobtest.Run(t, func(t *testing.T) parley.BlobStore { … })
//	}
//
// Each behaviour is a named subtest on a fresh, empty store of its own.
// The subtests run one after another: large_streamed measures the heap of
// the process, which a parallel subtest would disturb.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Run runs every behaviour against the stores newStore makes. newStore
// returns an empty store that no other call's store shares keys with, and
// releases it at t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) parley.BlobStore) {
	t.Helper()
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) { b.run(t, newStore(t)) })
	}
}

var behaviours = []struct {
	name string
	run  func(*testing.T, parley.BlobStore)
}{
	{"round_trip", testRoundTrip},
	{"put_file", testPutFile},
	{"replace", testReplace},
	{"put_is_atomic", testPutIsAtomic},
	{"failed_put_leaves_nothing", testFailedPut},
	{"cancelled_put_leaves_nothing", testCancelledPut},
	{"seek_and_range", testSeekAndRange},
	{"open_reader_is_stable", testOpenReaderIsStable},
	{"missing_key", testMissingKey},
	{"delete_idempotent", testDeleteIdempotent},
	{"list_prefix", testListPrefix},
	{"bad_keys", testBadKeys},
	{"large_streamed", testLargeStreamed},
}

// MiB is a mebibyte.
const MiB = 1 << 20

// content returns n pseudo-random bytes, the same for the same seed.
func content(seed uint64, n int) []byte {
	b := make([]byte, n)
	stream(seed).Read(b)
	return b
}

// stream returns the endless pseudo-random byte stream of seed; content
// is its start.
func stream(seed uint64) *rand.ChaCha8 {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	return rand.NewChaCha8(key)
}

// put stores b under key and checks what Put reports.
func put(t *testing.T, s parley.BlobStore, key string, b []byte) {
	t.Helper()
	size, sum, err := s.Put(context.Background(), key, bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Put(%s, %d bytes): %v", key, len(b), err)
	}
	if size != int64(len(b)) || sum != sha256.Sum256(b) {
		t.Fatalf("Put(%s) = %d, %x; want %d, %x", key, size, sum, len(b), sha256.Sum256(b))
	}
}

// holds reports how key differs from holding exactly b, or nil. It does
// not stop the test, so a store may call it from any goroutine (through a
// reader the test gave it).
func holds(s parley.BlobStore, key string, b []byte) error {
	ctx := context.Background()
	rc, blob, err := s.Open(ctx, key)
	if err != nil {
		return fmt.Errorf("Open(%s): %w", key, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	if !bytes.Equal(got, b) {
		return fmt.Errorf("%s holds %d bytes (sha256 %x), want %d (sha256 %x)", key, len(got), sha256.Sum256(got), len(b), sha256.Sum256(b))
	}
	if blob.Key != key || blob.Size != int64(len(b)) {
		return fmt.Errorf("Open(%s) reports %+v, want key %s, size %d", key, blob, key, len(b))
	}
	st, err := s.Stat(ctx, key)
	if err != nil {
		return fmt.Errorf("Stat(%s): %w", key, err)
	}
	if st.Key != key || st.Size != int64(len(b)) {
		return fmt.Errorf("Stat(%s) = %+v, want size %d", key, st, len(b))
	}
	return nil
}

// missing reports how key differs from holding no blob (Open and Stat
// say NOT_FOUND), or nil; like holds, from any goroutine.
func missing(s parley.BlobStore, key string) error {
	if _, err := s.Stat(context.Background(), key); !errors.Is(err, parley.ErrBlobNotFound) {
		return fmt.Errorf("Stat(%s) = %v, want ErrBlobNotFound", key, err)
	}
	rc, _, err := s.Open(context.Background(), key)
	if err == nil {
		rc.Close()
	}
	if !errors.Is(err, parley.ErrBlobNotFound) || parley.ErrorCode(err) != parley.CodeNotFound {
		return fmt.Errorf("Open(%s) = %v, want ErrBlobNotFound", key, err)
	}
	return nil
}

// wantBlob checks that key holds exactly b.
func wantBlob(t *testing.T, s parley.BlobStore, key string, b []byte) {
	t.Helper()
	if err := holds(s, key, b); err != nil {
		t.Fatal(err)
	}
}

// wantMissing checks that key holds no blob.
func wantMissing(t *testing.T, s parley.BlobStore, key string) {
	t.Helper()
	if err := missing(s, key); err != nil {
		t.Fatal(err)
	}
}

// list returns the blobs under prefix, sorted by key.
func list(t *testing.T, s parley.BlobStore, prefix string) []parley.Blob {
	t.Helper()
	var out []parley.Blob
	err := s.List(context.Background(), prefix, func(b parley.Blob) error {
		out = append(out, b)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	slices.SortFunc(out, func(a, b parley.Blob) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// wantEmpty checks that the store lists no blob at all.
func wantEmpty(t *testing.T, s parley.BlobStore) {
	t.Helper()
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("store holds %v, want nothing", got)
	}
}

// near checks that a modification time is the time of a write made
// between before and after; stores keep whole seconds at least.
func near(t *testing.T, what string, got, before, after time.Time) {
	t.Helper()
	if got.Before(before.Truncate(time.Second).Add(-time.Second)) || got.After(after.Add(time.Second)) {
		t.Errorf("%s modification time %v, want between %v and %v", what, got, before, after)
	}
}

func testRoundTrip(t *testing.T, s parley.BlobStore) {
	// The sizes cross the points where a store may change strategy: empty,
	// one byte, the S3 store's single-request bound and its part size.
	for i, n := range []int{0, 1, 1000, MiB - 1, MiB, MiB + 1, 8*MiB + 3} {
		key := fmt.Sprintf("round-%d", i)
		b := content(uint64(i), n)
		before := time.Now()
		put(t, s, key, b)
		after := time.Now()
		wantBlob(t, s, key, b)
		st, err := s.Stat(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		near(t, key, st.ModTime, before, after)
	}
}

func testPutFile(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	dir := t.TempDir()
	for i, n := range []int{0, 5000, 9*MiB + 7} {
		key := fmt.Sprintf("file-%d", i)
		path := filepath.Join(dir, key+".upload")
		b := content(uint64(100+i), n)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if err := s.PutFile(ctx, key, path); err != nil {
			t.Fatalf("PutFile(%s, %d bytes): %v", key, n, err)
		}
		after := time.Now()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after PutFile the file is still at its path (stat: %v)", err)
		}
		wantBlob(t, s, key, b)
		st, err := s.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		near(t, key, st.ModTime, before.Add(-time.Second), after)
	}

	// A missing file stores nothing; a file over an existing blob replaces it.
	if err := s.PutFile(ctx, "file-missing", filepath.Join(dir, "nothing-here")); err == nil {
		t.Fatal("PutFile of a missing file succeeded")
	}
	wantMissing(t, s, "file-missing")
	if err := s.PutFile(ctx, "file-dir", dir); err == nil {
		t.Fatal("PutFile of a directory succeeded")
	}
	wantMissing(t, s, "file-dir")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the refused directory is gone: %v", err)
	}
	path := filepath.Join(dir, "again")
	b := content(7, 3000)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFile(ctx, "file-1", path); err != nil {
		t.Fatal(err)
	}
	wantBlob(t, s, "file-1", b)
}

func testReplace(t *testing.T, s parley.BlobStore) {
	a, b := content(1, 3*MiB), content(2, 1000)
	put(t, s, "k", a)
	put(t, s, "k", b)
	wantBlob(t, s, "k", b)
	put(t, s, "k", a)
	wantBlob(t, s, "k", a)
	if got := list(t, s, ""); len(got) != 1 || got[0].Key != "k" || got[0].Size != int64(len(a)) {
		t.Fatalf("List after replacing = %+v, want k alone with %d bytes", got, len(a))
	}
}

// checkingReader yields b in chunks of 64 KiB and calls check each time it
// has handed out another MiB: the store is in the middle of a Put. A
// failed check is kept and fails the Read (and so the Put).
type checkingReader struct {
	b      []byte
	off    int
	checks int
	check  func() error
	failed error
}

func (r *checkingReader) Read(p []byte) (int, error) {
	if r.off == len(r.b) {
		return 0, io.EOF
	}
	if r.off/MiB > r.checks {
		r.checks++
		if err := r.check(); err != nil {
			r.failed = fmt.Errorf("after %d bytes of the Put: %w", r.off, err)
			return 0, r.failed
		}
	}
	n := copy(p[:min(len(p), 64<<10)], r.b[r.off:])
	r.off += n
	return n, nil
}

func testPutIsAtomic(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	// A new key: nothing is visible until the Put returns.
	b := content(3, 10*MiB+5)
	r := &checkingReader{b: b, check: func() error { return missing(s, "new") }}
	if _, _, err := s.Put(ctx, "new", r); err != nil || r.failed != nil {
		t.Fatalf("Put: %v (check: %v)", err, r.failed)
	}
	if r.checks < 9 {
		t.Fatalf("the key was checked %d times during the Put, want 9 or more", r.checks)
	}
	wantBlob(t, s, "new", b)

	// An existing key: the old blob, whole, until the Put returns.
	old := content(4, 200<<10)
	put(t, s, "old", old)
	r = &checkingReader{b: b, check: func() error { return holds(s, "old", old) }}
	if _, _, err := s.Put(ctx, "old", r); err != nil || r.failed != nil {
		t.Fatalf("Put: %v (check: %v)", err, r.failed)
	}
	wantBlob(t, s, "old", b)
}

// failingReader yields n bytes of b, then fails with err.
type failingReader struct {
	b   []byte
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b, r.n = r.b[k:], r.n-k
	return k, nil
}

func testFailedPut(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	old := content(5, 4000)
	put(t, s, "old", old)
	errBroken := errors.New("the client went away")
	// Fail before any byte, inside the first MiB, past it, and past the S3
	// store's first part (which is then uploaded and must be abandoned).
	for _, n := range []int{0, 100, MiB + 10, 9 * MiB} {
		for _, key := range []string{"new", "old"} {
			r := &failingReader{b: content(6, 10*MiB), n: n, err: errBroken}
			if _, _, err := s.Put(ctx, key, r); err == nil {
				t.Fatalf("Put(%s) failing after %d bytes succeeded", key, n)
			}
		}
		wantMissing(t, s, "new")
		wantBlob(t, s, "old", old)
		if got := list(t, s, ""); len(got) != 1 {
			t.Fatalf("after failed Puts the store holds %+v, want old alone", got)
		}
	}
}

// cancellingReader yields b and cancels its context once it has handed
// out n bytes, as a client whose request ends mid-upload.
type cancellingReader struct {
	b      []byte
	n      int
	cancel context.CancelFunc
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if r.n <= 0 {
		r.cancel()
	}
	k := copy(p[:min(len(p), 64<<10)], r.b)
	r.b, r.n = r.b[k:], r.n-k
	return k, nil
}

func testCancelledPut(t *testing.T, s parley.BlobStore) {
	old := content(7, 4000)
	put(t, s, "old", old)
	for _, n := range []int{0, 100, MiB + 10, 9 * MiB} {
		for _, key := range []string{"new", "old"} {
			ctx, cancel := context.WithCancel(context.Background())
			r := &cancellingReader{b: content(8, 10*MiB), n: n, cancel: cancel}
			_, _, err := s.Put(ctx, key, r)
			cancel()
			if err == nil {
				t.Fatalf("Put(%s) cancelled after %d bytes succeeded", key, n)
			}
		}
		wantMissing(t, s, "new")
		wantBlob(t, s, "old", old)
	}
	// A context already done stores nothing either.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Put(ctx, "new", bytes.NewReader(old)); err == nil {
		t.Fatal("Put with a cancelled context succeeded")
	}
	path := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFile(ctx, "new", path); err == nil {
		t.Fatal("PutFile with a cancelled context succeeded")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("a PutFile refused for its context moved the file: %v", err)
	}
	wantMissing(t, s, "new")
}

func testSeekAndRange(t *testing.T, s parley.BlobStore) {
	size := 2*MiB + 17
	b := content(9, size)
	put(t, s, "seek", b)
	rc, blob, err := s.Open(context.Background(), "seek")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if blob.Size != int64(size) {
		t.Fatalf("Open reports size %d, want %d", blob.Size, size)
	}
	steps := []struct {
		offset int64
		whence int
		at     int64 // the position Seek reports
		n      int   // bytes to read from there
	}{
		{0, io.SeekStart, 0, 10},
		{MiB, io.SeekStart, MiB, 1000},
		{100, io.SeekCurrent, MiB + 1100, 5000},
		{-10, io.SeekEnd, int64(size) - 10, 10},
		{0, io.SeekEnd, int64(size), 0},
		{17, io.SeekStart, 17, MiB},
		{-MiB, io.SeekCurrent, 17, 100},
	}
	for _, st := range steps {
		at, err := rc.Seek(st.offset, st.whence)
		if err != nil || at != st.at {
			t.Fatalf("Seek(%d, %d) = %d, %v; want %d", st.offset, st.whence, at, err, st.at)
		}
		got := make([]byte, st.n)
		if _, err := io.ReadFull(rc, got); err != nil {
			t.Fatalf("reading %d bytes at %d: %v", st.n, at, err)
		}
		if !bytes.Equal(got, b[at:at+int64(st.n)]) {
			t.Fatalf("%d bytes at %d differ from the blob's", st.n, at)
		}
	}
	if _, err := rc.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want 0, EOF", n, err)
	}

	// What a download does: http.ServeContent answers a Range request from
	// the reader (it seeks to the end for the size, then to the range).
	ranges := []struct {
		header string
		status int
		from   int64
		to     int64 // exclusive
	}{
		{"", http.StatusOK, 0, int64(size)},
		{"bytes=0-99", http.StatusPartialContent, 0, 100},
		{"bytes=1048570-1048600", http.StatusPartialContent, 1048570, 1048601},
		{"bytes=-50", http.StatusPartialContent, int64(size) - 50, int64(size)},
		{fmt.Sprintf("bytes=%d-", size-3), http.StatusPartialContent, int64(size) - 3, int64(size)},
	}
	for _, rg := range ranges {
		rc, blob, err := s.Open(context.Background(), "seek")
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/file", nil)
		if rg.header != "" {
			req.Header.Set("Range", rg.header)
		}
		rec := httptest.NewRecorder()
		http.ServeContent(rec, req, "file", blob.ModTime, rc)
		rc.Close()
		if rec.Code != rg.status || !bytes.Equal(rec.Body.Bytes(), b[rg.from:rg.to]) {
			t.Fatalf("Range %q: status %d, %d bytes; want %d, bytes %d-%d", rg.header, rec.Code, rec.Body.Len(), rg.status, rg.from, rg.to)
		}
	}
}

func testOpenReaderIsStable(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	a, b := content(10, 2*MiB), content(11, 2*MiB)
	for _, change := range []string{"replace", "delete"} {
		put(t, s, "stable", a)
		rc, _, err := s.Open(ctx, "stable")
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 1000)
		if _, err := io.ReadFull(rc, head); err != nil {
			t.Fatal(err)
		}
		if change == "replace" {
			put(t, s, "stable", b)
		} else if err := s.Delete(ctx, "stable"); err != nil {
			t.Fatal(err)
		}
		// A seek makes a network store ask again: it must read the old
		// bytes or fail, never the new blob's.
		if _, err := rc.Seek(MiB, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(rc)
		rc.Close()
		if err == nil && !bytes.Equal(rest, a[MiB:]) {
			t.Fatalf("after a %s the open reader read %d bytes that are not the blob it opened", change, len(rest))
		}
		if !bytes.Equal(head, a[:1000]) {
			t.Fatal("the open reader's first bytes are not the blob's")
		}
	}
}

func testMissingKey(t *testing.T, s parley.BlobStore) {
	wantMissing(t, s, parley.NewID())
	put(t, s, "present", []byte("x"))
	wantMissing(t, s, "presen")
	wantMissing(t, s, "present-")
}

func testDeleteIdempotent(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	put(t, s, "gone", content(12, 5000))
	put(t, s, "kept", content(13, 5000))
	for range 2 {
		if err := s.Delete(ctx, "gone"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		wantMissing(t, s, "gone")
	}
	if err := s.Delete(ctx, "never-stored"); err != nil {
		t.Fatalf("Delete of a key never stored: %v", err)
	}
	wantBlob(t, s, "kept", content(13, 5000))
}

func testListPrefix(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	sizes := map[string]int{"aa-1": 10, "aa-2": 0, "ab-1": 300, "b": 7000, "aa": 1}
	before := time.Now()
	for k, n := range sizes {
		put(t, s, k, content(14, n))
	}
	after := time.Now()
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"aa", "aa-1", "aa-2", "ab-1", "b"}},
		{"a", []string{"aa", "aa-1", "aa-2", "ab-1"}},
		{"aa", []string{"aa", "aa-1", "aa-2"}},
		{"aa-", []string{"aa-1", "aa-2"}},
		{"aa-1", []string{"aa-1"}},
		{"c", nil},
		{"aa-10", nil},
	} {
		got := list(t, s, tc.prefix)
		var keys []string
		for _, b := range got {
			keys = append(keys, b.Key)
			if b.Size != int64(sizes[b.Key]) {
				t.Errorf("List(%q): %s has size %d, want %d", tc.prefix, b.Key, b.Size, sizes[b.Key])
			}
			near(t, b.Key, b.ModTime, before, after)
		}
		if !slices.Equal(keys, tc.want) {
			t.Errorf("List(%q) = %v, want %v", tc.prefix, keys, tc.want)
		}
	}

	// An error from fn stops the walk and comes back as it is.
	errStop := errors.New("enough")
	calls := 0
	err := s.List(ctx, "", func(parley.Blob) error { calls++; return errStop })
	if !errors.Is(err, errStop) || calls != 1 {
		t.Fatalf("List with a failing fn = %v after %d calls, want errStop after 1", err, calls)
	}
	// A prefix no key can start with is refused.
	for _, prefix := range []string{"../", "a/", "A", "a.b"} {
		err := s.List(ctx, prefix, func(parley.Blob) error { return nil })
		if parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("List(%q) = %v, want INVALID_ARGUMENT", prefix, err)
		}
	}
}

func testBadKeys(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, key := range []string{
		"", ".", "..", "../x", "a/b", "a\\b", "/abs", "A", "Key", "a b", "a.b",
		"a\x00", "é", strings.Repeat("a", parley.MaxBlobKey+1),
	} {
		path := filepath.Join(dir, "upload")
		if err := os.WriteFile(path, []byte("bytes"), 0o600); err != nil {
			t.Fatal(err)
		}
		calls := map[string]error{}
		_, _, calls["Put"] = s.Put(ctx, key, strings.NewReader("bytes"))
		calls["PutFile"] = s.PutFile(ctx, key, path)
		var rc io.ReadSeekCloser
		rc, _, calls["Open"] = s.Open(ctx, key)
		if rc != nil {
			rc.Close()
		}
		_, calls["Stat"] = s.Stat(ctx, key)
		calls["Delete"] = s.Delete(ctx, key)
		for name, err := range calls {
			if parley.ErrorCode(err) != parley.CodeInvalidArgument {
				t.Errorf("%s(%q) = %v, want INVALID_ARGUMENT", name, key, err)
			}
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("PutFile(%q) refused the key but moved the file: %v", key, err)
		}
	}
	wantEmpty(t, s)
	// The longest key is a key.
	long := strings.Repeat("z", parley.MaxBlobKey)
	put(t, s, long, []byte("long"))
	wantBlob(t, s, long, []byte("long"))
}

// streamSize is the blob large_streamed moves: larger than any buffer a
// store may keep, so holding it whole shows in the heap.
const streamSize = 64 * MiB

// heapBound is the most the heap may grow while large_streamed moves its
// blob: a part buffer and the HTTP client's, well below the blob.
const heapBound = 24 * MiB

// heapPeak records the largest heap seen.
type heapPeak struct {
	base, peak uint64
}

func (h *heapPeak) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.peak = max(h.peak, m.HeapAlloc)
}

func (h *heapPeak) grew() uint64 { return h.peak - h.base }

// startHeap collects the garbage and records the heap as the baseline.
func startHeap() *heapPeak {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return &heapPeak{base: m.HeapAlloc, peak: m.HeapAlloc}
}

// genReader yields the first left bytes of a stream without holding
// them, sampling the heap at every MiB.
type genReader struct {
	src  *rand.ChaCha8
	left int
	read int
	heap *heapPeak
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), g.left)]
	g.src.Read(p)
	before := g.read / MiB
	g.left -= len(p)
	g.read += len(p)
	if g.read/MiB != before {
		g.heap.sample()
	}
	return len(p), nil
}

// large returns a reader of the blob large_streamed moves.
func large(heap *heapPeak) io.Reader {
	return &genReader{src: stream(15), left: streamSize, heap: heap}
}

// sampleWhile runs f while sampling the heap every few milliseconds from
// the side: for calls that read no reader of ours.
func sampleWhile(heap *heapPeak, f func()) {
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				heap.sample()
			}
		}
	}()
	f()
	close(stop)
	<-stopped
}

// sampler is a sink that hashes what it is given and samples the heap at
// every MiB.
type sampler struct {
	h    io.Writer
	n    int
	heap *heapPeak
}

func (s *sampler) Write(p []byte) (int, error) {
	before := s.n / MiB
	s.n += len(p)
	if s.n/MiB != before {
		s.heap.sample()
	}
	return s.h.Write(p)
}

func testLargeStreamed(t *testing.T, s parley.BlobStore) {
	ctx := context.Background()
	// A low GC target keeps garbage from passing for live memory: the
	// heap then tracks what the store holds.
	defer debug.SetGCPercent(debug.SetGCPercent(10))

	want := sha256.New()
	if _, err := io.Copy(want, large(&heapPeak{})); err != nil {
		t.Fatal(err)
	}
	wantSum := want.Sum(nil)

	heap := startHeap()
	size, sum, err := s.Put(ctx, "large", large(heap))
	if err != nil {
		t.Fatal(err)
	}
	if size != streamSize || !bytes.Equal(sum[:], wantSum) {
		t.Fatalf("Put = %d bytes, sha256 %x; want %d, %x", size, sum, streamSize, wantSum)
	}
	t.Logf("Put of %d MiB: heap grew by %.1f MiB", streamSize/MiB, float64(heap.grew())/MiB)
	if heap.grew() > heapBound {
		t.Errorf("Put of %d MiB: the heap grew by %d MiB, want at most %d", streamSize/MiB, heap.grew()/MiB, heapBound/MiB)
	}

	readBack := func(key string) {
		t.Helper()
		heap := startHeap()
		rc, blob, err := s.Open(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		h := sha256.New()
		if _, err := io.Copy(&sampler{h: h, heap: heap}, rc); err != nil {
			t.Fatal(err)
		}
		if blob.Size != streamSize || !bytes.Equal(h.Sum(nil), wantSum) {
			t.Fatalf("Open(%s) read %d bytes with another sha256", key, blob.Size)
		}
		t.Logf("read of %d MiB: heap grew by %.1f MiB", streamSize/MiB, float64(heap.grew())/MiB)
		if heap.grew() > heapBound {
			t.Errorf("reading %d MiB: the heap grew by %d MiB, want at most %d", streamSize/MiB, heap.grew()/MiB, heapBound/MiB)
		}
	}
	readBack("large")

	// PutFile of a file of the same size.
	path := filepath.Join(t.TempDir(), "upload")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, large(&heapPeak{})); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	heap = startHeap()
	sampleWhile(heap, func() { err = s.PutFile(ctx, "large-file", path) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PutFile of %d MiB: heap grew by %.1f MiB", streamSize/MiB, float64(heap.grew())/MiB)
	if heap.grew() > heapBound {
		t.Errorf("PutFile of %d MiB: the heap grew by %d MiB, want at most %d", streamSize/MiB, heap.grew()/MiB, heapBound/MiB)
	}
	readBack("large-file")
}
