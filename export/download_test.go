package export

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/wire"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testKeys(t *testing.T) map[string][]byte {
	t.Helper()
	return map[string][]byte{
		"k1": bytes.Repeat([]byte{1}, 32),
		"k2": bytes.Repeat([]byte{2}, 32),
	}
}

type dl struct {
	t       *testing.T
	url     string
	ring    *Keyring
	now     atomic.Pointer[time.Time]
	logs    *syncBuffer
	metrics *metrics.Metrics
}

type resp struct {
	status int
	h      http.Header
	body   []byte
}

func (d *dl) do(method, path string, hdr ...string) resp {
	d.t.Helper()
	req, err := http.NewRequest(method, d.url+path, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, b}
}

func (r resp) problem(t *testing.T) wire.Problem {
	t.Helper()
	var p wire.Problem
	if ct := r.h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("content type %q, want a problem", ct)
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Errorf("problem body %q: %v", r.body, err)
	}
	return p
}

// serveDownloads mounts a Download on a real listener at 127.0.0.1. A
// request with X-Test-Addr gets that client address the way the
// middleware chain would set it.
func serveDownloads(t *testing.T, st parley.Store, dir string, ring *Keyring) *dl {
	t.Helper()
	d := &dl{t: t, ring: ring, logs: &syncBuffer{}, metrics: metrics.New(metrics.Options{})}
	now := time.Now()
	d.now.Store(&now)
	h := &Download{
		Store: st, Dir: dir, Keys: func() *Keyring { return ring }, Metrics: d.metrics,
		Log: slog.New(slog.NewTextHandler(d.logs, nil)), Now: func() time.Time { return *d.now.Load() },
	}
	mux := http.NewServeMux()
	mux.Handle("GET /download/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("X-Test-Addr"); a != "" {
			r = r.WithContext(parley.NewContextWithCaller(r.Context(), parley.Caller{Addr: netip.MustParseAddr(a)}))
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	d.url = srv.URL
	return d
}

// TestDownload: ranges, If-Range and the guards over a real server, then
// every refusal in its order.
func TestDownload(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		w := seed(t, open(t))
		dir := t.TempDir()
		job := w.create(t, w.ana, "k1", "all")
		job = run(t, newWorker(t, w.st, dir, nil), job.ID, isDone)
		file, err := os.ReadFile(ArtifactPath(dir, job.ID))
		if err != nil {
			t.Fatal(err)
		}
		n := len(file)
		ring, err := NewKeyring(testKeys(t), "k2")
		if err != nil {
			t.Fatal(err)
		}
		d := serveDownloads(t, w.st, dir, ring)
		link := ring.Link(job.ID, "ana", time.Now().Add(5*time.Minute))
		etag := `"` + job.SHA256 + `"`

		full := func(t *testing.T, r resp) {
			t.Helper()
			if r.status != http.StatusOK || !bytes.Equal(r.body, file) || r.h.Get("Content-Range") != "" {
				t.Errorf("status %d, %d bytes, Content-Range %q: want 200 with the whole file (%d bytes)", r.status, len(r.body), r.h.Get("Content-Range"), n)
			}
		}
		part := func(from, to int) func(t *testing.T, r resp) {
			return func(t *testing.T, r resp) {
				t.Helper()
				cr := fmt.Sprintf("bytes %d-%d/%d", from, to, n)
				if r.status != http.StatusPartialContent || r.h.Get("Content-Range") != cr || !bytes.Equal(r.body, file[from:to+1]) {
					t.Errorf("status %d, Content-Range %q, %d bytes: want 206 %s", r.status, r.h.Get("Content-Range"), len(r.body), cr)
				}
			}
		}
		unsatisfiable := func(t *testing.T, r resp) {
			t.Helper()
			if cr := fmt.Sprintf("bytes */%d", n); r.status != http.StatusRequestedRangeNotSatisfiable || r.h.Get("Content-Range") != cr {
				t.Errorf("status %d, Content-Range %q: want 416 %s", r.status, r.h.Get("Content-Range"), cr)
			}
			// Go writes its 416 as text; the download answers a problem.
			var p wire.Problem
			if ct := r.h.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(r.body, &p) != nil || p.Code != parley.CodeInvalidArgument || p.Status != 416 {
				t.Errorf("416 as %q: %s, want a problem with INVALID_ARGUMENT", ct, r.body)
			}
		}
		many := make([]string, 9)
		for i := range many {
			many[i] = fmt.Sprintf("%d-%d", i, i)
		}
		for _, tc := range []struct {
			name   string
			method string
			hdr    []string
			check  func(*testing.T, resp)
		}{
			{"full", "GET", nil, full},
			{"range from", "GET", []string{"Range", "bytes=10-"}, part(10, n-1)},
			{"range span", "GET", []string{"Range", "bytes=0-99"}, part(0, 99)},
			{"suffix", "GET", []string{"Range", "bytes=-5"}, part(n-5, n-1)},
			{"suffix longer than the file", "GET", []string{"Range", "bytes=-99999999"}, part(0, n-1)},
			{"end past the file", "GET", []string{"Range", "bytes=5-99999999999999999999999"}, part(5, n-1)},
			{"unit case", "GET", []string{"Range", "Bytes=1-2"}, part(1, 2)},
			{"if-range current", "GET", []string{"Range", "bytes=10-", "If-Range", etag}, part(10, n-1)},
			{"if-range stale", "GET", []string{"Range", "bytes=10-", "If-Range", `"0000"`}, full},
			{"if-range weak", "GET", []string{"Range", "bytes=10-", "If-Range", "W/" + etag}, full},
			{"if-range date", "GET", []string{"Range", "bytes=10-", "If-Range", time.Now().UTC().Format(http.TimeFormat)}, full},
			{"if-range stale unsatisfiable", "GET", []string{"Range", "bytes=-0", "If-Range", `"0000"`}, full},
			{"suffix zero", "GET", []string{"Range", "bytes=-0"}, unsatisfiable},
			{"start at the end", "GET", []string{"Range", fmt.Sprintf("bytes=%d-", n)}, unsatisfiable},
			{"no range satisfiable", "GET", []string{"Range", fmt.Sprintf("bytes=-0,%d-", n+5)}, unsatisfiable},
			{"zero suffix dropped from a set", "GET", []string{"Range", "bytes=-0,3-4"}, part(3, 4)},
			{"unknown unit", "GET", []string{"Range", "items=0-5"}, full},
			{"malformed", "GET", []string{"Range", "bytes=abc"}, full},
			{"first after last", "GET", []string{"Range", "bytes=9-3"}, full},
			{"signed", "GET", []string{"Range", "bytes=+1-3"}, full},
			{"too many ranges", "GET", []string{"Range", "bytes=" + strings.Join(many, ",")}, full},
			{"head ignores range", "HEAD", []string{"Range", "bytes=10-"}, func(t *testing.T, r resp) {
				if r.status != http.StatusOK || r.h.Get("Content-Length") != fmt.Sprint(n) || r.h.Get("Content-Range") != "" || len(r.body) != 0 {
					t.Errorf("HEAD: %d, Content-Length %q, Content-Range %q", r.status, r.h.Get("Content-Length"), r.h.Get("Content-Range"))
				}
			}},
			{"if-none-match", "GET", []string{"If-None-Match", etag}, func(t *testing.T, r resp) {
				if r.status != http.StatusNotModified {
					t.Errorf("status %d, want 304", r.status)
				}
			}},
			{"two ranges", "GET", []string{"Range", "bytes=0-1,4-5"}, func(t *testing.T, r resp) {
				mt, params, err := mime.ParseMediaType(r.h.Get("Content-Type"))
				if r.status != http.StatusPartialContent || err != nil || mt != "multipart/byteranges" {
					t.Fatalf("status %d, type %q", r.status, r.h.Get("Content-Type"))
				}
				mr := multipart.NewReader(bytes.NewReader(r.body), params["boundary"])
				var got []byte
				for {
					p, err := mr.NextPart()
					if err != nil {
						break
					}
					b, _ := io.ReadAll(p)
					got = append(got, b...)
				}
				if want := append(append([]byte{}, file[0:2]...), file[4:6]...); !bytes.Equal(got, want) {
					t.Errorf("parts %x, want %x", got, want)
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := d.do(tc.method, link, tc.hdr...)
				tc.check(t, r)
				if r.status == http.StatusOK || r.status == http.StatusPartialContent {
					want := map[string]string{
						"ETag": etag, "Cache-Control": "private, no-store", "Accept-Ranges": "bytes",
						"X-Content-Type-Options": "nosniff",
						"Content-Disposition":    `attachment; filename="parley-export-` + job.ID + `.jsonl.gz"`,
					}
					if !strings.HasPrefix(r.h.Get("Content-Type"), "multipart/") {
						want["Content-Type"] = "application/gzip"
					}
					for k, v := range want {
						if got := r.h.Get(k); got != v {
							t.Errorf("%s: %q, want %q", k, got, v)
						}
					}
				}
			})
		}

		// Every download is logged with its client address and counted.
		d.do("GET", link, "Range", "bytes=1-2", "X-Test-Addr", "203.0.113.9")
		logs := d.logs.String()
		for _, want := range []string{"job=" + job.ID, "user=ana", "status=206", "bytes=2", `range="bytes=1-2"`, "addr=203.0.113.9", "addr=127.0.0.1:", "status=416"} {
			if !strings.Contains(logs, want) {
				t.Errorf("log lacks %q", want)
			}
		}
		rec := httptest.NewRecorder()
		d.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, want := range []string{`parley_export_downloads_total{code="200"}`, `parley_export_downloads_total{code="206"}`, `parley_export_downloads_total{code="416"}`} {
			if !strings.Contains(rec.Body.String(), want) {
				t.Errorf("metrics lack %s", want)
			}
		}

		// Refusals, in check order.
		denied := func(t *testing.T, r resp, status int, code parley.Code) {
			t.Helper()
			if r.status != status {
				t.Errorf("status %d, want %d (%s)", r.status, status, r.body)
				return
			}
			if p := r.problem(t); p.Code != code || p.Status != status || (status == 403 && p.Detail != "Access denied") {
				t.Errorf("problem %+v, want %s", p, code)
			}
		}
		ctx := context.Background()
		tamper := func(l string) string { // change the last hex digit of sig
			if l[len(l)-1] == '0' {
				return l[:len(l)-1] + "1"
			}
			return l[:len(l)-1] + "0"
		}
		other, _ := NewKeyring(map[string][]byte{"k9": bytes.Repeat([]byte{9}, 32)}, "k9")
		rotated, _ := NewKeyring(testKeys(t), "k1")
		queued := w.create(t, w.ana, "q", "conv:c-small")
		t.Run("tampered", func(t *testing.T) { denied(t, d.do("GET", tamper(link)), 403, parley.CodePermissionDenied) })
		t.Run("other user", func(t *testing.T) {
			denied(t, d.do("GET", strings.Replace(link, "u=ana", "u=ben", 1)), 403, parley.CodePermissionDenied)
		})
		t.Run("signed for another user", func(t *testing.T) {
			denied(t, d.do("GET", ring.Link(job.ID, "ben", time.Now().Add(time.Minute))), 403, parley.CodePermissionDenied)
		})
		t.Run("other job", func(t *testing.T) {
			denied(t, d.do("GET", strings.Replace(link, job.ID, queued.ID, 1)), 403, parley.CodePermissionDenied)
		})
		t.Run("expired", func(t *testing.T) {
			denied(t, d.do("GET", ring.Link(job.ID, "ana", d.now.Load().Add(-time.Second))), 403, parley.CodePermissionDenied) // the handler's clock is frozen
		})
		t.Run("unknown kid", func(t *testing.T) {
			denied(t, d.do("GET", other.Link(job.ID, "ana", time.Now().Add(time.Minute))), 403, parley.CodePermissionDenied)
		})
		t.Run("no signature", func(t *testing.T) { denied(t, d.do("GET", "/download/"+job.ID), 403, parley.CodePermissionDenied) })
		t.Run("rotated key still verifies", func(t *testing.T) {
			full(t, d.do("GET", rotated.Link(job.ID, "ana", time.Now().Add(time.Minute))))
		})
		t.Run("job missing", func(t *testing.T) {
			denied(t, d.do("GET", ring.Link(parley.NewID(), "ana", time.Now().Add(time.Minute))), 410, parley.CodeOriginalExpired)
		})
		t.Run("not ready", func(t *testing.T) {
			denied(t, d.do("GET", ring.Link(queued.ID, "ana", time.Now().Add(time.Minute))), 404, parley.CodeNotFound)
		})
		t.Run("past ExpiresAt", func(t *testing.T) {
			later := job.ExpiresAt.Add(time.Second)
			d.now.Store(&later)
			defer func() { now := time.Now(); d.now.Store(&now) }()
			denied(t, d.do("GET", ring.Link(job.ID, "ana", later.Add(time.Minute))), 410, parley.CodeOriginalExpired)
		})
		t.Run("account disabled", func(t *testing.T) {
			if err := w.st.SetUserDisabled(ctx, "ana", true); err != nil {
				t.Fatal(err)
			}
			denied(t, d.do("GET", link), 403, parley.CodePermissionDenied)
			if err := w.st.SetUserDisabled(ctx, "ana", false); err != nil {
				t.Fatal(err)
			}
			full(t, d.do("GET", link))
		})
		t.Run("artifact missing", func(t *testing.T) {
			j2 := w.create(t, w.ana, "gone", "conv:c-small")
			run(t, newWorker(t, w.st, dir, nil), j2.ID, isDone)
			os.Remove(ArtifactPath(dir, j2.ID))
			denied(t, d.do("GET", ring.Link(j2.ID, "ana", time.Now().Add(time.Minute))), 410, parley.CodeOriginalExpired)
		})
		t.Run("revoked", func(t *testing.T) {
			if _, err := w.st.RevokeExport(ctx, job.ID); err != nil {
				t.Fatal(err)
			}
			denied(t, d.do("GET", link), 410, parley.CodeOriginalExpired)
			// A disabled account is refused before the state is read.
			w.st.SetUserDisabled(ctx, "ana", true)
			denied(t, d.do("GET", link), 403, parley.CodePermissionDenied)
		})
	})
}
