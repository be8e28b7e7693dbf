package export

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/metrics"
)

// stallStore is a real store whose job reads stop until release is closed
// or their context ends: a database that stopped answering.
type stallStore struct {
	parley.Store
	entered chan string // one value per stalled call, when there is room
	release chan struct{}

	mu    sync.Mutex
	calls map[string]int
}

func newStallStore(st parley.Store) *stallStore {
	return &stallStore{Store: st, entered: make(chan string, 16), release: make(chan struct{}), calls: map[string]int{}}
}

func (s *stallStore) stall(ctx context.Context, what string) error {
	s.mu.Lock()
	s.calls[what]++
	s.mu.Unlock()
	select {
	case s.entered <- what:
	default:
	}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stallStore) count(what string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[what]
}

func (s *stallStore) ExportJob(ctx context.Context, id string) (parley.ExportJob, error) {
	if err := s.stall(ctx, "ExportJob"); err != nil {
		return parley.ExportJob{}, err
	}
	return s.Store.ExportJob(ctx, id)
}

func (s *stallStore) ExportJobs(ctx context.Context, ids []string) ([]parley.ExportJob, error) {
	if err := s.stall(ctx, "ExportJobs"); err != nil {
		return nil, err
	}
	return s.Store.ExportJobs(ctx, ids)
}

// orphans puts the artifacts of n jobs that do not exist into dir.
func orphans(t *testing.T, dir string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		id := parley.NewID()
		if err := os.WriteFile(ArtifactPath(dir, id), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestKickWhileJanitorStalls: a janitor sweep whose store call does not
// come back holds nothing Kick (and so POST /exports) waits on; the sweep
// reads every job with files in one call, and that call ends at
// timeouts.store when the store never answers.
func TestKickWhileJanitorStalls(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		t.Run("kick", func(t *testing.T) {
			st := newStallStore(open(t))
			dir := t.TempDir()
			ids := orphans(t, dir, 3)
			w := NewWorker(Options{Store: st, Dir: dir})
			swept := make(chan struct{})
			go func() { defer close(swept); w.Sweep(ctxT(t)) }()
			select {
			case <-st.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the sweep never read the jobs")
			}
			kicked := make(chan struct{})
			go func() { w.Kick(); close(kicked) }()
			select {
			case <-kicked:
			case <-time.After(30 * time.Second):
				// The store call is still stalled (nothing released it):
				// Kick is waiting on it.
				t.Error("Kick waited for the janitor's stalled store call")
			}
			close(st.release)
			<-swept
			<-kicked
			if got, want := st.count("ExportJobs")+st.count("ExportJob"), 1; got != want {
				t.Errorf("the sweep made %d job reads for %d jobs; want %d", got, len(ids), want)
			}
			for _, id := range ids {
				if _, err := os.Stat(ArtifactPath(dir, id)); !os.IsNotExist(err) {
					t.Errorf("artifact of deleted job %s: %v; want it deleted", id, err)
				}
			}
		})
		t.Run("deadline", func(t *testing.T) {
			st := newStallStore(open(t))
			dir := t.TempDir()
			ids := orphans(t, dir, 2)
			w := NewWorker(Options{Store: st, Dir: dir, Config: cfg(t, "timeouts:\n  store: 100ms\n")})
			swept := make(chan struct{})
			go func() { defer close(swept); w.Sweep(ctxT(t)) }()
			select {
			case <-swept:
			case <-time.After(30 * time.Second):
				close(st.release)
				t.Fatal("the sweep's stalled store call had no deadline")
			}
			// Nothing was decided without the jobs' states.
			for _, id := range ids {
				if _, err := os.Stat(ArtifactPath(dir, id)); err != nil {
					t.Errorf("artifact of %s: %v; want it kept while the store did not answer", id, err)
				}
			}
		})
	})
}

// TestDownloadStoreDeadline: a download whose store call does not come back
// ends at its deadline with 503 UNAVAILABLE and Retry-After, not a hang
// and not a terminal code.
func TestDownloadStoreDeadline(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		st := newStallStore(open(t))
		ring, err := NewKeyring(testKeys(t), "k1")
		if err != nil {
			t.Fatal(err)
		}
		h := &Download{
			Store: st, Dir: t.TempDir(), Keys: func() *Keyring { return ring },
			Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(metrics.Options{}),
			Timeout: func() time.Duration { return 100 * time.Millisecond },
		}
		mux := http.NewServeMux()
		mux.Handle("GET /download/{id}", h)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(st.release) })
		client := &http.Client{Timeout: 30 * time.Second}
		res, err := client.Get(srv.URL + ring.Link(parley.NewID(), "ana", time.Now().Add(time.Hour)))
		if err != nil {
			t.Fatalf("download: %v (the handler's store call had no deadline)", err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		r := resp{status: res.StatusCode, h: res.Header, body: body}
		if r.status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Errorf("status %d, Retry-After %q; want 503 with Retry-After", r.status, res.Header.Get("Retry-After"))
		}
		if p := r.problem(t); p.Code != parley.CodeUnavailable {
			t.Errorf("code %s; want UNAVAILABLE", p.Code)
		}
		if st.count("ExportJob") != 1 {
			t.Errorf("%d job reads; want 1", st.count("ExportJob"))
		}
	})
}
