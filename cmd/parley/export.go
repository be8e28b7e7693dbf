package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
)

// exportFlags are the flags of `parley export`.
type exportFlags struct {
	server        string
	login         string
	scope         string
	out           string
	passwordStdin bool
	poll          time.Duration
	retries       int
	quiet         bool
}

// exportState is what `parley export` keeps next to the output file
// (OUT.parley-export) so that a rerun after a crash or a broken download
// reuses the same job (same Idempotency-Key) and resumes the download.
type exportState struct {
	Server string `json:"server"`
	Login  string `json:"login"`
	Scope  string `json:"scope"`
	Key    string `json:"key"`
	Job    string `json:"job,omitempty"`
	ETag   string `json:"etag,omitempty"` // the artifact's ETag the partial file belongs to
}

// exportJob is the body of POST /exports and GET /exports/{id}.
type exportJob struct {
	JobID    string `json:"job_id"`
	State    string `json:"state"`
	Replayed bool   `json:"replayed"`
	Progress struct {
		Done  int `json:"done"`
		Total int `json:"total"`
	} `json:"progress"`
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Error  string `json:"error"`
}

func runExport(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	var f exportFlags
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.StringVar(&f.server, "server", "", "server URL, like http://127.0.0.1:8080 (required)")
	fs.StringVar(&f.login, "login", "", "user id or email to log in as (required)")
	fs.StringVar(&f.scope, "scope", "all", `what to export: "all" or "conv:<id>"`)
	fs.StringVar(&f.out, "out", "", "file to write the gzipped JSONL export to (required)")
	fs.BoolVar(&f.passwordStdin, "password-stdin", false, "read the password from the first line of stdin (else PARLEY_PASSWORD)")
	fs.DurationVar(&f.poll, "poll", 500*time.Millisecond, "how often the job's progress is read")
	fs.IntVar(&f.retries, "retries", 8, "download attempts before giving up (each resumes where the last stopped)")
	fs.BoolVar(&f.quiet, "quiet", false, "show no progress (errors and the final line still print)")
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("export: unexpected argument %q", fs.Arg(0))
	case f.server == "" || f.login == "" || f.out == "":
		return usagef("export: --server, --login and --out are required")
	case f.scope != "all" && !strings.HasPrefix(f.scope, "conv:"):
		return usagef(`export: --scope %q: want "all" or "conv:<id>"`, f.scope)
	case f.retries < 1:
		return usagef("export: --retries must be at least 1")
	}
	base, err := url.Parse(strings.TrimRight(f.server, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return usagef("export: --server %q: want http(s)://HOST[:PORT]", f.server)
	}
	password := getenv("PARLEY_PASSWORD")
	if f.passwordStdin {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		password = strings.TrimRight(line, "\r\n")
	}
	if password == "" {
		return usagef("export: no password (--password-stdin or PARLEY_PASSWORD)")
	}

	e := &exporter{base: base, f: f, http: &http.Client{}, meter: newMeter(stderr, f.quiet)}
	// Log in before the state file is touched: a refused login leaves
	// nothing behind, and an earlier run's state (a download to resume)
	// survives a mistyped password.
	if err := e.loginAs(ctx, password); err != nil {
		return err
	}
	if err := e.loadState(); err != nil {
		return err
	}
	job, err := e.run(ctx)
	if err != nil {
		if isTerminal(err) {
			// Nothing to resume: the job failed, was revoked or expired, or
			// the server refused us. A rerun starts a new job.
			os.Remove(e.statePath())
			os.Remove(e.partPath())
		}
		return err
	}
	os.Remove(e.statePath())
	fmt.Fprintf(stdout, "wrote %s (%d bytes, sha256 %s)\n", f.out, job.Bytes, job.SHA256)
	return nil
}

// run creates (or finds again) the job, follows it and downloads it.
func (e *exporter) run(ctx context.Context) (exportJob, error) {
	job, err := e.create(ctx)
	if err != nil {
		return job, err
	}
	if job, err = e.follow(ctx, job); err != nil {
		return job, err
	}
	return job, e.download(ctx, job)
}

