package httpapi_test

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/export"
)

// TestExportReuseAndKept: through the real HTTP API, worker and files, an
// identical POST /exports under another key answers the live job (200,
// same job_id, replayed and reused); a new event makes a new job; and with
// export.max_kept 2 a third artifact expires the first, whose link then
// answers 410 and whose file the janitor deletes.
func TestExportReuseAndKept(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T, o parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "export: {max_kept: 2}\n"})
		ctx := context.Background()
		tok := s.user("ben", parley.RoleUser)
		ben := principal(t, s, tok)
		if _, err := s.store.CreateConversation(ctx, ben, parley.NewConversation{ID: "c-ben", Kind: parley.KindGroup, Title: "notes"}); err != nil {
			t.Fatal(err)
		}
		send := func() {
			t.Helper()
			if _, err := s.store.Send(ctx, ben, parley.SendRequest{Conv: "c-ben", CMID: parley.NewID(), Body: "note"}); err != nil {
				t.Fatal(err)
			}
		}
		send()
		s.runExports()

		first := s.createExport(tok, "k1", "all", http.StatusAccepted)
		firstDone := s.waitExport(tok, first.JobID)

		var reused struct {
			jobReply
			Reused bool `json:"reused"`
		}
		s.do("POST", "/exports", tok, map[string]string{"scope": "all"}, "Idempotency-Key", "k2").want(http.StatusOK).decode(&reused)
		if reused.JobID != first.JobID || !reused.Replayed || !reused.Reused || reused.State != "done" || reused.SHA256 != firstDone.SHA256 {
			t.Fatalf("identical request under another key: %+v, want job %s replayed and reused", reused, first.JobID)
		}
		if reused.URL == "" {
			t.Error("a reused done job comes without a download link")
		}
		// A replay of the original key is a plain replay.
		if again := s.createExport(tok, "k1", "all", http.StatusOK); again.JobID != first.JobID || !again.Replayed {
			t.Errorf("replay of k1: %+v", again)
		}
		// Another scope is another artifact.
		conv := s.createExport(tok, "k-conv", "conv:c-ben", http.StatusAccepted)
		s.waitExport(tok, conv.JobID)

		send()
		second := s.createExport(tok, "k3", "all", http.StatusAccepted)
		if second.JobID == first.JobID {
			t.Fatal("a new event still reused the first job")
		}
		s.waitExport(tok, second.JobID)

		// ben now has three artifacts (k1, k-conv, k3) and keeps two: the
		// first finished goes.
		var gone jobReply
		s.do("GET", "/exports/"+first.JobID, tok, nil).want(http.StatusOK).decode(&gone)
		if gone.State != "expired" || gone.URL != "" {
			t.Errorf("the oldest artifact after the bound: %+v, want expired without a link", gone)
		}
		s.get("GET", firstDone.URL).want(http.StatusGone, parley.CodeOriginalExpired)
		s.sweepExports()
		if _, err := os.Stat(export.ArtifactPath(s.exportDir, first.JobID)); !os.IsNotExist(err) {
			t.Errorf("the expired artifact's file after a sweep: %v, want it deleted", err)
		}
		if _, err := os.Stat(export.ArtifactPath(s.exportDir, second.JobID)); err != nil {
			t.Errorf("the newest artifact's file: %v", err)
		}
		// The newest live artifact of the scope answers; the one of the
		// other scope predates the new event.
		if n := s.createExport(tok, "k4", "all", http.StatusOK); n.JobID != second.JobID {
			t.Errorf("all after the bound: %+v, want the live job %s", n, second.JobID)
		}
		if n := s.createExport(tok, "k5", "conv:c-ben", http.StatusAccepted); n.JobID == conv.JobID {
			t.Errorf("conv scope after a new event reused %s", conv.JobID)
		}
	})
}
