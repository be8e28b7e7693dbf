package upload_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/upload"
)

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUploadFlow: create, PATCH in chunks, HEAD the offset between them,
// and the last PATCH answers the ready file, measured from its bytes
// (never the client's word), moved into the blob store.
func TestUploadFlow(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) parley.Store) {
		e := newEnv(t, open(t), envOptions{})
		ana := e.user("ana")
		for _, tc := range []struct {
			name       string
			data       []byte
			mime       string
			w, h       int
			chunks     int
			clientType string
		}{
			{"random.bin", randomBytes(300_000, 1), "application/octet-stream", 0, 0, 3, "image/png"},
			{"dot.png", pngBytes(t, 7, 5), "image/png", 7, 5, 2, "text/plain"},
			{"notes.txt", []byte("hello, files\n"), "text/plain", 0, 0, 1, ""},
			{"empty", nil, "text/plain", 0, 0, 0, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := e.create(ana, tc.name, int64(len(tc.data)))
				id := strings.TrimPrefix(path, upload.BasePath+"/")
				var last reply
				step := len(tc.data)/max(tc.chunks, 1) + 1
				for off := 0; off < len(tc.data); off += step {
					if off > 0 {
						if got := e.do("HEAD", path, ana, nil).want(http.StatusOK).offset(); got != int64(off) {
							t.Fatalf("HEAD offset %d, want %d", got, off)
						}
					}
					end := min(off+step, len(tc.data))
					last = e.patch(ana, path, int64(off), tc.data[off:end])
					if end < len(tc.data) {
						last.want(http.StatusNoContent)
						if last.offset() != int64(end) {
							t.Fatalf("PATCH offset %d, want %d", last.offset(), end)
						}
					}
				}
				if len(tc.data) == 0 {
					last = e.patch(ana, path, 0, nil) // created empty: already ready
				}
				f := last.want(http.StatusOK).file()
				if f.ID != id || f.Name != tc.name || f.Size != int64(len(tc.data)) || f.MIME != tc.mime || f.SHA256 != sum(tc.data) || f.Width != tc.w || f.Height != tc.h {
					t.Fatalf("finished file %+v; want %s %d bytes %s %s %dx%d", f, tc.name, len(tc.data), tc.mime, sum(tc.data), tc.w, tc.h)
				}
				if got := e.blob(id); !bytes.Equal(got, tc.data) {
					t.Fatalf("blob holds %d bytes, want the %d uploaded", len(got), len(tc.data))
				}
				stored, err := e.store.File(context.Background(), parley.Principal{User: "ana"}, id)
				if err != nil || stored.State != parley.FileReady || stored.SHA256 != f.SHA256 {
					t.Fatalf("store: %+v, %v", stored, err)
				}
				// Asking again (a lost reply) answers the same.
				h := e.do("HEAD", path, ana, nil).want(http.StatusOK)
				if h.offset() != int64(len(tc.data)) || h.header.Get("Upload-Length") != strconv.Itoa(len(tc.data)) {
					t.Fatalf("HEAD of a finished upload: %v", h.header)
				}
				if again := e.patch(ana, path, int64(len(tc.data)), nil).want(http.StatusOK).file(); again != f {
					t.Fatalf("PATCH of a finished upload: %+v, want %+v", again, f)
				}
				if s := e.staged(); len(s) != 0 {
					t.Fatalf("staging keeps %v after the finish", s)
				}
			})
		}
	})
}

