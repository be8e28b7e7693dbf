package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// File is an uploaded file as the server measured it: what a message's
// attachment shows (docs/protocol.md, "Uploads"). Attach it by ID.
type File struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	MIME   string `json:"mime"`   // sniffed from the content by the server
	SHA256 string `json:"sha256"` // lower-case hex
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

// UploadOptions tune Upload. The zero value sends the whole file in one
// PATCH and retries outages until ctx ends.
type UploadOptions struct {
	// ID continues an upload created earlier (the id OnCreate reported,
	// kept across a restart of the program): Upload asks the server where
	// it stands and sends the rest. Empty: a new upload.
	ID string
	// OnCreate is called with a new upload's id before its first byte is
	// sent, so the caller can keep it and pass it as ID after a crash.
	OnCreate func(id string)
	// ChunkSize is the most bytes one PATCH carries (0: all that is left).
	// Smaller chunks lose less to a cut but cost a request each.
	ChunkSize int64
	// Progress is called with the bytes the server has stored, after each
	// answer that says so.
	Progress func(stored int64)
	// BackoffBase and BackoffMax shape the wait between retries: full
	// jitter, as the socket's reconnects (defaults 100ms and 5s).
	BackoffBase, BackoffMax time.Duration
}

// UploadFile uploads the file at path under its base name (see Upload).
func (a *Account) UploadFile(ctx context.Context, path string, o UploadOptions) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return File{}, err
	}
	return a.Upload(ctx, f, st.Size(), filepath.Base(path), o)
}

