package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres/pgtest"
)

// fill sends n messages from ana into conv straight through the store.
func fill(t *testing.T, s parley.Store, conv string, n int) {
	t.Helper()
	ana := parley.Principal{User: "ana", DeviceID: "seed"}
	for i := 0; i < n; i++ {
		if _, err := s.Send(context.Background(), ana, parley.SendRequest{Conv: conv, CMID: parley.NewID(), Body: fmt.Sprintf("%s %d", conv, i)}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitJob polls the store until job id is done (or fails the test when it
// ends otherwise, or when the server died meanwhile).
func waitJob(t *testing.T, s parley.Store, id string, p *proc) parley.ExportJob {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		j, err := s.ExportJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch j.State {
		case parley.ExportDone:
			return j
		case parley.ExportFailed, parley.ExportRevoked, parley.ExportExpired:
			t.Fatalf("job %s ended %s: %s", id, j.State, j.Error)
		}
		select {
		case <-p.done:
			t.Fatalf("server died while job %s was %s: %v\n%s", id, j.State, p.err, p.stderr())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s (%d/%d)", id, j.State, j.Done, j.Total)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileSHA(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestExportCrashEveryShard kills a real server with SIGKILL right after
// each shard boundary in turn (export.after_shard=crash@1 in every process:
// a process resumes the job, writes the next shard, and dies), then lets a
// clean process finish: the artifact's sha256 equals that of an
// uninterrupted run of the same snapshot, and every process wrote exactly
// one new shard (verified shards are never rewritten).
func TestExportCrashEveryShard(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		seed(t, s)
		ctx := context.Background()
		if _, err := s.CreateConversation(ctx, parley.Principal{User: "ana"}, parley.NewConversation{ID: "g2", Kind: parley.KindGroup, Title: "g2", Members: []string{"ana", "ben"}}); err != nil {
			t.Fatal(err)
		}
		fill(t, s, "g1", 650) // 4 shards
		fill(t, s, "g2", 250) // 2 shards
		ben := parley.Principal{User: "ben"}
		// Every crash is a takeover that counts as an attempt: allow them.
		cfg := filepath.Join(b.dir, "parley.yaml")
		if err := os.WriteFile(cfg, []byte("export: {retries: 20}\nrate_limits: {}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lease := []string{"--db", b.db, "--data-dir", b.dir, "--export-lease", "300ms", "--config", cfg}

		// NoReuse: the second job must rerun the reference's snapshot.
		ref, err := s.CreateExport(ctx, ben, parley.ExportRequest{Key: "reference", Scope: "all", NoReuse: true})
		if err != nil {
			t.Fatal(err)
		}
		p := serveEnv(t, nil, lease...)
		want := waitJob(t, s, ref.ID, p)
		p.kill()

		job, err := s.CreateExport(ctx, ben, parley.ExportRequest{Key: "crashing", Scope: "all", NoReuse: true})
		if err != nil {
			t.Fatal(err)
		}
		const total = 6
		for i := 1; i <= total; i++ {
			p := serveEnv(t, []string{"PARLEY_FAULTS=export.after_shard=crash@1"}, lease...)
			if err := p.waitExit(60 * time.Second); !killedBySIGKILL(err) {
				t.Fatalf("process %d ended with %v, want SIGKILL after a shard\n%s", i, err, p.stderr())
			}
			j, err := s.ExportJob(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.Done != i || j.Total != total {
				t.Fatalf("after crash %d: %d/%d shards recorded, want %d/%d (a verified shard was rewritten or skipped)", i, j.Done, j.Total, i, total)
			}
		}
		p = serveEnv(t, nil, lease...)
		got := waitJob(t, s, job.ID, p)
		if got.SHA256 != want.SHA256 || got.Bytes != want.Bytes {
			t.Fatalf("after %d crashes: sha256 %s (%d bytes), uninterrupted %s (%d bytes)", total, got.SHA256, got.Bytes, want.SHA256, want.Bytes)
		}
		if got.Attempts < total+1 {
			t.Errorf("attempts %d, want at least %d (each crash is a takeover)", got.Attempts, total+1)
		}
		if sha := fileSHA(t, filepath.Join(b.dir, "exports", got.ID+".jsonl.gz")); sha != got.SHA256 {
			t.Errorf("artifact on disk %s, job says %s", sha, got.SHA256)
		}
	})
}

// TestExportConcurrentWriters: on PostgreSQL, jobs are created while
// writers commit into the exported conversations from many connections,
// and the server is SIGKILLed mid-export and restarted; every artifact
// holds exactly the messages at or below its snapshot heads, read
// independently afterwards, after a crash and a rerun.
func TestExportConcurrentWriters(t *testing.T) {
	t.Parallel()
	b := backend{name: "postgres", dir: t.TempDir()}
	b.db = pgtest.DSN(t) // skips without PARLEY_TEST_POSTGRES
	s := b.store(t)
	seed(t, s)
	ctx := context.Background()
	fill(t, s, "g1", 300)
	args := []string{"--db", b.db, "--data-dir", b.dir, "--export-lease", "300ms", "--export-workers", "1"}
	p := serveEnv(t, []string{"PARLEY_FAULTS=export.after_shard=crash@2"}, args...)

	stop := make(chan struct{})
	var writers sync.WaitGroup
	var sent atomic.Int64
	for w := 0; w < 8; w++ {
		writers.Go(func() {
			ana := parley.Principal{User: "ana", DeviceID: fmt.Sprintf("w%d", w)}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Send(ctx, ana, parley.SendRequest{Conv: "g1", CMID: parley.NewID(), Body: fmt.Sprintf("w%d-%d", w, i)}); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
			}
		})
	}
	var jobs []string
	for i := 0; i < 6; i++ {
		j, err := s.CreateExport(ctx, parley.Principal{User: "ben"}, parley.ExportRequest{Key: fmt.Sprintf("c%d", i), Scope: "conv:g1", MaxActive: 0, NoReuse: true})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j.ID)
		time.Sleep(30 * time.Millisecond)
	}
	if err := p.waitExit(60 * time.Second); !killedBySIGKILL(err) {
		t.Fatalf("server ended with %v, want SIGKILL after its second shard", err)
	}
	p = serveEnv(t, nil, args...)
	var done []parley.ExportJob
	for _, id := range jobs {
		done = append(done, waitJob(t, s, id, p))
	}
	close(stop)
	writers.Wait()
	if sent.Load() == 0 {
		t.Fatal("no concurrent writes happened")
	}

	for _, j := range done {
		snap, err := s.ExportSnapshot(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		head := snap[0].Head
		var want []string
		var after int64
		for after < head {
			page, err := s.Sync(ctx, parley.Principal{User: "ben"}, parley.SyncRequest{Conv: "g1", After: after, Limit: parley.MaxPage})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				if ev.Kind == parley.EventMessage && ev.Seq <= head {
					want = append(want, fmt.Sprintf("%d:%s", ev.Seq, ev.Body))
				}
			}
			after = page.NextAfter
		}
		got := artifactLines(t, filepath.Join(b.dir, "exports", j.ID+".jsonl.gz"))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("job %s (head %d): %d lines, the log up to its head has %d", j.ID, head, len(got), len(want))
		}
	}
}

// artifactLines gunzips an artifact into "seq:body" lines.
func artifactLines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		var l struct {
			Seq  int64
			Body string
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", l.Seq, l.Body))
	}
	return out
}

// cutter is a reverse proxy in front of a server that breaks the first
// cut download responses after n bytes (the connection drops mid-body),
// and, with ignoreRange, strips Range from the next download request, as
// a server without range support would.
type cutter struct {
	n           int64
	cut         atomic.Int64
	ignoreRange atomic.Bool
	downloads   atomic.Int64
}

func (c *cutter) start(t *testing.T, target string) string {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasPrefix(resp.Request.URL.Path, "/download/") && resp.StatusCode/100 == 2 && c.cut.Add(-1) >= 0 {
			resp.Body = &breaking{r: resp.Body, left: c.n}
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/download/") {
			c.downloads.Add(1)
			if r.Header.Get("Range") != "" && c.ignoreRange.CompareAndSwap(true, false) {
				r.Header.Del("Range")
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

type breaking struct {
	r    io.ReadCloser
	left int64
}

func (b *breaking) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("cut")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *breaking) Close() error { return b.r.Close() }

// TestExportDownloadResume: a download broken mid-body is resumed by the
// real `curl -C -` and by `parley export` (Range + If-Range, a fresh link
// per attempt), and the client starts over when a range request gets a
// 200; every result has the job's sha256.
func TestExportDownloadResume(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		seed(t, s)
		if _, err := s.CreateUser(context.Background(), parley.NewUser{ID: "cy", Password: "pw-cy-export"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddMember(context.Background(), parley.Principal{User: "ana"}, "g1", "cy"); err != nil {
			t.Fatal(err)
		}
		fill(t, s, "g1", 3000) // about 30 KB of gzip
		p := serveEnv(t, nil, "--db", b.db, "--data-dir", b.dir)
		c := &cutter{n: 7000}
		front := c.start(t, p.http)
		dir := t.TempDir()

		// The parley export client, broken once mid-download.
		c.cut.Store(1)
		out := filepath.Join(dir, "cy.jsonl.gz")
		stdout, stderr := runCLI(t, "pw-cy-export\n", "export", "--server", front, "--login", "cy", "--scope", "conv:g1", "--out", out, "--password-stdin")
		if !strings.Contains(stderr, "export: ") || !strings.Contains(stderr, "(100%)") || strings.Contains(stderr, "\r") {
			t.Errorf("want progress as lines on a stderr that is no terminal: %q", stderr)
		}
		var job parley.ExportJob
		if f := strings.Fields(stdout); len(f) < 6 {
			t.Fatalf("stdout %q", stdout)
		} else {
			job.SHA256 = f[len(f)-1][:64]
		}
		if got := fileSHA(t, out); got != job.SHA256 {
			t.Fatalf("parley export wrote sha %s, announced %s", got, job.SHA256)
		}
		if !strings.Contains(p.stderr(), "status=206") {
			t.Errorf("the client did not resume with a range request; server log:\n%s", grepLines(p.stderr(), "download"))
		}
		if _, err := os.Stat(out + ".part"); !os.IsNotExist(err) {
			t.Error("partial file left behind")
		}

		// Rerun (a new job: the state file went with the success), a range
		// request answered 200 by a range-less hop: start over from 0.
		os.Remove(out)
		c.cut.Store(1)
		c.ignoreRange.Store(true)
		stdout2, stderr2 := runCLI(t, "pw-cy-export\n", "export", "--server", front, "--login", "cy", "--scope", "conv:g1", "--out", out, "--password-stdin", "--quiet")
		if stderr2 != "" {
			t.Errorf("--quiet wrote %q", stderr2)
		}
		if fileSHA(t, out) != job.SHA256 {
			t.Fatalf("after a 200 to a range request: wrong file (%s)", stdout2)
		}
		if c.ignoreRange.Load() {
			t.Error("the second run sent no range request")
		}

		// The real curl: broken through the cutter, then resumed with -C -.
		tok := loginHTTP(t, p.http, "cy", "pw-cy-export")
		link := exportLink(t, p.http, tok, "conv:g1")
		c.cut.Store(1)
		curlOut := filepath.Join(dir, "curl.jsonl.gz")
		if err := exec.Command("curl", "-sS", "-o", curlOut, front+link).Run(); err == nil {
			t.Fatal("curl finished a download the cutter broke")
		}
		if st, err := os.Stat(curlOut); err != nil || st.Size() == 0 || st.Size() >= 30000 {
			t.Fatalf("partial curl file: %v %v", st, err)
		}
		if b, err := exec.Command("curl", "-sS", "-f", "-C", "-", "-o", curlOut, front+link).CombinedOutput(); err != nil {
			t.Fatalf("curl -C -: %v %s", err, b)
		}
		if got := fileSHA(t, curlOut); got != job.SHA256 {
			t.Fatalf("curl -C - assembled sha %s, want %s", got, job.SHA256)
		}
	})
}

// runCLI runs this binary as the parley command and returns its output;
// the test fails on a non-zero exit.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_FAULTS=")
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("parley %s: %v\n%s", strings.Join(args, " "), err, e.String())
	}
	return o.String(), e.String()
}

func loginHTTP(t *testing.T, base, user, password string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"login": user, "password": password, "device_id": "t", "install_id": "t1"})
	resp, err := http.Post(base+"/api/login", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&s)
	if s.Token == "" {
		t.Fatalf("login %s: %d", user, resp.StatusCode)
	}
	return s.Token
}

// exportLink creates an export over HTTP, waits for it and returns its
// signed download link.
func exportLink(t *testing.T, base, token, scope string) string {
	t.Helper()
	var j struct {
		JobID string `json:"job_id"`
		State string `json:"state"`
		URL   string `json:"url"`
		Error string `json:"error"`
	}
	call := func(method, path string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", "curl-"+scope)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		json.NewDecoder(resp.Body).Decode(&j)
	}
	call("POST", "/exports", []byte(`{"scope":"`+scope+`"}`))
	for deadline := time.Now().Add(60 * time.Second); j.State != "done"; {
		if j.State == "failed" || time.Now().After(deadline) {
			t.Fatalf("export %s: %s %s", j.JobID, j.State, j.Error)
		}
		time.Sleep(20 * time.Millisecond)
		call("GET", "/exports/"+j.JobID, nil)
	}
	return j.URL
}