// TestUploadRefused: each refusal is problem+json with its code, and
// stores nothing: no staged bytes, no quota taken, the offset unchanged.
func TestUploadRefused(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) parley.Store) {
		e := newEnv(t, open(t), envOptions{config: "max_file_size: 1000\nfile_quota: 1500\n"})
		ana, ben := e.user("ana"), e.user("ben")
		const ct, oct = "Content-Type", "application/offset+octet-stream"

		// Creation.
		e.do("POST", "/api/uploads", "", nil, "Upload-Length", "10", "Upload-Metadata", meta("a")).want(http.StatusUnauthorized, parley.CodeUnauthenticated)
		e.do("POST", "/api/uploads", ana, nil, "Upload-Length", "1001", "Upload-Metadata", meta("big")).want(http.StatusRequestEntityTooLarge, parley.CodeTooLarge)
		e.do("POST", "/api/uploads", ana, nil, "Upload-Defer-Length", "1", "Upload-Metadata", meta("d")).want(http.StatusBadRequest, parley.CodeInvalidArgument)
		e.do("POST", "/api/uploads", ana, nil, "Upload-Metadata", meta("no length")).want(http.StatusBadRequest, parley.CodeInvalidArgument)
		e.do("POST", "/api/uploads", ana, nil, "Upload-Length", "10").want(http.StatusBadRequest, parley.CodeInvalidArgument) // no name
		e.do("POST", "/api/uploads", ana, nil, "Upload-Length", "10", "Upload-Metadata", meta("a/b")).want(http.StatusBadRequest, parley.CodeInvalidArgument)
		e.do("POST", "/api/uploads", ana, nil, "Upload-Length", "10", "Upload-Metadata", meta("x"), "Tus-Resumable", "0.2.2").want(http.StatusBadRequest, parley.CodeInvalidArgument)
		if s, u := e.staged(), e.usage("ana"); len(s) != 0 || u.Files != 0 {
			t.Fatalf("refused creations left staged %v, usage %+v", s, u)
		}
		// The quota counts unfinished uploads: 1000 + 600 > 1500.
		path := e.create(ana, "first", 1000)
		e.do("POST", "/api/uploads", ana, nil, "Upload-Length", "600", "Upload-Metadata", meta("second")).want(http.StatusRequestEntityTooLarge, parley.CodeTooLarge)
		if u := e.usage("ana"); u.Files != 1 || u.Bytes != 1000 {
			t.Fatalf("usage after a refusal over quota %+v, want the first file only", u)
		}

		// Someone else's upload is a missing one.
		missing := upload.BasePath + "/" + parley.NewID()
		for _, p := range []string{path, missing, upload.BasePath + "/BAD..ID"} {
			e.do("HEAD", p, ben, nil).want(http.StatusNotFound)
			e.patch(ben, p, 0, []byte("x")).want(http.StatusNotFound, parley.CodeNotFound)
			e.do("DELETE", p, ben, nil).want(http.StatusNotFound, parley.CodeNotFound)
		}
		e.do("HEAD", path, "", nil).want(http.StatusUnauthorized)

		// Bodies: more than declared, of unstated length, at another
		// offset, of another type.
		e.patch(ana, path, 0, make([]byte, 1001)).want(http.StatusRequestEntityTooLarge, parley.CodeTooLarge)
		e.patch(ana, path, 5, []byte("abc")).want(http.StatusConflict, parley.CodeCursorAhead)
		e.do("PATCH", path, ana, []byte("abc"), "Upload-Offset", "0", ct, "application/json").want(http.StatusBadRequest, parley.CodeInvalidArgument)
		req, _ := http.NewRequest("PATCH", e.URL+path, io.MultiReader(strings.NewReader("abc"))) // no length: chunked
		req.Header.Set("Authorization", "Bearer "+ana)
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("Upload-Offset", "0")
		req.Header.Set(ct, oct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(ct) != "application/problem+json" {
			t.Fatalf("chunked PATCH: %d %s", resp.StatusCode, resp.Header.Get(ct))
		}
		if got := e.do("HEAD", path, ana, nil).want(http.StatusOK).offset(); got != 0 {
			t.Fatalf("offset %d after refused PATCHes, want 0", got)
		}

		// A lying Content-Length: the bytes after it are no part of the
		// body (the next request, unparseable), and nothing past the
		// declared size is stored.
		lie(t, e, ana, path, 10, 2000)
		if got := e.do("HEAD", path, ana, nil).want(http.StatusOK).offset(); got != 10 {
			t.Fatalf("offset %d after a PATCH of Content-Length 10 carrying 2000 bytes, want 10", got)
		}
		if st, err := os.Stat(filepath.Join(e.staging, strings.TrimPrefix(path, upload.BasePath+"/"))); err != nil || st.Size() != 10 {
			t.Fatalf("staged %v, %v; want 10 bytes", st, err)
		}

		// A page of another site cannot change an upload (the session
		// cookie would go with its request).
		e.do("PATCH", path, ana, []byte("x"), "Upload-Offset", "10", ct, oct, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site").want(http.StatusForbidden, parley.CodePermissionDenied)

		// Termination frees the quota and the staging.
		e.do("DELETE", path, ana, nil).want(http.StatusNoContent)
		e.do("HEAD", path, ana, nil).want(http.StatusNotFound)
		if s, u := e.staged(), e.usage("ana"); len(s) != 0 || u.Files != 0 {
			t.Fatalf("after DELETE: staged %v, usage %+v", s, u)
		}
	})
}

