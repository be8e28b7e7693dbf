package main

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleychat/parley/webpush"
)

// TestServePush: through `parley serve`, a browser subscription made over
// the API gets a push when another member sends: an RFC 8030 request to
// its endpoint (on 127.0.0.1, named by push.allow_endpoints), signed with
// the key GET /api/push/key gave, whose payload the subscription's key
// opens to the hint {conv, seq}. The sender's own device gets nothing.
func TestServePush(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		bk, err := ecdh.P256().GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		auth := make([]byte, 16)
		rand.Read(auth)
		type got struct {
			path, vapid, plain string
			err                error
		}
		pushes := make(chan got, 10)
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			plain, err := webpush.Decrypt(body, bk, auth)
			k, _, verr := webpush.VerifyAuthorization(r.Header.Get("Authorization"), "http://"+r.Host, time.Now())
			if verr != nil {
				err = verr
			}
			pushes <- got{r.URL.Path, k, string(plain), err}
			w.WriteHeader(http.StatusCreated)
		}))
		t.Cleanup(rc.Close)

		cfg := filepath.Join(t.TempDir(), "parley.yaml")
		if err := os.WriteFile(cfg, []byte("rate_limits: {}\npush:\n  allow_endpoints: [\"http://127.0.0.1:\"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := serveArgs(t, "--db", b.db, "--data-dir", b.dir, "--config", cfg, "--push-delay", "50ms")
		tokens := seed(t, b.store(t), "ana/d1", "ben/d1")
		call := func(method, path, token string, body any, want int) []byte {
			t.Helper()
			j, _ := json.Marshal(body)
			req, _ := http.NewRequest(method, p.http+path, bytes.NewReader(j))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "k-"+path)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != want {
				t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, out, want)
			}
			return out
		}
		var key struct{ Key string }
		json.Unmarshal(call("GET", "/api/push/key", tokens["ben/d1"], nil, 200), &key)
		enc := base64.RawURLEncoding
		for user, path := range map[string]string{"ben/d1": "/ben", "ana/d1": "/ana"} {
			call("POST", "/api/push/subscriptions", tokens[user], map[string]any{"endpoint": rc.URL + path, "expirationTime": nil,
				"keys": map[string]string{"p256dh": enc.EncodeToString(bk.PublicKey().Bytes()), "auth": enc.EncodeToString(auth)}}, 201)
		}
		var sent struct{ Seq int64 }
		json.Unmarshal(call("POST", "/api/convs/g1/messages", tokens["ana/d1"], map[string]string{"body": "hello ben"}, 201), &sent)
		select {
		case g := <-pushes:
			want := `{"conv":"g1","seq":` + itoa(sent.Seq) + `}`
			if g.err != nil || g.path != "/ben" || g.vapid != key.Key || g.plain != want {
				t.Errorf("push to %s: %q (key %q, %v); want %s to /ben signed by %q", g.path, g.plain, g.vapid, g.err, want, key.Key)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no push arrived\n%s", p.stderr())
		}
		select {
		case g := <-pushes:
			t.Errorf("a second push, to %s: %q", g.path, g.plain)
		case <-time.After(300 * time.Millisecond):
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