// terminalError is a failure a rerun cannot mend with the same job: the
// job ended without a file (failed, revoked, expired), or the server
// refused the request with a terminal status (bad request, unauthenticated,
// access denied, not found, gone). Interruptions, network errors, 429 and
// 503 are not terminal: the state file is kept so a rerun resumes.
type terminalError struct{ err error }

func (t *terminalError) Error() string { return t.err.Error() }
func (t *terminalError) Unwrap() error { return t.err }

func isTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

// statusError is a non-2xx answer; it is terminal unless the status says
// to retry.
func statusError(status int, err error) error {
	switch status {
	case http.StatusTooManyRequests, http.StatusRequestTimeout:
		return err
	}
	if status >= 400 && status < 500 {
		return &terminalError{err}
	}
	return err
}

type exporter struct {
	base  *url.URL
	f     exportFlags
	http  *http.Client
	token string
	state exportState
	meter *meter // progress on stderr
}

func (e *exporter) statePath() string { return e.f.out + ".parley-export" }
func (e *exporter) partPath() string  { return e.f.out + ".part" }

// loadState reuses the key of an earlier run for the same server, login and
// scope, or starts a new one; the key is on disk before the job is created,
// so a crash after creating it cannot make a second job.
func (e *exporter) loadState() error {
	b, err := os.ReadFile(e.statePath())
	if err == nil && json.Unmarshal(b, &e.state) == nil &&
		e.state.Server == e.base.String() && e.state.Login == e.f.login && e.state.Scope == e.f.scope && e.state.Key != "" {
		return nil
	}
	var k [16]byte
	rand.Read(k[:])
	e.state = exportState{Server: e.base.String(), Login: e.f.login, Scope: e.f.scope, Key: "export-" + hex.EncodeToString(k[:])}
	os.Remove(e.partPath())
	return e.saveState()
}

func (e *exporter) saveState() error {
	b, _ := json.Marshal(e.state)
	return writeFileSync(e.statePath(), b)
}

// writeFileSync replaces name with data durably (temp file, fsync, rename).
func writeFileSync(name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	return err
}

// call does one JSON request and decodes a 2xx body into out; any other
// status is an error carrying the problem's code and detail.
func (e *exporter) call(ctx context.Context, method, path string, header http.Header, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base.String()+path, rd)
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var p struct{ Code, Detail string }
		json.Unmarshal(b, &p)
		return resp.StatusCode, statusError(resp.StatusCode, fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, p.Code, p.Detail))
	}
	return resp.StatusCode, json.Unmarshal(b, out)
}

func (e *exporter) loginAs(ctx context.Context, password string) error {
	host, _ := os.Hostname()
	var inst [8]byte
	rand.Read(inst[:])
	tok, err := client.Login(ctx, e.http, e.base.String(), parley.LoginRequest{
		Login: e.f.login, Password: password,
		DeviceID: "parley-export@" + host, InstallID: hex.EncodeToString(inst[:]),
	})
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	e.token = tok
	return nil
}

// create creates the job, or finds it again under the saved key.
func (e *exporter) create(ctx context.Context) (exportJob, error) {
	var job exportJob
	h := http.Header{"Idempotency-Key": {e.state.Key}}
	if _, err := e.call(ctx, "POST", "/exports", h, map[string]string{"scope": e.f.scope}, &job); err != nil {
		return job, fmt.Errorf("create export: %w", err)
	}
	if e.state.Job != job.JobID {
		e.state.Job = job.JobID
		if err := e.saveState(); err != nil {
			return job, err
		}
	}
	return job, nil
}

// follow polls the job until it is done, drawing a progress bar.
func (e *exporter) follow(ctx context.Context, job exportJob) (exportJob, error) {
	for {
		switch job.State {
		case "done":
			e.meter.show("export", int64(job.Progress.Done), int64(job.Progress.Total), "shards")
			e.meter.end()
			return job, nil
		case "failed", "revoked", "expired":
			e.meter.end()
			return job, &terminalError{fmt.Errorf("export %s %s: %s", job.JobID, job.State, job.Error)}
		}
		e.meter.show("export", int64(job.Progress.Done), int64(job.Progress.Total), "shards")
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(e.f.poll):
		}
		if _, err := e.call(ctx, "GET", "/exports/"+url.PathEscape(job.JobID), nil, nil, &job); err != nil {
			return job, err
		}
	}
}

