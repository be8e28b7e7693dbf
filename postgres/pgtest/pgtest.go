// Package pgtest gives tests a PostgreSQL database of their own, from any
// package:
//
//	db, err := postgres.Open(ctx, pgtest.DSN(t), parley.Options{})
//
// The server comes from PARLEY_TEST_POSTGRES; without it the test is
// skipped with instructions, so a fresh machine passes and CI (which sets
// it) proves PostgreSQL too. Every database is a copy of a template that
// was migrated once (CREATE DATABASE ... TEMPLATE is a file copy, much
// faster than running the migrations again) and is dropped when the test
// ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
)

// Env names the server the tests use, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. The role
// must be allowed to create databases.
const Env = "PARLEY_TEST_POSTGRES"

// PoolSize is the pool_max_conns of the DSNs DSN returns. Suites run their
// tests in parallel (one contract behaviour opens 32 stores), and the
// server's max_connections (100 by default) must hold them all.
const PoolSize = 4

// DSN returns the connection string of a fresh, migrated, empty database
// of t's own, with pool_max_conns set to PoolSize. The database is dropped
// (connections and all) at t.Cleanup; DSN registers that first, so it runs
// after the cleanups of stores the test opens on it. Without
// PARLEY_TEST_POSTGRES the test is skipped.
func DSN(t testing.TB) string {
	t.Helper()
	s := Server(t)
	srv, err := setup(s)
	if err != nil {
		t.Fatalf("postgres test setup: %v", err)
	}
	ctx := context.Background()
	name := "parley_t_" + strings.ToLower(rand.Text()[:16])
	if _, err := srv.admin.Exec(ctx, `CREATE DATABASE `+ident(name)+` TEMPLATE `+ident(srv.template)); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := srv.admin.Exec(context.Background(), `DROP DATABASE `+ident(name)+` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return WithPoolSize(WithDatabase(s, name), PoolSize)
}

// Server returns the server DSN of PARLEY_TEST_POSTGRES as set (no
// database of the test's own: for tests of Open itself), or skips the test
// with instructions when it is unset.
func Server(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		t.Skip("PostgreSQL tests need a server: set " + Env + "=postgres://USER@HOST:5432/postgres?sslmode=disable (a role that may CREATE DATABASE)")
	}
	return dsn
}

// server is what the tests of one process share: a pool on the database
// the server DSN names, and the template.
type server struct {
	admin    *pgxpool.Pool
	template string
}

var (
	mu      sync.Mutex
	servers = map[string]*server{}
)

// setup returns the shared state for dsn, connecting and making the
// template on first use. A failure is not remembered: the next test tries
// again.
func setup(dsn string) (*server, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := servers[dsn]; ok {
		return s, nil
	}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	template, err := makeTemplate(ctx, admin, dsn)
	if err != nil {
		admin.Close()
		return nil, err
	}
	s := &server{admin: admin, template: template}
	servers[dsn] = s
	return s, nil
}

// makeTemplate returns the template database for the current migrations,
// creating it when missing. Its name carries a hash of the migration files,
// so a changed migration gets a new template. Creation is serialised by a
// session advisory lock (several test binaries may start at once), built
// under another name and renamed when complete, and never connected to
// afterwards: CREATE DATABASE ... TEMPLATE fails while anyone is connected
// to the template.
func makeTemplate(ctx context.Context, admin *pgxpool.Pool, dsn string) (string, error) {
	name, err := templateName(postgres.Migrations())
	if err != nil {
		return "", err
	}
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	const lock = 0x7061726c65792e74 // "parley.t"
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lock)); err != nil {
		return "", err
	}
	defer conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(lock))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	build := name + "_build"
	for _, q := range []string{
		`DROP DATABASE IF EXISTS ` + ident(build) + ` WITH (FORCE)`,
		`CREATE DATABASE ` + ident(build),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", err
		}
	}
	db, err := postgres.Open(ctx, WithDatabase(dsn, build), parley.Options{})
	if err != nil {
		return "", err
	}
	db.Close()
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+ident(build)+` RENAME TO `+ident(name)); err != nil {
		return "", err
	}
	return name, nil
}

// templateName is parley_tmpl_ and a hash of the migration files' names
// and contents.
func templateName(migrations fs.FS) (string, error) {
	files, err := fs.Glob(migrations, "*.sql")
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no migrations found (%v)", err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		text, err := fs.ReadFile(migrations, f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(text))
		h.Write(text)
	}
	return "parley_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// WithDatabase returns dsn pointed at database name.
func WithDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		u.RawPath = ""
		return u.String()
	}
	return dsn + " dbname=" + name // keyword/value form: the last setting wins
}

// WithPoolSize returns dsn with pgxpool's pool_max_conns set to n.
func WithPoolSize(dsn string, n int) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(n))
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " pool_max_conns=" + strconv.Itoa(n)
}

// Libpq returns dsn without the pgxpool settings (pool_*), which libpq
// tools such as psql and pgbench refuse.
func Libpq(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		for k := range q {
			if strings.HasPrefix(k, "pool_") {
				q.Del(k)
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	var kept []string
	for _, f := range strings.Fields(dsn) {
		if !strings.HasPrefix(f, "pool_") {
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}

// TrackCalls returns dsn with the run-time parameter track_functions=pl:
// sessions opened on it count their calls of plpgsql functions (such as
// parley_send_many), which WaitCalls reads. Setting it takes a superuser
// role, as PARLEY_TEST_POSTGRES's usually is.
func TrackCalls(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("track_functions", "pl")
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " track_functions=pl"
}

// WaitCalls waits until the database of dsn counts want calls of function
// fn by sessions opened with TrackCalls, and fails tb when it has not
// after 15 seconds. A session reports its counts when it has been idle for
// a second or when it ends: close the store (or end the process) that made
// the calls first.
func WaitCalls(tb testing.TB, dsn, fn string, want int64) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, Libpq(dsn))
	if err != nil {
		tb.Fatalf("count calls of %s: %v", fn, err)
	}
	defer conn.Close(ctx)
	var got int64
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Each statement its own transaction: a fresh snapshot of the counts.
		err := conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions WHERE funcname = $1`, fn).Scan(&got)
		switch {
		case err != nil:
			tb.Fatalf("count calls of %s: %v", fn, err)
		case got == want:
			return
		case time.Now().After(deadline):
			tb.Fatalf("PostgreSQL counts %d calls of %s, want %d", got, fn, want)
		}
	}
}
