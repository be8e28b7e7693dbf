package wire

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
)

// MaxRanges is the most ranges a request may ask for; more and the Range
// header is ignored (a full 200).
const MaxRanges = 8

// GuardRange rewrites a request's Range header for http.ServeContent,
// fixing what http.ServeContent gets wrong (RFC 9110 §14):
//   - Range applies to GET only: "" for any other method (HEAD included).
//   - A unit other than bytes, or a malformed ranges-specifier (bad
//     syntax, first > last, signs, spaces around '='), is ignored: "", a full 200.
//     http.ServeContent answers 416 to both.
//   - More than MaxRanges ranges: "" (ignored).
//   - A zero-length suffix ("-0") is unsatisfiable; http.ServeContent serves it
//     as a 206 with a broken Content-Range. It is dropped from the set.
//   - A set with no satisfiable range becomes "bytes=<size>-", which
//     http.ServeContent answers 416 with Content-Range: bytes */<size> after its
//     preconditions (a stale If-Range still gives the full 200).
//   - An empty representation ignores Range (a 200).
//   - Numbers too large for int64 are satisfiable when they are a last
//     position or a suffix length (clamped to the size), and not when they
//     are a first position.
//
// The unit is matched case-insensitively. Everything else (If-Range,
// clamping over-long ranges, multipart, Content-Range) is http.ServeContent's.
func GuardRange(method, header string, size int64) string {
	if method != http.MethodGet || size <= 0 {
		return ""
	}
	unit, set, ok := strings.Cut(header, "=")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return ""
	}
	var kept []string
	n := 0
	for spec := range strings.SplitSeq(set, ",") {
		spec = strings.Trim(spec, " \t")
		if spec == "" {
			continue
		}
		n++
		if n > MaxRanges {
			return ""
		}
		first, last, ok := strings.Cut(spec, "-")
		if !ok || first == "" && last == "" || first != "" && !digits(first) || last != "" && !digits(last) {
			return "" // malformed
		}
		if first == "" {
			// A suffix: satisfiable when it is not zero.
			if l, big := parse(last); big || l > 0 {
				if big {
					last = strconv.FormatInt(size, 10)
				}
				kept = append(kept, "-"+last)
			}
			continue
		}
		f, fbig := parse(first)
		if last != "" {
			l, lbig := parse(last)
			if fbig && !lbig || !fbig && !lbig && f > l {
				return "" // first > last: invalid
			}
			if lbig {
				last = ""
			}
		}
		if fbig || f >= size {
			continue // does not overlap
		}
		kept = append(kept, first+"-"+last)
	}
	if n == 0 {
		return ""
	}
	if len(kept) == 0 {
		return "bytes=" + strconv.FormatInt(size, 10) + "-"
	}
	return "bytes=" + strings.Join(kept, ",")
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parse reads a string of digits; big is true when it exceeds int64.
func parse(s string) (v int64, big bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err != nil
}

// ServeContent answers r from content as http.ServeContent does (ranges,
// If-Range, If-None-Match and the other preconditions; the caller sets
// ETag, Content-Type and the rest of the header first, and no name is
// given, so nothing is guessed from one), with the Range header passed
// through GuardRange first, and with the error answers Go writes as text
// made problems (SPEC: every error the server writes is problem+json):
//
//	416 (no range overlaps)       416 INVALID_ARGUMENT, Content-Range "bytes */size" kept
//	412 (If-Match, If-Unmodified) 412 INVALID_ARGUMENT
//	500 (a seek or read failed)   503 UNAVAILABLE with requestID, Retry-After
//
// Content-Disposition is dropped from an error answer (a browser would
// save the problem as the file). The 304 of a matching If-None-Match stays
// as Go writes it. status is the status written (0: none, the client gone
// before); text is what Go would have shown for an error (never sent: it
// may name a path or a host), for the caller's log.
func ServeContent(w http.ResponseWriter, r *http.Request, modtime time.Time, content io.ReadSeeker, requestID string) (status int, text string) {
	if rg, ok := r.Header["Range"]; ok {
		size, err := content.Seek(0, io.SeekEnd)
		if err == nil {
			_, err = content.Seek(0, io.SeekStart)
		}
		if err != nil {
			WriteProblem(w, parley.CodeUnavailable, parley.InternalMessage, requestID)
			return http.StatusServiceUnavailable, "seek: " + err.Error()
		}
		// ServeContent reads the request's header: hand it the guarded
		// one on a shallow copy, never changing the caller's request.
		g := GuardRange(r.Method, strings.Join(rg, ","), size)
		r2 := r.Clone(r.Context())
		if g == "" {
			r2.Header.Del("Range")
		} else {
			r2.Header.Set("Range", g)
		}
		r = r2
	}
	pw := &problemWriter{ResponseWriter: w, requestID: requestID}
	http.ServeContent(pw, r, "", modtime, content)
	return pw.status, strings.TrimSpace(pw.text.String())
}

// problemWriter turns the error answers http.ServeContent writes as text
// into problems.
type problemWriter struct {
	http.ResponseWriter
	requestID string
	status    int
	failed    bool         // an error answer: Go's body is kept from the client
	text      bytes.Buffer // Go's body of an error answer, for the log
}

func (p *problemWriter) WriteHeader(code int) {
	if p.status != 0 {
		return
	}
	p.status = code
	if code < 400 {
		p.ResponseWriter.WriteHeader(code)
		return
	}
	p.failed = true
	h := p.Header()
	h.Del("Content-Disposition")
	switch code {
	case http.StatusRequestedRangeNotSatisfiable:
		p.problem(code, parley.CodeInvalidArgument, "no range of the Range header lies inside the file (see Content-Range for its size)")
	case http.StatusPreconditionFailed:
		p.problem(code, parley.CodeInvalidArgument, "the file does not meet the request's If-Match or If-Unmodified-Since")
	default:
		p.status = http.StatusServiceUnavailable
		WriteProblem(p.ResponseWriter, parley.CodeUnavailable, parley.InternalMessage, p.requestID)
	}
}

// problem writes a problem with a status the code table does not give
// code (416 and 412 say more than INVALID_ARGUMENT's 400).
func (p *problemWriter) problem(status int, code parley.Code, detail string) {
	h := p.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	p.ResponseWriter.WriteHeader(status)
	WriteJSON(p.ResponseWriter, Problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code, RequestID: p.requestID,
	})
}

func (p *problemWriter) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.WriteHeader(http.StatusOK)
	}
	if p.failed {
		if p.text.Len() < 512 {
			p.text.Write(b[:min(len(b), 512-p.text.Len())])
		}
		return len(b), nil
	}
	return p.ResponseWriter.Write(b)
}

// ReadFrom keeps sendfile for the body ServeContent copies.
func (p *problemWriter) ReadFrom(src io.Reader) (int64, error) {
	if p.status == 0 {
		p.WriteHeader(http.StatusOK)
	}
	if p.failed {
		return io.Copy(io.Discard, src)
	}
	return io.Copy(p.ResponseWriter, src)
}

func (p *problemWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
