package export

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGuardRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, in string
		size       int64
		want       string
	}{
		{"GET", "bytes=0-5", 100, "bytes=0-5"},
		{"GET", "bytes=10-", 100, "bytes=10-"},
		{"GET", "bytes=-5", 100, "bytes=-5"},
		{"GET", "BYTES=0-5", 100, "bytes=0-5"},
		{"GET", "bytes= 0-5 , 7-9", 100, "bytes=0-5,7-9"},
		{"GET", "bytes=0-5,,", 100, "bytes=0-5"},
		{"HEAD", "bytes=0-5", 100, ""},
		{"POST", "bytes=0-5", 100, ""},
		{"GET", "items=0-5", 100, ""},
		{"GET", "bytes 0-5", 100, ""},
		{"GET", "bytes =0-5", 100, ""},
		{"GET", "bytes=", 100, ""},
		{"GET", "bytes=,", 100, ""},
		{"GET", "bytes=abc", 100, ""},
		{"GET", "bytes=5", 100, ""},
		{"GET", "bytes=-", 100, ""},
		{"GET", "bytes=5-3", 100, ""},
		{"GET", "bytes=+5-9", 100, ""},
		{"GET", "bytes=0x5-9", 100, ""},
		{"GET", "bytes=0-5,9-3", 100, ""},
		{"GET", "bytes=-0", 100, "bytes=100-"},
		{"GET", "bytes=-00", 100, "bytes=100-"},
		{"GET", "bytes=-0,0-1", 100, "bytes=0-1"},
		{"GET", "bytes=100-", 100, "bytes=100-"},
		{"GET", "bytes=100-200,-0", 100, "bytes=100-"},
		{"GET", "bytes=99-", 100, "bytes=99-"},
		{"GET", "bytes=0-99999999999999999999", 100, "bytes=0-"},
		{"GET", "bytes=-99999999999999999999", 100, "bytes=-100"},
		{"GET", "bytes=99999999999999999999-", 100, "bytes=100-"},
		{"GET", "bytes=99999999999999999999-5", 100, ""},
		{"GET", "bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7", 100, "bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7"},
		{"GET", "bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8", 100, ""},
		{"GET", "bytes=-5", 0, ""},
		{"GET", "bytes=0-1,bytes=2-3", 100, ""},
	} {
		if got := GuardRange(tc.method, tc.in, tc.size); got != tc.want {
			t.Errorf("GuardRange(%s, %q, %d) = %q, want %q", tc.method, tc.in, tc.size, got, tc.want)
		}
	}
}

// serveGuarded answers a request for content the way Download does: the
// guarded Range header, then http.ServeContent.
func serveGuarded(method, rng, ifRange string, content []byte, etag string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/download/x", nil)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	if ifRange != "" {
		req.Header.Set("If-Range", ifRange)
	}
	if g := GuardRange(method, rng, int64(len(content))); g != "" {
		req.Header.Set("Range", g)
	} else {
		req.Header.Del("Range")
	}
	rec := httptest.NewRecorder()
	rec.Header().Set("ETag", etag)
	rec.Header().Set("Content-Type", "application/gzip")
	http.ServeContent(rec, req, "", time.Time{}, bytes.NewReader(content))
	return rec
}

// FuzzRangeGuard: whatever the Range header, the guarded ServeContent
// answers 200 with the whole content, 206 with exactly the bytes its
// Content-Range (or each multipart part) names, or 416 with
// "bytes */size" — and 416 only for a well-formed bytes range set of
// which nothing is satisfiable, 206 only for GET.
func FuzzRangeGuard(f *testing.F) {
	for _, s := range []string{"bytes=0-5", "bytes=-0", "bytes=-5", "bytes=5-", "items=1-2", "bytes=5-1", "bytes=0-1,3-4",
		"bytes=99999999999999999999-", "bytes=-0,0-0", "BYTES=1-1", "bytes= 1-2 ,", "bytes=100-", "bytes=+1-2", ""} {
		f.Add("GET", s, false, uint8(40))
		f.Add("HEAD", s, true, uint8(1))
	}
	f.Fuzz(func(t *testing.T, method, rng string, ifRange bool, size uint8) {
		switch method {
		case "GET", "HEAD", "POST":
		default:
			method = "GET"
		}
		content := make([]byte, size)
		for i := range content {
			content[i] = byte(i * 7)
		}
		etag := `"abc"`
		ir := ""
		if ifRange {
			ir = `"stale"`
		}
		rec := serveGuarded(method, rng, ir, content, etag)
		body := rec.Body.Bytes()
		n := len(content)
		switch rec.Code {
		case http.StatusOK:
			if method != "HEAD" && !bytes.Equal(body, content) {
				t.Fatalf("200 with %d bytes, want %d", len(body), n)
			}
		case http.StatusPartialContent:
			if method != "GET" || ifRange {
				t.Fatalf("206 for %s (stale If-Range %v)", method, ifRange)
			}
			ct := rec.Header().Get("Content-Type")
			if strings.HasPrefix(ct, "multipart/byteranges") {
				_, params, err := mime.ParseMediaType(ct)
				if err != nil {
					t.Fatal(err)
				}
				mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
				parts := 0
				for {
					p, err := mr.NextPart()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(p)
					checkPart(t, p.Header.Get("Content-Range"), b, content)
					parts++
				}
				if parts < 2 || parts > MaxRanges {
					t.Fatalf("%d parts", parts)
				}
			} else {
				checkPart(t, rec.Header().Get("Content-Range"), body, content)
			}
		case http.StatusRequestedRangeNotSatisfiable:
			if method != "GET" || ifRange || n == 0 {
				t.Fatalf("416 for %s, stale If-Range %v, size %d", method, ifRange, n)
			}
			if cr := rec.Header().Get("Content-Range"); cr != fmt.Sprintf("bytes */%d", n) {
				t.Fatalf("416 with Content-Range %q", cr)
			}
			if !strings.HasPrefix(strings.ToLower(rng), "bytes=") {
				t.Fatalf("416 for a non-bytes Range %q", rng)
			}
		default:
			t.Fatalf("status %d for Range %q", rec.Code, rng)
		}
	})
}

// checkPart checks that a 206 part is non-empty and holds the bytes its
// Content-Range names.
func checkPart(t *testing.T, cr string, b, content []byte) {
	t.Helper()
	var from, to, size int
	if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &from, &to, &size); err != nil {
		t.Fatalf("Content-Range %q: %v", cr, err)
	}
	if size != len(content) || from < 0 || to < from || to >= size || !bytes.Equal(b, content[from:to+1]) {
		t.Fatalf("part %q with %d bytes (content %d bytes)", cr, len(b), len(content))
	}
	if want := "bytes " + strconv.Itoa(from) + "-" + strconv.Itoa(to) + "/" + strconv.Itoa(size); cr != want {
		t.Fatalf("Content-Range %q", cr)
	}
}
