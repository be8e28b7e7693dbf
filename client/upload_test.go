package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/blobdir"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/upload"
)

// uploadServer is the HTTP API with uploads over a real store and blob
// directory, reached through a proxy that can cut connections.
type uploadServer struct {
	URL   string // through the proxy
	blobs *blobdir.Dir
	proxy *cutProxy
}

func newUploadServer(t *testing.T, policy string) *uploadServer {
	t.Helper()
	s := newStore(t)
	cfg, _, err := config.Parse([]byte(policy + "\nrate_limits: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blobs, err := blobdir.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	svc := app.New(app.Options{Store: s, Blobs: blobs, Config: func() *config.Config { return cfg }})
	up, err := upload.New(upload.Options{Service: svc, Dir: filepath.Join(dir, "uploads")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Deps{App: svc, Store: s, Uploads: up}))
	t.Cleanup(srv.Close)
	p := newCutProxy(t, srv.Listener.Addr().String())
	return &uploadServer{URL: "http://" + p.addr, blobs: blobs, proxy: p}
}

// cutProxy forwards TCP connections; armed with cutAfter, it closes the
// connection that carries that many bytes upstream, once.
type cutProxy struct {
	addr     string
	cutAfter atomic.Int64 // 0: never
	cuts     atomic.Int64
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close() // kept-alive ones would wait for their client
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { p.pipe(c, upstream) })
		}
	})
	return p
}

func (p *cutProxy) pipe(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { io.Copy(c, u); c.Close() }()
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if limit := p.cutAfter.Load(); limit > 0 && sent+int64(n) >= limit && p.cutAfter.CompareAndSwap(limit, 0) {
				u.Write(buf[:limit-sent])
				p.cuts.Add(1)
				return // both ends closed: the client gets no answer
			}
			sent += int64(n)
			if _, err := u.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *uploadServer) account(t *testing.T, user string) *client.Account {
	t.Helper()
	tok, err := client.Login(ctxT(t), nil, s.URL, parley.LoginRequest{Login: user, Password: "password-" + user, DeviceID: "d1", InstallID: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	// No kept-alive connections: each request is a new one through the
	// proxy, so a cut hits the request it was armed for.
	return &client.Account{Server: s.URL, Token: tok, HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestUploadResumes: an upload whose PATCH is cut half way (no answer)
// asks where it stands and sends only the rest; the file is the bytes
// sent. One resumed by id, as after a restart of the program, goes on
// from the server's offset too.
func TestUploadResumes(t *testing.T) {
	s := newUploadServer(t, "")
	ana := s.account(t, "ana")
	data := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}

	var progress []int64
	s.proxy.cutAfter.Store(int64(len(data) / 2))
	f, err := ana.Upload(ctxT(t), bytes.NewReader(data), int64(len(data)), "big.bin", client.UploadOptions{
		Progress: func(n int64) { progress = append(progress, n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.proxy.cuts.Load() != 1 {
		t.Fatalf("%d cuts, want 1", s.proxy.cuts.Load())
	}
	if f.Name != "big.bin" || f.Size != int64(len(data)) || f.SHA256 != hexSum(data) || f.MIME != "application/octet-stream" {
		t.Fatalf("file %+v", f)
	}
	// The resume started past 0 (a HEAD found the first half stored).
	if len(progress) < 2 || progress[0] == 0 || progress[0] >= int64(len(data)) {
		t.Fatalf("progress %v: want a resume from the cut's offset, then the end", progress)
	}
	r, _, err := s.blobs.Open(context.Background(), f.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("the stored blob is not the bytes sent")
	}

	// A program that kept the id: the first attempt is cut and abandoned
	// (ctx ends), the second, with the id, sends only what is missing.
	path := filepath.Join(t.TempDir(), "notes.txt")
	text := bytes.Repeat([]byte("a line of notes\n"), 40_000)
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	var id string
	ctx, cancel := context.WithCancel(ctxT(t))
	s.proxy.cutAfter.Store(50_000) // inside the first 100 KB chunk
	_, err = ana.UploadFile(ctx, path, client.UploadOptions{OnCreate: func(v string) { id = v }, ChunkSize: 100_000,
		Progress: func(n int64) {
			if n > 0 && s.proxy.cuts.Load() == 2 {
				cancel() // gone before finishing
			}
		}})
	cancel()
	if err == nil || id == "" {
		t.Fatalf("first attempt: %v, id %q; want it ended by its context", err, id)
	}
	var first int64 = -1
	f, err = ana.UploadFile(ctxT(t), path, client.UploadOptions{ID: id, Progress: func(n int64) {
		if first < 0 {
			first = n
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != id || f.SHA256 != hexSum(text) || f.MIME != "text/plain" || first <= 0 {
		t.Fatalf("resumed by id: %+v, first offset %d", f, first)
	}
}

// TestUploadRefusals: terminal codes end Upload at once.
func TestUploadRefusals(t *testing.T) {
	s := newUploadServer(t, "max_file_size: 1000")
	ana := s.account(t, "ana")
	_, err := ana.Upload(ctxT(t), bytes.NewReader(make([]byte, 2000)), 2000, "big", client.UploadOptions{})
	if parley.ErrorCode(err) != parley.CodeTooLarge {
		t.Errorf("too large: %v, want TOO_LARGE", err)
	}
	_, err = ana.Upload(ctxT(t), bytes.NewReader(nil), 10, "x", client.UploadOptions{ID: parley.NewID()})
	if parley.ErrorCode(err) != parley.CodeNotFound {
		t.Errorf("an unknown id: %v, want NOT_FOUND", err)
	}
	bad := &client.Account{Server: s.URL, Token: "nope"}
	if _, err := bad.Upload(ctxT(t), bytes.NewReader(nil), 0, "x", client.UploadOptions{}); parley.ErrorCode(err) != parley.CodeUnauthenticated {
		t.Errorf("a bad token: %v, want UNAUTHENTICATED", err)
	}
}

// TestMeFiles: Me carries the user's files against the limits, counting
// an upload from its creation, and Fits says which sizes the server would
// take now.
func TestMeFiles(t *testing.T) {
	s := newUploadServer(t, "max_file_size: 1000\nfile_quota: 1500")
	ana := s.account(t, "ana")
	me, err := ana.Me(ctxT(t))
	if err != nil || me.Files == nil || *me.Files != (client.FileAllowance{Quota: 1500, MaxFileSize: 1000}) {
		t.Fatalf("Me before an upload: %+v %v", me.Files, err)
	}
	if _, err := ana.Upload(ctxT(t), bytes.NewReader(make([]byte, 800)), 800, "a.bin", client.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	me, err = ana.Me(ctxT(t))
	want := client.FileAllowance{Files: 1, Bytes: 800, Quota: 1500, MaxFileSize: 1000}
	if err != nil || me.Files == nil || *me.Files != want {
		t.Fatalf("Me after an upload: %+v %v, want %+v", me.Files, err, want)
	}
	for _, c := range []struct {
		size int64
		fits bool
	}{{0, true}, {700, true}, {701, false}, {1001, false}} {
		if got := me.Files.Fits(c.size); got != c.fits {
			t.Errorf("Fits(%d) = %v, want %v", c.size, got, c.fits)
		}
	}
	// The server agrees: 701 bytes are refused, 700 taken.
	for _, size := range []int64{701, 700} {
		_, err := ana.Upload(ctxT(t), bytes.NewReader(make([]byte, size)), size, "b.bin", client.UploadOptions{})
		if (err == nil) != me.Files.Fits(size) {
			t.Errorf("upload of %d bytes (fits: %v): %v", size, me.Files.Fits(size), err)
		}
	}
}
