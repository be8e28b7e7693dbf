package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeRetentionWorker: `parley serve --retention-every 200ms` applies
// a conversation's retention policy by itself: after an admin sets a
// policy, the old events go without anyone calling purge, and the audit
// log shows the purge by system:retention. A bad interval is a usage
// error, and PARLEY_RETENTION_EVERY sets it too.
func TestServeRetentionWorker(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--retention-every", "10ms"},
		{"serve", "--retention-every", "-1s"},
	} {
		var ue usageError
		if err := run(context.Background(), append([]string{"parley"}, args...), func(string) string { return "" }, strings.NewReader(""), io.Discard, io.Discard); !errors.As(err, &ue) {
			t.Errorf("parley %q: %v, want a usage error (exit 2)", args, err)
		}
	}
	getenv := func(k string) string {
		if k == "PARLEY_RETENTION_EVERY" {
			return "5ms"
		}
		return ""
	}
	var ue usageError
	if err := run(context.Background(), []string{"parley", "serve"}, getenv, strings.NewReader(""), io.Discard, io.Discard); !errors.As(err, &ue) {
		t.Errorf("PARLEY_RETENTION_EVERY=5ms: %v, want a usage error", err)
	}

	p := serveArgs(t, "--demo", "--retention-every", "200ms")
	ana := demoToken(t, p.http, "ana")
	call := func(method, path string, body any, hdr ...string) []byte {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, p.http+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+ana)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	for i := range 3 {
		call("POST", "/api/convs/c-team/messages", map[string]string{"body": "old news"}, "Idempotency-Key", fmt.Sprintf("old-%d", i))
	}
	var c struct {
		Head   int64
		MinSeq int64 `json:"min_seq"`
	}
	json.Unmarshal(call("GET", "/api/admin/convs/c-team", nil), &c)
	if c.MinSeq != 1 {
		t.Fatalf("c-team before a policy: %+v", c)
	}
	call("PUT", "/api/admin/convs/c-team/retention", map[string]any{"keep_last": 1})

	deadline := time.Now().Add(20 * time.Second)
	for c.MinSeq != c.Head {
		if time.Now().After(deadline) {
			t.Fatalf("c-team not purged by the worker within 20s: %+v", c)
		}
		time.Sleep(100 * time.Millisecond)
		json.Unmarshal(call("GET", "/api/admin/convs/c-team", nil), &c)
	}
	var audit struct {
		Entries []struct{ Operator, Action, Target, Outcome string }
	}
	json.Unmarshal(call("GET", "/api/admin/audit", nil), &audit)
	found := false
	for _, e := range audit.Entries {
		if e.Operator == "system:retention" {
			found = found || (e.Action == "conv.purge" && e.Target == "c-team" && e.Outcome == "ok")
		}
		if e.Operator == "ana" && e.Action == "conv.purge" {
			t.Errorf("a purge by ana in the audit log; nobody called purge: %+v", e)
		}
	}
	if !found {
		t.Errorf("no conv.purge of c-team by system:retention in %+v", audit.Entries)
	}
	// The purge is counted: keep_last 1 deleted at least the 3 old messages.
	m := scrape(t, p.http)
	if !regexp.MustCompile(`(?m)^parley_retention_purges_total [1-9]`).MatchString(m) ||
		!regexp.MustCompile(`(?m)^parley_retention_purged_events_total ([3-9]|[1-9][0-9])`).MatchString(m) {
		t.Errorf("retention metrics after a purge:\n%s", grepLines(m, "parley_retention_"))
	}
}
