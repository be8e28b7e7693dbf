package postgres_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
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
	"github.com/parleychat/parley/storetest"
)

// dsnEnv names the server the tests use, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. The role
// must be allowed to create databases.
const dsnEnv = "PARLEY_TEST_POSTGRES"

func TestContract(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		t.Skip("PostgreSQL tests need a server: set " + dsnEnv + "=postgres://USER@HOST:5432/postgres?sslmode=disable (a role that may CREATE DATABASE)")
	}
	storetest.Run(t, &backend{dsn: dsn})
}

// backend gives every test a database of its own, copied from a template
// that was migrated once (CREATE DATABASE ... TEMPLATE is a file copy,
// much faster than running the migrations again).
type backend struct {
	dsn string

	once     sync.Once
	admin    *pgxpool.Pool // on the database the DSN names
	template string
	err      error
}

func (b *backend) setup() {
	ctx := context.Background()
	b.admin, b.err = pgxpool.New(ctx, b.dsn)
	if b.err == nil {
		b.template, b.err = makeTemplate(ctx, b.admin, b.dsn)
	}
}

// makeTemplate returns the template database for the current migrations,
// creating it when missing. Its name carries a hash of the migration files,
// so a changed migration gets a new template. Creation is serialised by a
// session advisory lock (several test binaries may start at once), built
// under another name and renamed when complete, and never connected to
// afterwards: CREATE DATABASE ... TEMPLATE fails while anyone is connected
// to the template.
func makeTemplate(ctx context.Context, admin *pgxpool.Pool, dsn string) (string, error) {
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no migrations found (%v)", err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(text))
		h.Write(text)
	}
	name := "parley_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]

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
	db, err := postgres.Open(ctx, withDatabase(dsn, build), parley.Options{})
	if err != nil {
		return "", err
	}
	db.Close()
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+ident(build)+` RENAME TO `+ident(name)); err != nil {
		return "", err
	}
	return name, nil
}

func (b *backend) New(t testing.TB, opts parley.Options) storetest.DB {
	t.Helper()
	b.once.Do(b.setup)
	if b.err != nil {
		t.Fatalf("postgres test setup: %v", b.err)
	}
	ctx := context.Background()
	name := "parley_t_" + strings.ToLower(rand.Text()[:16])
	if _, err := b.admin.Exec(ctx, `CREATE DATABASE `+ident(name)+` TEMPLATE `+ident(b.template)); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	// Registered first, so it runs last, after the stores have closed.
	t.Cleanup(func() {
		if _, err := b.admin.Exec(ctx, `DROP DATABASE `+ident(name)+` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	h := &handle{dsn: withDatabase(b.dsn, name), opts: opts}
	h.store = h.Open(t).(*postgres.DB)
	raw, err := pgxpool.New(ctx, withPoolSize(h.dsn, 2))
	if err != nil {
		t.Fatalf("raw pool: %v", err)
	}
	t.Cleanup(raw.Close)
	h.raw = raw
	return h
}

type handle struct {
	dsn   string
	opts  parley.Options
	store *postgres.DB
	raw   *pgxpool.Pool
}

func (h *handle) Store() parley.Store { return h.store }

func (h *handle) Open(t testing.TB) parley.Store {
	t.Helper()
	db, err := postgres.Open(context.Background(), withPoolSize(h.dsn, testPoolSize), h.opts)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (h *handle) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := h.raw.Exec(context.Background(), placeholders(query), args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func (h *handle) Int(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var v any
	if err := h.raw.QueryRow(context.Background(), placeholders(query), args...).Scan(&v); err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	switch n := v.(type) {
	case nil:
		return 0
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case bool:
		if n {
			return 1
		}
		return 0
	case float64:
		return int64(n)
	}
	// numeric (sum, avg) and anything else: let the server convert.
	var n int64
	if err := h.raw.QueryRow(context.Background(), `SELECT coalesce((`+placeholders(query)+`)::bigint, 0)`, args...).Scan(&n); err != nil {
		t.Fatalf("query %q as bigint: %v", query, err)
	}
	return n
}

func (h *handle) Backdate(t testing.TB, conv string, upTo int64, d time.Duration) {
	t.Helper()
	h.Exec(t, `UPDATE events SET created_at = created_at - ?::bigint * interval '1 microsecond' WHERE conv_id = ? AND seq <= ?`,
		d.Microseconds(), conv, upTo)
}

// placeholders turns the suite's ? placeholders into $1..$n, leaving
// quoted strings and identifiers alone.
func placeholders(q string) string {
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// withDatabase returns dsn pointed at database name.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		u.RawPath = ""
		return u.String()
	}
	return dsn + " dbname=" + name // keyword/value form: the last setting wins
}

// testPoolSize caps each test store's pool: the suite runs its behaviours in
// parallel (and one of them opens 32 stores), and the server's
// max_connections (100 by default) must hold them all.
const testPoolSize = 4

// withPoolSize returns dsn with pgxpool's pool_max_conns set to n.
func withPoolSize(dsn string, n int) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(n))
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " pool_max_conns=" + strconv.Itoa(n)
}