// download fetches the artifact into OUT.part, resuming a partial file of
// the same artifact with Range and If-Range; a 200 answer to a range
// request means the artifact changed (or the server ignored the range), so
// the file restarts from byte 0. Each attempt gets a fresh signed link.
func (e *exporter) download(ctx context.Context, job exportJob) error {
	etag := `"` + job.SHA256 + `"`
	if e.state.ETag != etag {
		os.Remove(e.partPath())
		e.state.ETag = etag
		if err := e.saveState(); err != nil {
			return err
		}
	}
	var last error
	for attempt := 0; attempt < e.f.retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
			if _, err := e.call(ctx, "GET", "/exports/"+url.PathEscape(job.JobID), nil, nil, &job); err != nil {
				last = err
				continue
			}
			if job.State != "done" {
				return &terminalError{fmt.Errorf("export %s is %s: %s", job.JobID, job.State, job.Error)}
			}
		}
		done, err := e.fetch(ctx, job, etag)
		if err == nil && done {
			return e.verify(job)
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	e.meter.end()
	if isTerminal(last) {
		return fmt.Errorf("download failed after %d attempts: %w", e.f.retries, last)
	}
	return fmt.Errorf("download failed after %d attempts: %w (run again to resume)", e.f.retries, last)
}

// fetch runs one download request; done reports a complete file.
func (e *exporter) fetch(ctx context.Context, job exportJob, etag string) (done bool, err error) {
	link, err := e.base.Parse(job.URL)
	if err != nil {
		return false, err
	}
	part, err := os.OpenFile(e.partPath(), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	defer part.Close()
	have, err := part.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	if have >= job.Bytes {
		return true, part.Sync() // complete; verify decides
	}
	req, err := http.NewRequestWithContext(ctx, "GET", link.String(), nil)
	if err != nil {
		return false, err
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
		req.Header.Set("If-Range", etag)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK: // the full artifact: start over
		if err := part.Truncate(0); err != nil {
			return false, err
		}
		if have, err = part.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
	case http.StatusPartialContent:
		var start int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-", &start); err != nil || start != have {
			return false, fmt.Errorf("206 with Content-Range %q, want bytes %d-", resp.Header.Get("Content-Range"), have)
		}
	case http.StatusRequestedRangeNotSatisfiable: // our partial file is no prefix of it
		return false, part.Truncate(0)
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var p struct{ Code, Detail string }
		json.Unmarshal(b, &p)
		return false, statusError(resp.StatusCode, fmt.Errorf("download: %d %s: %s", resp.StatusCode, p.Code, p.Detail))
	}
	if et := resp.Header.Get("ETag"); et != etag {
		return false, fmt.Errorf("download: ETag %s, want %s", et, etag)
	}
	pr := &progress{e: e, n: have, total: job.Bytes}
	_, err = io.Copy(part, io.TeeReader(resp.Body, pr))
	if serr := part.Sync(); err == nil {
		err = serr
	}
	if err != nil {
		return false, err
	}
	st, err := part.Stat()
	if err != nil {
		return false, err
	}
	return st.Size() >= job.Bytes, nil
}

// verify checks the sha256 of the finished download and moves it into
// place; a mismatch removes the partial file so the next run starts over.
func (e *exporter) verify(job exportJob) error {
	e.meter.end()
	f, err := os.Open(e.partPath())
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != job.SHA256 {
		os.Remove(e.partPath())
		return fmt.Errorf("download: sha256 %s, want %s (partial file removed; run again)", got, job.SHA256)
	}
	if err := os.Rename(e.partPath(), e.f.out); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(e.f.out)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// progress counts downloaded bytes for the bar.
type progress struct {
	e        *exporter
	n, total int64
	drawn    time.Time
}

func (p *progress) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	if now := time.Now(); now.Sub(p.drawn) > 100*time.Millisecond || p.n >= p.total {
		p.drawn = now
		p.e.meter.show("download", p.n, p.total, "bytes")
	}
	return len(b), nil
}
