package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// DownloadAttempts is how many requests one Download makes at most: a
// cut connection or an UNAVAILABLE answer is retried, from where the
// bytes stopped.
const DownloadAttempts = 5

// Download fetches file id (GET /api/files/{id}) into the file at path
// and checks its bytes against the SHA-256 the server names as its ETag.
// The bytes arrive in path+".part" (its ETag in path+".part.etag"): a
// download cut off, in this call or an earlier one that returned an
// error (even in another process), resumes where it stopped, with Range
// and If-Range, so a file that is not the one begun is fetched whole
// again. On success path holds the file (renamed over any file there)
// and the .part files are gone.
//
// A refusal is the *parley.Error of the problem (NOT_FOUND for a file
// the caller may not read); a file whose bytes do not match its ETag is
// an error without a code, and the partial file is removed.
func (a *Account) Download(ctx context.Context, id, path string) error {
	if err := parley.CheckFileID(id); err != nil {
		return err
	}
	part, tag := path+".part", path+".part.etag"
	var err error
	done := false
	for attempt := 0; attempt < DownloadAttempts && !done; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
			}
		}
		done, err = a.downloadOnce(ctx, id, part, tag)
		if err != nil && (ctx.Err() != nil || parley.ErrorCode(err) != "" && parley.ErrorCode(err) != parley.CodeUnavailable) {
			return err
		}
	}
	if !done {
		if err == nil {
			err = fmt.Errorf("client: download %s: not complete after %d attempts", id, DownloadAttempts)
		}
		return err
	}
	if err := verifyPart(part, tag); err != nil {
		os.Remove(part)
		os.Remove(tag)
		return err
	}
	os.Remove(tag)
	return os.Rename(part, path)
}

// downloadOnce makes one request for the rest of the file into part; done
// reports the whole file is there.
func (a *Account) downloadOnce(ctx context.Context, id, part, tag string) (done bool, err error) {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	etag, _ := os.ReadFile(tag)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(a.Server, "/")+"/api/files/"+id, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	if have > 0 && len(etag) > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		req.Header.Set("If-Range", string(etag))
	}
	hc := a.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("client: download %s: %w", id, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK: // the whole file: start over
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		if err := os.WriteFile(tag, []byte(resp.Header.Get("ETag")), 0o600); err != nil {
			return false, err
		}
	case http.StatusPartialContent:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(have, 10)+"-") {
			return false, fmt.Errorf("client: download %s: Content-Range %q does not start at %d", id, resp.Header.Get("Content-Range"), have)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// Nothing after what we have: complete if the sizes agree.
		if resp.Header.Get("Content-Range") == "bytes */"+strconv.FormatInt(have, 10) {
			return true, nil
		}
		return false, f.Truncate(0)
	default:
		return false, problemOf(resp, id)
	}
	n, err := io.Copy(f, resp.Body)
	if err != nil {
		return false, fmt.Errorf("client: download %s: cut after %d bytes: %w", id, n, err)
	}
	return true, f.Sync()
}

// problemOf reads an error answer as the *parley.Error of its problem.
func problemOf(resp *http.Response, id string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var p wire.Problem
	if json.Unmarshal(b, &p) != nil || p.Code == "" {
		return fmt.Errorf("client: download %s: status %d", id, resp.StatusCode)
	}
	return &parley.Error{Code: p.Code, Msg: p.Detail}
}

// verifyPart checks the bytes in part against the SHA-256 of the ETag in
// tag.
func verifyPart(part, tag string) error {
	etag, err := os.ReadFile(tag)
	if err != nil {
		return err
	}
	want := strings.Trim(string(etag), `"`)
	f, err := os.Open(part)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errors.New("client: the downloaded bytes do not match the file's SHA-256 (" + want + "); fetch it again")
	}
	return nil
}
