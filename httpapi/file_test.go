package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
)

// fileServer starts a server with a blob directory under the test's
// temporary directory.
func fileServer(t *testing.T, store parley.Store) (*server, *blobdir.Dir) {
	t.Helper()
	blobs, err := blobdir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return start(t, store, serverOptions{blobs: blobs}), blobs
}

// putFile stores a ready file of user's as an upload would (the row,
// the bytes, the finish), with mime as the sniffed type.
func putFile(t *testing.T, s *server, blobs parley.BlobStore, user, name, mime string, data []byte) parley.File {
	t.Helper()
	ctx, p := context.Background(), parley.Principal{User: user}
	f, err := s.store.CreateUpload(ctx, p, parley.NewUpload{Name: name, Size: int64(len(data)), MaxSize: 1 << 30, Quota: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := blobs.Put(ctx, f.ID, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	f, err = s.store.FinishUpload(ctx, p, f.ID, parley.FileMeta{MIME: mime, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFileAccess: GET /api/files/{id} answers the owner, and a reader
// whose periods hold a message that attaches the file, not recalled: a
// former member reads the files of their period only; everyone else gets
// the answer of a missing file, and an unfinished upload is NOT_FOUND
// even to its owner.
func TestFileAccess(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s, blobs := fileServer(t, open(t, parley.Options{}))
		ana, ben, cy, dan := s.user("ana", parley.RoleUser), s.user("ben", parley.RoleUser), s.user("cy", parley.RoleUser), s.user("dan", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "title": "G", "members": []string{"ben", "dan"}}).want(201)
		f1 := putFile(t, s, blobs, "ana", "one.txt", "text/plain", []byte("file one"))
		s.do("POST", "/api/convs/g/messages", ana, map[string]any{"body": "one", "attachments": []string{f1.ID}}, "Idempotency-Key", "k1").want(201)
		s.do("DELETE", "/api/convs/g/members/dan", ana, nil).want(200)
		f2 := putFile(t, s, blobs, "ana", "two.txt", "text/plain", []byte("file two"))
		m2 := s.do("POST", "/api/convs/g/messages", ana, map[string]any{"body": "two", "attachments": []string{f2.ID}}, "Idempotency-Key", "k2").want(201).frame()
		up, err := s.store.CreateUpload(context.Background(), parley.Principal{User: "ana"}, parley.NewUpload{Name: "u.bin", Size: 5, MaxSize: 100, Quota: 100})
		if err != nil {
			t.Fatal(err)
		}
		missing := s.do("GET", "/api/files/no-such-file", ana, nil).want(404, parley.CodeNotFound).problem()

		reads := func(what, token string, f parley.File, body string) {
			t.Helper()
			r := s.do("GET", "/api/files/"+f.ID, token, nil)
			if r.status != 200 || string(r.body) != body {
				t.Errorf("%s: %d %s, want 200 %q", what, r.status, r, body)
			}
		}
		refused := func(what, token, id string) {
			t.Helper()
			if p := s.do("GET", "/api/files/"+id, token, nil).want(404, parley.CodeNotFound).problem(); p.Detail != missing.Detail {
				t.Errorf("%s: %+v, want the answer of a missing file %+v", what, p, missing)
			}
		}
		reads("the owner", ana, f1, "file one")
		reads("a member", ben, f1, "file one")
		reads("a member, the later file", ben, f2, "file two")
		reads("a former member, a file of their period", dan, f1, "file one")
		refused("a former member, a file after their period", dan, f2.ID)
		refused("a non-member", cy, f1.ID)
		s.do("POST", "/api/convs/g/recall", ana, map[string]int64{"target": *m2.Seq}, "Idempotency-Key", "r2").want(201)
		refused("a member, after the recall", ben, f2.ID)
		reads("the owner, after the recall", ana, f2, "file two")
		refused("another user's upload", ben, up.ID)
		s.do("GET", "/api/files/"+up.ID, ana, nil).want(404, parley.CodeNotFound)
		s.do("GET", "/api/files/"+up.ID+"/thumb", ana, nil).want(404, parley.CodeNotFound)
		s.do("GET", "/api/files/Not%20A%20Key", ana, nil).want(400, parley.CodeInvalidArgument)
		s.do("GET", "/api/files/"+f1.ID, "", nil).want(401, parley.CodeUnauthenticated)
		refused("a non-member's thumbnail", cy, f1.ID+"/thumb")
	})
}

// TestFileRanges: a download cut and resumed with Range and If-Range (as
// curl -C - does) and one fetched in parallel ranges give the file's
// bytes; a stale If-Range gives the whole file; a conditional GET with
// the ETag is 304; a range past the end is a 416 problem.
func TestFileRanges(t *testing.T) {
	s, blobs := fileServer(t, openSQLite(t))
	ana := s.user("ana", parley.RoleUser)
	data := make([]byte, 1<<20+123)
	rand.Read(data)
	want := sha256.Sum256(data)
	f := putFile(t, s, blobs, "ana", "blob.bin", "application/octet-stream", data)
	etag := `"` + f.SHA256 + `"`
	path := "/api/files/" + f.ID

	full := s.do("GET", path, ana, nil).want(200)
	if full.header.Get("ETag") != etag || full.header.Get("Last-Modified") == "" || full.header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("headers %v: want ETag %s, Last-Modified and Accept-Ranges", full.header, etag)
	}
	cut := full.body[:400_000]
	rest := s.do("GET", path, ana, nil, "Range", fmt.Sprintf("bytes=%d-", len(cut)), "If-Range", etag).want(206)
	if got := sha256.Sum256(append(append([]byte{}, cut...), rest.body...)); got != want {
		t.Errorf("resumed download: sha256 %x, want %x", got, want)
	}

	const parts = 5
	out := make([]byte, len(data))
	var wg sync.WaitGroup
	step := len(data)/parts + 1
	for i := range parts {
		wg.Go(func() {
			from, to := i*step, min((i+1)*step, len(data))-1
			req, _ := http.NewRequest("GET", s.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+ana)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, to))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			if resp.StatusCode != 206 || b.Len() != to-from+1 {
				t.Errorf("range %d-%d: %d, %d bytes", from, to, resp.StatusCode, b.Len())
				return
			}
			copy(out[from:], b.Bytes())
		})
	}
	wg.Wait()
	if got := sha256.Sum256(out); got != want {
		t.Errorf("parallel ranges: sha256 %x, want %x", got, want)
	}

	stale := s.do("GET", path, ana, nil, "Range", "bytes=10-", "If-Range", `"`+strings.Repeat("0", 64)+`"`).want(200)
	if !bytes.Equal(stale.body, data) {
		t.Errorf("stale If-Range: %d bytes, want the whole file", len(stale.body))
	}
	s.do("GET", path, ana, nil, "If-None-Match", etag).want(304)
	r := s.do("GET", path, ana, nil, "Range", fmt.Sprintf("bytes=%d-", len(data)))
	p := r.want(416).problem()
	if ct, cr := r.header.Get("Content-Type"), r.header.Get("Content-Range"); ct != "application/problem+json" || cr != fmt.Sprintf("bytes */%d", len(data)) ||
		p.Code != parley.CodeInvalidArgument || p.Status != 416 || r.header.Get("Content-Disposition") != "" {
		t.Errorf("416: %s %q %q %v, want a problem with INVALID_ARGUMENT and Content-Range", ct, cr, r.header.Get("Content-Disposition"), p)
	}
}