// Upload uploads size bytes of r as a file named name over tus and returns
// the file once the server has it ready. It resumes rather than starts
// over: after a dropped connection, an outage or a restart of the server
// it asks where the upload stands (HEAD) and sends the rest from there.
// Following the error table, it retries what has no code (no reply),
// UNAVAILABLE and RATE_LIMITED (after their Retry-After) until ctx ends,
// and returns any terminal *parley.Error at once (TOO_LARGE: the file is
// larger than the server allows or the quota is used up; NOT_FOUND: the
// upload expired, start a new one). A creation whose reply was lost is
// created again: the lost one is collected by the server later.
func (a *Account) Upload(ctx context.Context, r io.ReaderAt, size int64, name string, o UploadOptions) (File, error) {
	if o.BackoffBase <= 0 {
		o.BackoffBase = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffBase {
		o.BackoffMax = max(5*time.Second, o.BackoffBase)
	}
	u := uploader{a: a, r: r, size: size, o: o}
	id := o.ID
	for n := 0; id == ""; n++ {
		var err error
		if id, err = u.create(ctx, name); err != nil {
			if err := u.wait(ctx, n, err); err != nil {
				return File{}, err
			}
		}
	}
	if o.ID == "" && o.OnCreate != nil {
		o.OnCreate(id)
	}
	offset, known := int64(0), o.ID == ""
	for n := 0; ; {
		var err error
		if !known {
			offset, err = u.head(ctx, id)
		}
		if err == nil {
			var f File
			f, offset, err = u.patch(ctx, id, offset)
			if err == nil && f.ID != "" {
				return f, nil
			}
		}
		known = err == nil // a PATCH answered: its offset is where to go on
		if err == nil {
			n = 0
			continue
		}
		if err := u.wait(ctx, n, err); err != nil {
			return File{}, err
		}
		n++
	}
}

type uploader struct {
	a    *Account
	r    io.ReaderAt
	size int64
	o    UploadOptions
}

// wait returns err when it ends the upload (a terminal code, ctx done),
// else sleeps before retry n and returns nil.
func (u *uploader) wait(ctx context.Context, n int, err error) error {
	var pe *parley.Error
	if errors.As(err, &pe) && pe.Code.IsTerminal() && pe.Code != parley.CodeCursorAhead {
		return err
	}
	d := backoff(n, u.o.BackoffBase, u.o.BackoffMax, rand.Float64())
	var ra *retryAfter
	if errors.As(err, &ra) && ra.d > d {
		d = ra.d
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("client: upload: %w (last error: %v)", ctx.Err(), err)
	case <-t.C:
		return nil
	}
}

// create starts the upload and returns its id.
func (u *uploader) create(ctx context.Context, name string) (string, error) {
	resp, err := u.send(ctx, http.MethodPost, "", nil, -1,
		"Upload-Length", strconv.FormatInt(u.size, 10),
		"Upload-Metadata", "filename "+base64.StdEncoding.EncodeToString([]byte(name)))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	loc := resp.Header.Get("Location")
	id := loc[strings.LastIndexByte(loc, '/')+1:]
	if resp.StatusCode != http.StatusCreated || parley.CheckFileID(id) != nil {
		return "", fmt.Errorf("client: upload: creation answered %d with Location %q", resp.StatusCode, loc)
	}
	return id, nil
}

// head returns the bytes the server has of upload id.
func (u *uploader) head(ctx context.Context, id string) (int64, error) {
	resp, err := u.send(ctx, http.MethodHead, id, nil, -1)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return u.offset(resp)
}

// patch sends the next chunk from offset. It returns the file when the
// server finished the upload, else the new offset.
func (u *uploader) patch(ctx context.Context, id string, offset int64) (File, int64, error) {
	n := u.size - offset
	if u.o.ChunkSize > 0 {
		n = min(n, u.o.ChunkSize)
	}
	resp, err := u.send(ctx, http.MethodPatch, id, io.NewSectionReader(u.r, offset, n), n,
		"Upload-Offset", strconv.FormatInt(offset, 10), "Content-Type", "application/offset+octet-stream")
	if err != nil {
		return File{}, offset, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		var f File
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err == nil {
			err = json.Unmarshal(b, &f)
		}
		if err != nil || f.ID != id {
			return File{}, offset, fmt.Errorf("client: upload: the finishing PATCH answered %q: %v", b, err)
		}
		if u.o.Progress != nil {
			u.o.Progress(f.Size)
		}
		return f, f.Size, nil
	}
	next, err := u.offset(resp)
	return File{}, next, err
}

// offset reads Upload-Offset and reports progress.
func (u *uploader) offset(resp *http.Response) (int64, error) {
	n, err := strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
	if err != nil || n < 0 || n > u.size {
		return 0, fmt.Errorf("client: upload: %s answered Upload-Offset %q", resp.Request.Method, resp.Header.Get("Upload-Offset"))
	}
	if u.o.Progress != nil {
		u.o.Progress(n)
	}
	return n, nil
}

// retryAfter is an outage or rate limit answer that named its wait.
type retryAfter struct {
	err error
	d   time.Duration
}

func (r *retryAfter) Error() string { return r.err.Error() }
func (r *retryAfter) Unwrap() error { return r.err }

// send makes one tus request (id "": the creation URL) and returns a 2xx
// response; any other is the problem's *parley.Error (with its
// Retry-After), or an error without a code when the answer had none.
func (u *uploader) send(ctx context.Context, method, id string, body io.Reader, length int64, hdr ...string) (*http.Response, error) {
	url := strings.TrimRight(u.a.Server, "/") + "/api/uploads"
	if id != "" {
		url += "/" + id
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if length >= 0 {
		req.ContentLength = length
		if length == 0 {
			req.Body = http.NoBody
		}
	}
	req.Header.Set("Authorization", "Bearer "+u.a.Token)
	req.Header.Set("Tus-Resumable", "1.0.0")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	hc := u.a.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: upload: %s: %w", method, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var p wire.Problem
	if json.Unmarshal(b, &p) != nil || p.Code == "" {
		switch {
		case method != http.MethodHead:
		case resp.StatusCode == http.StatusNotFound: // HEAD answers carry no body
			return nil, parley.ErrNoSuchFile()
		case resp.StatusCode == http.StatusUnauthorized:
			return nil, &parley.Error{Code: parley.CodeUnauthenticated, Msg: "the server refused the token"}
		}
		return nil, fmt.Errorf("client: upload: %s answered %d", method, resp.StatusCode)
	}
	err = &parley.Error{Code: p.Code, Msg: p.Detail}
	if s, e := strconv.Atoi(resp.Header.Get("Retry-After")); e == nil && s > 0 {
		err = &retryAfter{err: err, d: time.Duration(s) * time.Second}
	}
	return nil, err
}
