package httpapi_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
)

// storeTimeoutConfig bounds every store call of a request at 1s (the
// setup runs before it is in force, so a loaded CI machine's slow login
// does not trip it).
const storeTimeoutConfig = "timeouts: {store: 1s}\n"

// withStoreTimeout starts a server, sets up ana and conversation g, then
// puts the store timeout in force.
func withStoreTimeout(t *testing.T, store parley.Store) (*server, string) {
	t.Helper()
	s := start(t, store, serverOptions{})
	ana := s.user("ana", parley.RoleUser)
	s.do("POST", "/api/convs", ana, map[string]any{"id": "g"}).want(201)
	root := s.user("root", parley.RoleAdmin) // logged in before the 1s bound: a login under load can take longer
	s.writeConfig(storeTimeoutConfig)
	eventually(t, "the store timeout in force", func() bool {
		return strings.Contains(s.do("GET", "/api/admin/config", root, nil).want(200).String(), `"store":"1s"`)
	})
	return s, ana
}

// landsOnce retries the send until the store answers and checks that the
// message exists exactly once.
func landsOnce(t *testing.T, s *server, ana string) {
	t.Helper()
	eventually(t, "the retry to land", func() bool {
		return s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k").status != 503
	})
	page := s.do("GET", "/api/convs/g/events?after=0", ana, nil).want(200).frame()
	n := 0
	for _, e := range page.Events {
		if e.Kind == "message" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d messages after the retries, want 1", n)
	}
}

// TestStoreTimeoutUnavailable: a store that does not answer in time (a
// conversation row locked by someone else, an exhausted connection pool)
// makes requests answer 503 UNAVAILABLE within the configured timeout,
// never hang; once the store is free, a retry with the same key lands
// exactly once.
func TestStoreTimeoutUnavailable(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.WithPoolSize(pgtest.DSN(t), 1)
		store, err := postgres.Open(context.Background(), dsn, parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		s, ana := withStoreTimeout(t, store)

		// Someone else holds the conversation row.
		ctx := context.Background()
		other, err := pgx.Connect(ctx, pgtest.Libpq(dsn))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close(ctx) })
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM conversations WHERE id = 'g' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		// Two sends at once: one waits on the row lock holding the pool's
		// only connection, the other waits for the pool.
		var wg sync.WaitGroup
		replies := make([]reply, 2)
		for i := range replies {
			wg.Go(func() {
				replies[i] = s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k")
			})
		}
		began := time.Now()
		wg.Wait()
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("requests took %v with a 1s store timeout", d)
		}
		for _, r := range replies {
			r.want(503, parley.CodeUnavailable)
		}
		tx.Rollback(ctx)
		landsOnce(t, s, ana)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "parley.db")
		store, err := sqlite.Open(context.Background(), file, parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		s, ana := withStoreTimeout(t, store)

		// Another process's write transaction holds the file.
		other, err := sql.Open("sqlite", "file:"+file)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		conn, err := other.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k").want(503, parley.CodeUnavailable)
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("request took %v with a 1s store timeout", d)
		}
		conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		landsOnce(t, s, ana)
	})
}