// TestFileHeaders: a file is served with its sniffed type, nosniff, a
// sandboxing CSP and private caching; raster images inline, everything
// else (SVG and HTML included) as an attachment, named by RFC 6266 with an
// ASCII fallback. A thumbnail is an inline JPEG; a file without one is
// NOT_FOUND.
func TestFileHeaders(t *testing.T) {
	s, blobs := fileServer(t, openSQLite(t))
	ana := s.user("ana", parley.RoleUser)
	for _, tc := range []struct {
		name, mime, disposition string
	}{
		{"a.svg", "image/svg+xml", `attachment; filename="a.svg"; filename*=UTF-8''a.svg`},
		{"page.html", "text/html;charset=utf-8", `attachment; filename="page.html"; filename*=UTF-8''page.html`},
		{"photo.png", "image/png", `inline; filename="photo.png"; filename*=UTF-8''photo.png`},
		{"p.jpg", "image/jpeg", `inline; filename="p.jpg"; filename*=UTF-8''p.jpg`},
		{"g.gif", "image/gif", "inline; "},
		{"w.webp", "image/webp", "inline; "},
		{`résumé "final" 100%.pdf`, "application/pdf", `attachment; filename="r_sum_ _final_ 100_.pdf"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22final%22%20100%25.pdf`},
	} {
		f := putFile(t, s, blobs, "ana", tc.name, tc.mime, []byte("<svg onload=alert(1)>"))
		r := s.do("GET", "/api/files/"+f.ID, ana, nil).want(200)
		h := r.header
		if got := h.Get("Content-Disposition"); !strings.HasPrefix(got, tc.disposition) {
			t.Errorf("%s: Content-Disposition %q, want %q", tc.name, got, tc.disposition)
		}
		if h.Get("Content-Type") != tc.mime || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Content-Security-Policy") != "default-src 'none'; sandbox" || h.Get("Cache-Control") != "private, no-cache" {
			t.Errorf("%s: headers %v", tc.name, h)
		}
		s.do("GET", "/api/files/"+f.ID+"/thumb", ana, nil).want(404, parley.CodeNotFound)
	}
	f := putFile(t, s, blobs, "ana", "pic.png", "image/png", []byte("png"))
	if _, _, err := blobs.Put(context.Background(), parley.ThumbKey(f.ID), strings.NewReader("jpeg bytes")); err != nil {
		t.Fatal(err)
	}
	r := s.do("GET", "/api/files/"+f.ID+"/thumb", ana, nil).want(200)
	if h := r.header; string(r.body) != "jpeg bytes" || h.Get("Content-Type") != "image/jpeg" || h.Get("Content-Disposition") != "inline" ||
		h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Security-Policy") != "default-src 'none'; sandbox" {
		t.Errorf("thumbnail: %s %v", r, h)
	}
}

