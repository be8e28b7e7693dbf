package httpapi_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/httpapi"
)

// testClock is a wall clock a test can move forward.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func (c *testClock) reset()                  { c.offset.Store(0) }
func principal(t *testing.T, s *server, token string) parley.Principal {
	t.Helper()
	p, err := s.store.Authenticate(context.Background(), token)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type jobReply struct {
	JobID    string `json:"job_id"`
	State    string `json:"state"`
	Replayed bool   `json:"replayed"`
	Progress struct{ Done, Total int }
	URL      string `json:"url"`
	SHA256   string `json:"sha256"`
	Bytes    int64  `json:"bytes"`
	Error    string `json:"error"`
}

func (s *server) createExport(token, key, scope string, status int, code ...parley.Code) jobReply {
	s.t.Helper()
	var j jobReply
	r := s.do("POST", "/exports", token, map[string]string{"scope": scope}, "Idempotency-Key", key).want(status, code...)
	if status < 300 {
		r.decode(&j)
	}
	return j
}

// waitExport polls GET /exports/{id} until the job is done (or fails the
// test when it ends otherwise).
func (s *server) waitExport(token, id string) jobReply {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var j jobReply
		s.do("GET", "/exports/"+id, token, nil).want(200).decode(&j)
		switch j.State {
		case "done":
			return j
		case "failed", "revoked", "expired":
			s.t.Fatalf("export %s ended %s: %s", id, j.State, j.Error)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("export %s still %s (%d/%d) after 60s", id, j.State, j.Progress.Done, j.Progress.Total)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get downloads link (a path with query) with extra header pairs.
func (s *server) get(method, link string, hdr ...string) reply {
	s.t.Helper()
	return s.do(method, link, "", nil, hdr...)
}

type exportLine struct {
	Conv     string `json:"conv"`
	Seq      int64  `json:"seq"`
	Kind     string `json:"kind"`
	Body     string `json:"body"`
	Recalled bool   `json:"recalled"`
	Sender   string `json:"sender"`
}

// readArtifact gunzips an artifact and returns its lines, checking that
// every line's keys are sorted.
func readArtifact(t *testing.T, b []byte) []exportLine {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header mtime %v name %q, want none", zr.ModTime, zr.Name)
	}
	var out []exportLine
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.Token()
		var keys []string
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, k.(string))
			var v any
			dec.Decode(&v)
		}
		if !sortedStrings(keys) {
			t.Fatalf("line keys not sorted: %s", sc.Bytes())
		}
		var l exportLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedStrings(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// withQuery returns link with one query parameter replaced.
func withQuery(t *testing.T, link, key, value string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestExportSourceCases is the thirteen cases of source document 001 §6
// with equivalent figures, on both stores, through the real HTTP API, the
// real worker and real files.
func TestExportSourceCases(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T, o parley.Options) parley.Store) {
		clock := &testClock{}
		s := start(t, open(t, parley.Options{}), serverOptions{now: clock.Now})
		ctx := context.Background()
		anaTok := s.user("ana", parley.RoleAdmin)
		benTok := s.user("ben", parley.RoleUser)
		cyTok := s.user("cy", parley.RoleUser)
		ana := principal(t, s, anaTok)
		send := func(p parley.Principal, conv string, n int) {
			t.Helper()
			for i := 0; i < n; i++ {
				if _, err := s.store.Send(ctx, p, parley.SendRequest{Conv: conv, CMID: parley.NewID(), Body: fmt.Sprintf("%s message %d", conv, i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		mustConv := func(id string, members ...string) {
			t.Helper()
			if _, err := s.store.CreateConversation(ctx, ana, parley.NewConversation{ID: id, Kind: parley.KindGroup, Title: id, Members: members}); err != nil {
				t.Fatal(err)
			}
		}
		// c-team: ben joins after 50 messages (his range starts at his
		// join, seq 52), then 500 more (53..552).
		mustConv("c-team", "ana")
		send(ana, "c-team", 50)
		if _, err := s.store.AddMember(ctx, ana, "c-team", "ben"); err != nil {
			t.Fatal(err)
		}
		send(ana, "c-team", 500)
		// c-big: ben from the start; 430 messages (3..432), his leave (433),
		// then 10 he must not get.
		mustConv("c-big", "ana", "ben")
		send(ana, "c-big", 430)
		if _, err := s.store.RemoveMember(ctx, ana, "c-big", "ben"); err != nil {
			t.Fatal(err)
		}
		send(ana, "c-big", 10)
		// c-private: never his.
		mustConv("c-private", "ana", "cy")
		send(ana, "c-private", 5)
		// A recall before the snapshot (seq 62, like the source's #60).
		if _, err := s.store.Recall(ctx, ana, parley.RecallRequest{Conv: "c-team", Target: 62, CMID: parley.NewID()}); err != nil {
			t.Fatal(err)
		}

		// Case 1–3: create, replay, same key other body.
		job := s.createExport(benTok, "k1", "all", http.StatusAccepted)
		if job.State != "queued" || job.Replayed || job.JobID == "" {
			t.Fatalf("new job %+v", job)
		}
		again := s.createExport(benTok, "k1", "all", http.StatusOK)
		if again.JobID != job.JobID || !again.Replayed {
			t.Fatalf("replay %+v, want job %s replayed", again, job.JobID)
		}
		s.createExport(benTok, "k1", "conv:c-team", http.StatusUnprocessableEntity, parley.CodeIdempotencyMismatch)
		s.createExport(benTok, "k9", "conv:c-private", http.StatusNotFound, parley.CodeNotMember)
		s.createExport(benTok, "", "all", http.StatusBadRequest, parley.CodeInvalidArgument)
		s.createExport(benTok, "k9", "everything", http.StatusBadRequest, parley.CodeInvalidArgument)
		s.createExport("", "k9", "all", http.StatusUnauthorized, parley.CodeUnauthenticated)

		// After the snapshot: a recall of seq 72, a new message, ben removed
		// from c-team, cy added to c-big. None may show in the export.
		if _, err := s.store.Recall(ctx, ana, parley.RecallRequest{Conv: "c-team", Target: 72, CMID: parley.NewID()}); err != nil {
			t.Fatal(err)
		}
		send(ana, "c-team", 1)
		if _, err := s.store.RemoveMember(ctx, ana, "c-team", "ben"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.AddMember(ctx, ana, "c-big", "cy"); err != nil {
			t.Fatal(err)
		}
		s.runExports()

		// Case 4: status with a signed link.
		done := s.waitExport(benTok, job.JobID)
		if done.Progress.Total != 6 || done.Progress.Done != 6 {
			t.Errorf("progress %+v, want 6/6 (c-big 430 = 3 shards, c-team 500 = 3)", done.Progress)
		}
		if !strings.HasPrefix(done.URL, "/download/"+job.JobID+"?") || len(done.SHA256) != 64 || done.Bytes <= 0 {
			t.Fatalf("done job %+v", done)
		}
		s.do("GET", "/exports/"+job.JobID, cyTok, nil).want(http.StatusNotFound, parley.CodeNotFound)
		s.do("GET", "/exports/nope", benTok, nil).want(http.StatusNotFound, parley.CodeNotFound)

		full := s.get("GET", done.URL).want(http.StatusOK)
		etag := `"` + done.SHA256 + `"`
		for k, v := range map[string]string{"ETag": etag, "Content-Type": "application/gzip", "Cache-Control": "private, no-store", "Accept-Ranges": "bytes"} {
			if got := full.header.Get(k); got != v {
				t.Errorf("%s: %q, want %q", k, got, v)
			}
		}
		if sum(full.body) != done.SHA256 || int64(len(full.body)) != done.Bytes {
			t.Fatalf("artifact %d bytes sha %s, job says %d %s", len(full.body), sum(full.body), done.Bytes, done.SHA256)
		}

		// The snapshot: c-big 3..432, c-team 53..552, no c-private; the
		// recall before it empties seq 62, the one after leaves 72 alone.
		lines := readArtifact(t, full.body)
		var want []string
		for seq := 3; seq <= 432; seq++ {
			want = append(want, "c-big/"+strconv.Itoa(seq))
		}
		for seq := 53; seq <= 552; seq++ {
			want = append(want, "c-team/"+strconv.Itoa(seq))
		}
		var got []string
		for _, l := range lines {
			got = append(got, l.Conv+"/"+strconv.FormatInt(l.Seq, 10))
			if l.Kind != "message" {
				t.Errorf("line %s/%d is a %s", l.Conv, l.Seq, l.Kind)
			}
			switch {
			case l.Conv == "c-team" && l.Seq == 62:
				if !l.Recalled || l.Body != "" {
					t.Errorf("seq 62 (recalled before the snapshot): %+v", l)
				}
			case l.Recalled || l.Body == "":
				t.Errorf("line %+v recalled or empty", l)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("exported %d lines, want %d (first %v, last %v)", len(got), len(want), got[:min(3, len(got))], got[max(0, len(got)-3):])
		}

		// Case 5–7: a broken download resumed with Range and If-Range.
		resp, err := http.Get(s.URL + done.URL)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 1000)
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rest := s.get("GET", done.URL, "Range", "bytes=1000-", "If-Range", etag).want(http.StatusPartialContent)
		if cr := rest.header.Get("Content-Range"); cr != fmt.Sprintf("bytes 1000-%d/%d", done.Bytes-1, done.Bytes) {
			t.Errorf("Content-Range %q", cr)
		}
		if sum(append(head, rest.body...)) != done.SHA256 {
			t.Error("resumed download differs from the artifact")
		}

		// Case 8 and the guards: ranges that cannot be satisfied, a stale
		// If-Range, HEAD, a unit we do not serve.
		for _, rg := range []string{fmt.Sprintf("bytes=%d-", done.Bytes), "bytes=-0"} {
			r := s.get("GET", done.URL, "Range", rg).want(http.StatusRequestedRangeNotSatisfiable)
			if cr := r.header.Get("Content-Range"); cr != fmt.Sprintf("bytes */%d", done.Bytes) {
				t.Errorf("Range %s: Content-Range %q", rg, cr)
			}
		}
		if r := s.get("GET", done.URL, "Range", "bytes=100-", "If-Range", `"0000"`).want(http.StatusOK); sum(r.body) != done.SHA256 {
			t.Error("stale If-Range: not the full artifact")
		}
		s.get("HEAD", done.URL, "Range", "bytes=0-9").want(http.StatusOK)
		if r := s.get("GET", done.URL, "Range", "items=0-9").want(http.StatusOK); sum(r.body) != done.SHA256 {
			t.Error("unknown range unit: not the full artifact")
		}

		// Case 13: links bound to job, user and time; keys per user.
		s.get("GET", withQuery(t, done.URL, "u", "cy")).want(http.StatusForbidden, parley.CodePermissionDenied)
		u, _ := url.Parse(done.URL)
		bad := []byte(u.Query().Get("sig"))
		bad[0] ^= 1
		if bad[0] == '/' || bad[0] == ':' {
			bad[0] = 'a'
		}
		s.get("GET", withQuery(t, done.URL, "sig", string(bad))).want(http.StatusForbidden, parley.CodePermissionDenied)
		s.get("GET", withQuery(t, done.URL, "kid", "nope")).want(http.StatusForbidden, parley.CodePermissionDenied)
		clock.advance(httpapi.LinkTTL + time.Second)
		s.get("GET", done.URL).want(http.StatusForbidden, parley.CodePermissionDenied)
		clock.reset()
		other := s.createExport(cyTok, "k1", "all", http.StatusAccepted)
		if other.JobID == job.JobID {
			t.Error("two users' key k1 gave one job")
		}

		// Case 13 continued: revoked → 410; a disabled owner → 403.
		second := s.createExport(benTok, "k2", "conv:c-big", http.StatusAccepted)
		secondDone := s.waitExport(benTok, second.JobID)
		s.do("POST", "/api/admin/exports/"+job.JobID+"/revoke", anaTok, nil).want(http.StatusOK)
		s.get("GET", done.URL).want(http.StatusGone, parley.CodeOriginalExpired)
		var revoked jobReply
		s.do("GET", "/exports/"+job.JobID, benTok, nil).want(200).decode(&revoked)
		if revoked.State != "revoked" || revoked.URL != "" {
			t.Errorf("revoked job %+v", revoked)
		}
		s.get("GET", secondDone.URL).want(http.StatusOK)
		s.do("POST", "/api/admin/users/ben/disable", anaTok, nil).want(http.StatusOK)
		s.get("GET", secondDone.URL).want(http.StatusForbidden, parley.CodePermissionDenied)
		if !strings.Contains(s.logs.String(), "job="+second.JobID) {
			t.Error("downloads are not logged with their job")
		}
		if m := s.scrape(); !strings.Contains(m, `parley_export_downloads_total{code="403"}`) || !strings.Contains(m, `parley_export_downloads_total{code="206"}`) {
			t.Error("downloads are not counted by status in /metrics")
		}
	})
}

// TestExportLimits: the per-user limit of jobs in progress (429 with
// Retry-After, separate from the rate limiter) and the access mode.
func TestExportLimits(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T, o parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "export: {max_active: 1}\n"})
		tok := s.user("ben", parley.RoleUser)
		first := s.createExport(tok, "a", "all", http.StatusAccepted)
		r := s.do("POST", "/exports", tok, map[string]string{"scope": "all"}, "Idempotency-Key", "b").want(http.StatusTooManyRequests, parley.CodeRateLimited)
		if r.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		s.createExport(tok, "a", "all", http.StatusOK) // a replay still answers
		s.runExports()
		s.waitExport(tok, first.JobID)
		// A conversation since the first export, so "b" is no reuse of it.
		if _, err := s.store.CreateConversation(context.Background(), principal(t, s, tok),
			parley.NewConversation{ID: "c-ben", Kind: parley.KindGroup, Title: "ben's"}); err != nil {
			t.Fatal(err)
		}
		s.createExport(tok, "b", "all", http.StatusAccepted) // done frees a place

		s.writeConfig("access: {exports: {mode: CLOSED}}\n")
		eventually(t, "exports closed", func() bool {
			return s.do("POST", "/exports", tok, map[string]string{"scope": "all"}, "Idempotency-Key", "c").status == http.StatusForbidden
		})
	})
}