// lie sends a PATCH whose Content-Length says n but which carries total
// bytes, on a raw connection.
func lie(t *testing.T, e *env, token, path string, n, total int) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: %d\r\n\r\n", path, token, n)
	conn.Write(bytes.Repeat([]byte("A"), total))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PATCH of its stated length: %d", resp.StatusCode)
	}
}

// TestUploadResumeAfterCut: a PATCH cut at half keeps what arrived, and
// the rest completes the file from the offset HEAD gives. The cut is a
// dropped connection, or one left open and silent (a reloaded page): the
// HEAD makes the old PATCH stop reading at once, not after the idle bound.
func TestUploadResumeAfterCut(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) parley.Store) {
		e := newEnv(t, open(t), envOptions{})
		ana := e.user("ana")
		for _, closed := range []bool{true, false} {
			data := randomBytes(2<<20, 7)
			path := e.create(ana, "big.bin", int64(len(data)))
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: %d\r\n\r\n", path, ana, len(data))
			conn.Write(data[:len(data)/2])
			if closed {
				conn.Close()
			} else {
				defer conn.Close()
			}
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			off := e.do("HEAD", path, ana, nil).want(http.StatusOK).offset()
			if off <= 0 || off > int64(len(data)/2) || time.Since(start) > 5*time.Second {
				t.Fatalf("closed %v: HEAD offset %d after %v; want 1..%d at once", closed, off, time.Since(start), len(data)/2)
			}
			f := e.patch(ana, path, off, data[off:]).want(http.StatusOK).file()
			if f.SHA256 != sum(data) || !bytes.Equal(e.blob(f.ID), data) {
				t.Fatalf("closed %v: resumed file %+v does not match the bytes sent", closed, f)
			}
		}
	})
}

// TestUploadIdleBound: a PATCH longer than the body timeout goes on while
// bytes keep coming; one that stops sending for longer is answered 408.
func TestUploadIdleBound(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, open func(t *testing.T) parley.Store) {
		if strings.HasSuffix(t.Name(), "postgres") {
			t.Skip("the bound is the transport's; SQLite shows it")
		}
		e := newEnv(t, open(t), envOptions{bodyTimeout: 400 * time.Millisecond})
		ana := e.user("ana")
		data := randomBytes(20_000, 3)
		path := e.create(ana, "slow.bin", int64(len(data)))
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < len(data); i += 1000 { // 20 pieces, 100ms apart: 2s in all
				pw.Write(data[i : i+1000])
				time.Sleep(100 * time.Millisecond)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("PATCH", e.URL+path, pr)
		req.ContentLength = int64(len(data))
		req.Header.Set("Authorization", "Bearer "+ana)
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("Upload-Offset", "0")
		req.Header.Set("Content-Type", "application/offset+octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a 2s PATCH with 100ms pauses under a 400ms bound: %d", resp.StatusCode)
		}

		path = e.create(ana, "stalled.bin", 100)
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: 100\r\n\r\n", path, ana)
		conn.Write(make([]byte, 10)) // then nothing more
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("a stalled PATCH: %d %s, want 408 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := e.do("HEAD", path, ana, nil).want(http.StatusOK).offset(); got != 10 {
			t.Fatalf("offset %d after a stalled PATCH, want the 10 bytes that came", got)
		}
	})
}

// TestUploadFinishRecovers: a finish that stops after the bytes moved into
// the blob store (the upload.after_blob fault point) leaves the upload
// unfinished; the next HEAD finishes it from the blob, and the file is
// what was sent.
func TestUploadFinishRecovers(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) parley.Store) {
		if strings.HasSuffix(t.Name(), "postgres") {
			t.Skip("fault points are per process; SQLite runs it alone") // the other subtest runs in parallel
		}
		e := newEnv(t, open(t), envOptions{})
		ana := e.user("ana")
		data := randomBytes(70_000, 9)
		path := e.create(ana, "f.bin", int64(len(data)))
		if err := fault.Arm(fault.UploadAfterBlob + "=unavailable@1"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fault.Arm("") })
		e.patch(ana, path, 0, data).want(http.StatusServiceUnavailable, parley.CodeUnavailable)
		id := strings.TrimPrefix(path, upload.BasePath+"/")
		if f, _ := e.store.File(context.Background(), parley.Principal{User: "ana"}, id); f.State != parley.FileUploading {
			t.Fatalf("after the fault the file is %q, want uploading", f.State)
		}
		h := e.do("HEAD", path, ana, nil).want(http.StatusOK)
		if h.offset() != int64(len(data)) {
			t.Fatalf("HEAD offset %d", h.offset())
		}
		f, err := e.store.File(context.Background(), parley.Principal{User: "ana"}, id)
		if err != nil || f.State != parley.FileReady || f.SHA256 != sum(data) {
			t.Fatalf("after HEAD: %+v %v", f, err)
		}
	})
}