// TestFileLost: a ready file whose blob is gone is an internal fault, not
// the client's: UNAVAILABLE with a request id that is in the log. Without
// a blob store the routes answer UNAVAILABLE.
func TestFileLost(t *testing.T) {
	store := openSQLite(t)
	s, blobs := fileServer(t, store)
	ana := s.user("ana", parley.RoleUser)
	f := putFile(t, s, blobs, "ana", "gone.txt", "text/plain", []byte("soon gone"))
	if err := blobs.Delete(context.Background(), f.ID); err != nil {
		t.Fatal(err)
	}
	p := s.do("GET", "/api/files/"+f.ID, ana, nil).want(503, parley.CodeUnavailable).problem()
	if p.RequestID == "" || !strings.Contains(s.logs.String(), p.RequestID) || !strings.Contains(s.logs.String(), "lost file "+f.ID) {
		t.Errorf("problem %+v; log:\n%s", p, s.logs)
	}
	bare := start(t, store, serverOptions{})
	bare.do("GET", "/api/files/"+f.ID, bare.login("ana", "d2", "i2"), nil).want(503, parley.CodeUnavailable)
	if p.Detail != parley.InternalMessage {
		t.Errorf("detail %q", p.Detail)
	}
}

// TestFileUsage: GET /api/me carries the caller's files (uploading and
// ready) with the quota and file size limit in force, and the operators'
// user listing each user's files against the quota; a server that stores
// no files leaves files out of /api/me.
func TestFileUsage(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		blobs, err := blobdir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s := start(t, open(t, parley.Options{}), serverOptions{blobs: blobs, config: "file_quota: 5000\nmax_file_size: 1000\nrate_limits: {}"})
		ana, ben := s.user("ana", parley.RoleAdmin), s.user("ben", parley.RoleUser)
		type files struct {
			Files, Bytes, Quota int64
			MaxFileSize         int64 `json:"max_file_size"`
		}
		me := func(token string, want files) {
			t.Helper()
			var got struct{ Files *files }
			s.do("GET", "/api/me", token, nil).want(200).decode(&got)
			if got.Files == nil || *got.Files != want {
				t.Errorf("GET /api/me files: %+v, want %+v", got.Files, want)
			}
		}
		listed := func(want map[string]files) {
			t.Helper()
			var page struct {
				Items []struct {
					ID    string
					Files files
				}
			}
			s.do("GET", "/api/admin/users", ana, nil).want(200).decode(&page)
			got := map[string]files{}
			for _, u := range page.Items {
				got[u.ID] = u.Files
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("admin users' files: %v, want %v", got, want)
			}
		}
		me(ben, files{Quota: 5000, MaxFileSize: 1000})
		listed(map[string]files{"ana": {Quota: 5000}, "ben": {Quota: 5000}})
		putFile(t, s, blobs, "ben", "a.txt", "text/plain", []byte("twelve bytes"))
		if _, err := s.store.CreateUpload(context.Background(), parley.Principal{User: "ben"}, parley.NewUpload{Name: "u.bin", Size: 700, MaxSize: 1000, Quota: 5000}); err != nil {
			t.Fatal(err)
		}
		me(ben, files{Files: 2, Bytes: 712, Quota: 5000, MaxFileSize: 1000})
		me(ana, files{Quota: 5000, MaxFileSize: 1000})
		listed(map[string]files{"ana": {Quota: 5000}, "ben": {Files: 2, Bytes: 712, Quota: 5000}})

		// The PATCH answers the account without the files; a server with
		// no blob store has no files to show.
		var patched map[string]any
		s.do("PATCH", "/api/me", ben, map[string]any{"display_name": "Ben"}).want(200).decode(&patched)
		if _, has := patched["files"]; has {
			t.Errorf("PATCH /api/me: %v, want no files", patched)
		}
		bare := start(t, s.store, serverOptions{})
		var got map[string]any
		bare.do("GET", "/api/me", bare.user("cy", parley.RoleUser), nil).want(200).decode(&got)
		if _, has := got["files"]; has {
			t.Errorf("GET /api/me without a blob store: %v, want no files", got)
		}
	})
}
