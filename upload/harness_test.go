package upload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/blobdir"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/upload"
	"github.com/parleychat/parley/wire"
)

// backends runs fn on SQLite and, when PARLEY_TEST_POSTGRES is set, on
// PostgreSQL (skipped with instructions otherwise), each a fresh store.
func backends(t *testing.T, fn func(t *testing.T, open func(t *testing.T) parley.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, func(t *testing.T) parley.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.Server(t)
		fn(t, func(t *testing.T) parley.Store {
			s, err := postgres.Open(context.Background(), pgtest.DSN(t), parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// env is the HTTP API with the uploads mounted, on a real listener, over
// a real store and blob directory, behind the body deadline serve uses.
type env struct {
	t       testing.TB
	URL     string
	store   parley.Store
	blobs   *blobdir.Dir
	staging string
	h       *upload.Handler
	logs    *bytes.Buffer
}

type envOptions struct {
	config      string        // the policy file's text ("": defaults)
	rateLimits  string        // its rate_limits value ("": {}, every limit off)
	bodyTimeout time.Duration // --body-timeout, and the uploads' idle bound (0: 30s)
}

func newEnv(t testing.TB, store parley.Store, o envOptions) *env {
	t.Helper()
	if o.rateLimits == "" {
		o.rateLimits = "{}"
	}
	cfg, warnings, err := config.Parse([]byte(o.config + "\nrate_limits: " + o.rateLimits + "\n"))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("config: %v %v", err, warnings)
	}
	dir := t.TempDir()
	blobs, err := blobdir.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: store, blobs: blobs, staging: filepath.Join(dir, "uploads"), logs: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	current := func() *config.Config { return cfg }
	svc := app.New(app.Options{Store: store, Config: current, Blobs: blobs, Log: log})
	if o.bodyTimeout == 0 {
		o.bodyTimeout = 30 * time.Second
	}
	e.h, err = upload.New(upload.Options{Service: svc, Dir: e.staging, IdleTimeout: o.bodyTimeout, Log: log,
		MaxFileSize: func() int64 { return cfg.MaxFileSize() }})
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.NewHandler(httpapi.Deps{App: svc, Store: store, Gateway: http.NotFoundHandler(), Log: log, Config: current, Uploads: e.h})
	srv := httptest.NewServer(middleware.BodyDeadline(func() time.Duration { return o.bodyTimeout })(api))
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	return e
}

// user creates an account and returns a token of it.
func (e *env) user(id string) string {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.store.CreateUser(ctx, parley.NewUser{ID: id, Password: "password-" + id, Role: parley.RoleUser}); err != nil {
		e.t.Fatal(err)
	}
	s, err := e.store.Login(ctx, parley.LoginRequest{Login: id, Password: "password-" + id, DeviceID: "d1", InstallID: "i1"})
	if err != nil {
		e.t.Fatal(err)
	}
	return s.Token
}

// reply is one HTTP answer.
type reply struct {
	t      testing.TB
	what   string
	status int
	header http.Header
	body   []byte
}

// do sends one tus request: hdr are header name/value pairs; Tus-Resumable
// is added.
func (e *env) do(method, path, token string, body []byte, hdr ...string) reply {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{t: e.t, what: method + " " + path, status: resp.StatusCode, header: resp.Header, body: b}
}

// want checks the status and, for an error, that the body is problem+json
// with code (HEAD answers have no body: only the type is checked).
func (r reply) want(status int, code ...parley.Code) reply {
	r.t.Helper()
	if r.status != status {
		r.t.Fatalf("%s: status %d, want %d; body %s", r.what, r.status, status, r.body)
	}
	if status >= 400 {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			r.t.Fatalf("%s: Content-Type %q, want application/problem+json; body %s", r.what, ct, r.body)
		}
	}
	if len(code) > 0 && !strings.HasPrefix(r.what, "HEAD") {
		var p wire.Problem
		if err := json.Unmarshal(r.body, &p); err != nil {
			r.t.Fatalf("%s: problem body %s: %v", r.what, r.body, err)
		}
		if p.Code != code[0] || p.Status != status {
			r.t.Fatalf("%s: problem %+v, want code %s status %d", r.what, p, code[0], status)
		}
	}
	return r
}

func (r reply) offset() int64 {
	r.t.Helper()
	n, err := strconv.ParseInt(r.header.Get("Upload-Offset"), 10, 64)
	if err != nil {
		r.t.Fatalf("%s: Upload-Offset %q", r.what, r.header.Get("Upload-Offset"))
	}
	return n
}

func (r reply) file() wire.Attachment {
	r.t.Helper()
	var a wire.Attachment
	if err := json.Unmarshal(r.body, &a); err != nil {
		r.t.Fatalf("%s: body %s: %v", r.what, r.body, err)
	}
	return a
}

// meta is an Upload-Metadata header naming the file.
func meta(name string) string {
	return "filename " + base64.StdEncoding.EncodeToString([]byte(name))
}

// create starts an upload of size bytes and returns its path
// (/api/uploads/ID).
func (e *env) create(token, name string, size int64) string {
	e.t.Helper()
	r := e.do("POST", "/api/uploads", token, nil, "Upload-Length", strconv.FormatInt(size, 10), "Upload-Metadata", meta(name)).want(http.StatusCreated)
	loc := r.header.Get("Location")
	if !strings.HasPrefix(loc, upload.BasePath+"/") {
		e.t.Fatalf("Location %q, want %s/ID", loc, upload.BasePath)
	}
	return loc
}

// patch sends data at offset.
func (e *env) patch(token, path string, offset int64, data []byte) reply {
	e.t.Helper()
	return e.do("PATCH", path, token, data, "Upload-Offset", strconv.FormatInt(offset, 10), "Content-Type", "application/offset+octet-stream")
}

// staged lists the staging directory.
func (e *env) staged() []string {
	e.t.Helper()
	entries, err := os.ReadDir(e.staging)
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

// blob reads the stored blob of id.
func (e *env) blob(id string) []byte {
	e.t.Helper()
	r, _, err := e.blobs.Open(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// usage is what user's files take against the quota.
func (e *env) usage(user string) parley.FileUsage {
	e.t.Helper()
	u, err := e.store.FileUsage(context.Background(), parley.Principal{User: user})
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}
