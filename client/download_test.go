package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

// fileServer serves one file at /api/files/f1 as the API does (ranges,
// the SHA-256 as ETag), cutting the connection of the first cut requests
// after half the bytes they were to send; it records each request's Range
// and If-Range.
type fileServer struct {
	data []byte
	etag string
	mu   sync.Mutex
	cut  int
	seen []string
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/files/f1" || r.Header.Get("Authorization") != "Bearer tok" {
		wire.WriteProblem(w, parley.CodeNotFound, "no such file", "")
		return
	}
	s.mu.Lock()
	s.seen = append(s.seen, r.Header.Get("Range")+"|"+r.Header.Get("If-Range"))
	cut := s.cut > 0
	s.cut--
	s.mu.Unlock()
	w.Header().Set("ETag", s.etag)
	if cut {
		from := 0
		if rg := r.Header.Get("Range"); rg != "" && r.Header.Get("If-Range") == s.etag {
			from, _ = strconv.Atoi(rg[len("bytes=") : len(rg)-1])
			w.Header().Set("Content-Range", "bytes "+strconv.Itoa(from)+"-"+strconv.Itoa(len(s.data)-1)+"/"+strconv.Itoa(len(s.data)))
			w.Header().Set("Content-Length", strconv.Itoa(len(s.data)-from))
			w.WriteHeader(206)
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(s.data)))
		}
		w.Write(s.data[from : from+(len(s.data)-from)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	wire.ServeContent(w, r, time.Time{}, bytes.NewReader(s.data), "")
}

// TestDownloadResumes: a download cut twice resumes with Range and
// If-Range from the bytes it has and ends with the file, checked against
// its SHA-256; a partial file left with another ETag is fetched whole
// again; a refusal is the problem's code, at once.
func TestDownloadResumes(t *testing.T) {
	data := make([]byte, 3<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	fs := &fileServer{data: data, etag: etag, cut: 2}
	srv := httptest.NewServer(fs)
	t.Cleanup(srv.Close)
	acct := &client.Account{Server: srv.URL, Token: "tok"}
	path := filepath.Join(t.TempDir(), "out.bin")
	ctx := context.Background()

	if err := acct.Download(ctx, "f1", path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes (%v), want the file's %d", len(got), err, len(data))
	}
	half := len(data) / 2
	want := []string{"|", "bytes=" + strconv.Itoa(half) + "-|" + etag, "bytes=" + strconv.Itoa(half+(len(data)-half)/2) + "-|" + etag}
	if len(fs.seen) != 3 || fs.seen[0] != want[0] || fs.seen[1] != want[1] || fs.seen[2] != want[2] {
		t.Errorf("requests %q, want %q", fs.seen, want)
	}
	if _, err := os.Stat(path + ".part"); !os.IsNotExist(err) {
		t.Errorf("the partial file is still there: %v", err)
	}

	// A partial file of another file (another ETag): fetched whole.
	fs.seen = nil
	os.WriteFile(path+".part", []byte("something else"), 0o600)
	os.WriteFile(path+".part.etag", []byte(`"`+hex.EncodeToString(make([]byte, 32))+`"`), 0o600)
	if err := acct.Download(ctx, "f1", path); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) || len(fs.seen) != 1 {
		t.Errorf("after a stale partial file: %d bytes in %d requests", len(got), len(fs.seen))
	}

	fs.seen = nil
	if err := acct.Download(ctx, "f2", path+"2"); parley.ErrorCode(err) != parley.CodeNotFound || len(fs.seen) != 0 {
		t.Errorf("a missing file: %v after %d requests, want NOT_FOUND at once", err, len(fs.seen))
	}
}
