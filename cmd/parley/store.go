package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/secretkey"
	"github.com/parleychat/parley/sqlite"
)

// storeFlags are the flags of every command that opens the store.
type storeFlags struct {
	db      string
	dataDir string
	keyFile string
	log     *slog.Logger // warnings of the key file; nil: none
	// createKey: a missing key file is created (serve). The tools (user,
	// conv, migrate) only read one: with none at the default path they open
	// the store without a key, which a store whose secrets are sealed
	// refuses, naming the flag; they never make a key nobody else has.
	createKey bool
}

func (f *storeFlags) register(fs interface {
	StringVar(p *string, name, value, usage string)
}) {
	fs.StringVar(&f.db, "db", "", "store: sqlite:FILE or postgres://USER:PASSWORD@HOST/DB (empty: sqlite:DATA-DIR/parley.db)")
	fs.StringVar(&f.dataDir, "data-dir", "./parley-data", "directory for the embedded database and local files")
	fs.StringVar(&f.keyFile, "secret-key-file", "", "key file that seals the secrets the store keeps; every gateway of one database needs the same (empty: DATA-DIR/secret.key, created when missing)")
}

// keyPath is the secret key file's path.
func (f *storeFlags) keyPath() string {
	if f.keyFile != "" {
		return f.keyFile
	}
	return filepath.Join(f.dataDir, "secret.key")
}

// sealer loads the secret key file (creating it when missing, with
// createKey), warning when others than its owner may read it.
func (f *storeFlags) sealer() (parley.Sealer, error) {
	path := f.keyPath()
	if !f.createKey {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && f.keyFile == "" {
			return nil, nil
		}
	}
	ring, created, err := secretkey.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--secret-key-file: %w", err)
	}
	if f.log == nil {
		return ring, nil
	}
	if created {
		f.log.Info("created a new secret key file; back it up apart from the database", "file", path)
	}
	if loose, err := secretkey.LooseMode(path); err == nil && loose {
		f.log.Warn("the secret key file is readable by others than its owner: chmod 600 it", "file", path)
	}
	return ring, nil
}

// dsn returns the store's DSN, the default being the embedded file.
func (f *storeFlags) dsn() string {
	if f.db != "" {
		return f.db
	}
	return "sqlite:" + filepath.Join(f.dataDir, "parley.db")
}

// kind names the store a DSN selects; the choice is an explicit switch on
// the scheme.
func storeKind(dsn string) (string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		return "sqlite", nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "postgres", nil
	}
	return "", usagef("--db %q: want sqlite:FILE or postgres://…", redact(dsn))
}

// openStore opens (and migrates) the store the flags name.
func (f *storeFlags) open(ctx context.Context, opts parley.Options) (parley.Store, string, error) {
	dsn := f.dsn()
	kind, err := storeKind(dsn)
	if err != nil {
		return nil, "", err
	}
	if opts.Secrets, err = f.sealer(); err != nil {
		return nil, "", err
	}
	store, err := f.openKind(ctx, kind, dsn, opts)
	if errors.Is(err, parley.ErrSecretKey) {
		return nil, "", fmt.Errorf("--secret-key-file %s: %w (every gateway of one database needs the same key file)", f.keyPath(), err)
	}
	return store, kind, err
}

// openKind opens the store of kind at dsn.
func (f *storeFlags) openKind(ctx context.Context, kind, dsn string, opts parley.Options) (parley.Store, error) {
	switch kind {
	case "sqlite":
		file := strings.TrimPrefix(dsn, "sqlite:")
		if dir := filepath.Dir(file); dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("data directory: %w", err)
			}
		}
		db, err := sqlite.Open(ctx, file, opts)
		if err != nil {
			return nil, err // not a nil *sqlite.DB in a non-nil interface
		}
		return db, nil
	default:
		db, err := postgres.Open(ctx, dsn, opts)
		if err != nil {
			return nil, err
		}
		return db, nil
	}
}

// openSeeded opens the store for serve and, with --demo, creates the demo
// data.
func (f *serveFlags) openSeeded(ctx context.Context) (parley.Store, error) {
	store, _, err := f.open(ctx, f.tokens.options(parley.Options{}))
	if err != nil {
		return nil, err
	}
	if f.demo {
		lines, err := seedDemo(ctx, store)
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("demo data: %w", err)
		}
		if f.stdout != nil {
			fmt.Fprintf(f.stdout, "%s\n%s\n", strings.Join(lines, "\n"), f.demoWhere())
		}
	}
	return store, nil
}

// firstAttemptTimeout bounds serve's first PostgreSQL attempt, made before
// it listens: a database that does not answer by then is waited for while
// the server already answers /healthz.
const firstAttemptTimeout = 3 * time.Second

// firstAttempt is serve's first try at the PostgreSQL store.
func (f *serveFlags) firstAttempt(ctx context.Context) (parley.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, firstAttemptTimeout)
	defer cancel()
	return f.openSeeded(ctx)
}

// The backoff of serve's store attempts while PostgreSQL is unreachable:
// it doubles from storeRetryMin up to storeRetryMax.
const (
	storeRetryMin = 250 * time.Millisecond
	storeRetryMax = 5 * time.Second
)

// openWhenReachable calls open until it succeeds, retrying with capped
// exponential backoff while the error says the database is unreachable
// (postgres.Unreachable) and logging each failed attempt at warn. Any other
// error (a wrong password, a missing database, a failing migration) is
// returned at once, as is ctx's error when ctx ends.
func openWhenReachable(ctx context.Context, log *slog.Logger, open func(context.Context) (parley.Store, error)) (parley.Store, error) {
	wait := storeRetryMin
	for attempt := 1; ; attempt++ {
		store, err := open(ctx)
		if err == nil {
			if attempt > 1 {
				log.Info("store reachable; serving", "attempts", attempt)
			}
			return store, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !postgres.Unreachable(err) {
			return nil, err
		}
		log.Warn("store unreachable; retrying", "attempt", attempt, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, storeRetryMax)
	}
}

// redact hides a password in a DSN for messages.
func redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if colon := strings.Index(rest[:at], ":"); colon >= 0 {
				return dsn[:i+3] + rest[:colon] + ":***" + rest[at:]
			}
		}
	}
	return dsn
}
