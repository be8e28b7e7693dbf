package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley/postgres/pgtest"
)

// TestExportLinksAcrossGateways: two gateways on one PostgreSQL database,
// each with its own data directory (so their own data-directory keys) and
// no signing keys configured, sharing --export-dir. A link either hands out
// downloads on the other; and serve without --export-dir on PostgreSQL
// refuses to start, naming the flag.
func TestExportLinksAcrossGateways(t *testing.T) {
	t.Parallel()
	b := backend{name: "postgres", dir: t.TempDir()}
	b.db = pgtest.DSN(t) // skips without PARLEY_TEST_POSTGRES
	s := b.store(t)
	tokens := seed(t, s, "ben/phone")
	fill(t, s, "g1", 40)

	t.Run("no export dir", func(t *testing.T) {
		var out bytes.Buffer
		err := run(context.Background(), []string{"parley", "serve", "--addr", "127.0.0.1:0", "--db", b.db, "--data-dir", t.TempDir()},
			func(string) string { return "" }, strings.NewReader(""), &out, &out)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--export-dir") || !strings.Contains(err.Error(), "PARLEY_EXPORT_DIR") {
			t.Errorf("serve on PostgreSQL without --export-dir: %v; want a usage error naming --export-dir", err)
		}
	})

	shared := filepath.Join(b.dir, "shared-exports")
	gw := map[string]*proc{
		"a": serveEnv(t, nil, "--db", b.db, "--data-dir", filepath.Join(b.dir, "a"), "--export-dir", shared),
		"b": serveEnv(t, nil, "--db", b.db, "--data-dir", filepath.Join(b.dir, "b"), "--export-dir", shared, "--export-workers", "0"),
	}
	token := tokens["ben/phone"]
	call := func(t *testing.T, method, url, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "k1")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}
	status, body := call(t, http.MethodPost, gw["a"].http+"/exports", `{"scope":"all"}`)
	var created struct {
		JobID string `json:"job_id"`
	}
	if json.Unmarshal(body, &created); status != http.StatusAccepted || created.JobID == "" {
		t.Fatalf("create export on a: %d %s", status, body)
	}
	job := waitJob(t, s, created.JobID, gw["a"])

	for _, tc := range []struct{ from, to string }{{"a", "b"}, {"b", "a"}, {"a", "a"}} {
		t.Run("link of "+tc.from+" on "+tc.to, func(t *testing.T) {
			status, body := call(t, http.MethodGet, gw[tc.from].http+"/exports/"+job.ID, "")
			var st struct{ URL string }
			if json.Unmarshal(body, &st); status != http.StatusOK || st.URL == "" {
				t.Fatalf("status on %s: %d %s", tc.from, status, body)
			}
			res, err := http.Get(gw[tc.to].http + st.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(got)
			if res.StatusCode != http.StatusOK || hex.EncodeToString(sum[:]) != job.SHA256 {
				t.Errorf("download on %s of %s's link: %d, sha256 %x; want 200 with %s", tc.to, tc.from, res.StatusCode, sum, job.SHA256)
			}
		})
	}
}