// TestSweep: staged uploads whose row is gone, or untouched past the
// expiry, are removed; a live one stays.
func TestSweep(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) parley.Store) {
		e := newEnv(t, open(t), envOptions{})
		ana := e.user("ana")
		live := e.create(ana, "live", 100)
		gone := e.create(ana, "gone", 100)
		e.patch(ana, live, 0, []byte("hello")).want(http.StatusNoContent)
		goneID := strings.TrimPrefix(gone, upload.BasePath+"/")
		far := time.Now().Add(time.Hour)
		if ok, err := e.store.DeleteFile(context.Background(), goneID, parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 1}); !ok || err != nil {
			t.Fatalf("delete row: %v %v", ok, err)
		}
		n, err := e.h.Sweep(context.Background(), time.Now())
		if err != nil || n != 1 {
			t.Fatalf("sweep: %d, %v; want 1", n, err)
		}
		for _, name := range e.staged() {
			if !strings.HasPrefix(name, strings.TrimPrefix(live, upload.BasePath+"/")) {
				t.Fatalf("staged after the sweep: %v; want the live upload's files only", e.staged())
			}
		}
		if n, _ := e.h.Sweep(context.Background(), time.Now().Add(upload.DefaultExpiry+time.Minute)); n != 1 || len(e.staged()) != 0 {
			t.Fatalf("sweep past the expiry removed %d, left %v", n, e.staged())
		}
		e.do("HEAD", live, ana, nil).want(http.StatusNotFound)
	})
}

// TestHashStateRecovers: the SHA-256 kept while staging is right however
// its saved state was left between two PATCHes (lost, behind the bytes
// after a crash between the write and the save, ahead of them, garbage):
// a state it cannot trust is rebuilt from the staged bytes.
func TestHashStateRecovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		state func(path string) error
	}{
		{"kept", func(string) error { return nil }},
		{"lost", func(p string) error { return os.Remove(p) }},
		{"behind", func(p string) error { // as if the process died before saving: the state of 0 bytes
			empty, _ := sha256.New().(encoding.BinaryMarshaler).MarshalBinary()
			return os.WriteFile(p, append([]byte("0\n"), empty...), 0o600)
		}},
		{"ahead", func(p string) error {
			b, _ := os.ReadFile(p)
			_, state, _ := strings.Cut(string(b), "\n")
			return os.WriteFile(p, []byte("999999\n"+state), 0o600)
		}},
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("12\nnot a state"), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			e := newEnv(t, s, envOptions{})
			ana := e.user("ana")
			data := randomBytes(5000, 11)
			path := e.create(ana, "h.bin", int64(len(data)))
			e.patch(ana, path, 0, data[:1000]).want(http.StatusNoContent)
			id := strings.TrimPrefix(path, upload.BasePath+"/")
			if err := tc.state(filepath.Join(e.staging, id+".sha256")); err != nil {
				t.Fatal(err)
			}
			if f := e.patch(ana, path, 1000, data[1000:]).want(http.StatusOK).file(); f.SHA256 != sum(data) {
				t.Fatalf("sha256 %s, want %s", f.SHA256, sum(data))
			}
		})
	}
}

// TestUploadRateLimited: the tus requests count in the upload bucket.
func TestUploadRateLimited(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s, envOptions{rateLimits: "{upload: {limit: 2, window: 1m}}"})
	ana := e.user("ana")
	path := e.create(ana, "a", 10)
	e.do("HEAD", path, ana, nil).want(http.StatusOK)
	e.patch(ana, path, 0, []byte("x")).want(http.StatusTooManyRequests, parley.CodeRateLimited)
}
