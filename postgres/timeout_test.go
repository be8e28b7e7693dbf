package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// TestServerGuardsOnPooledConnections: every connection of the store's pool
// carries lock_timeout and idle_in_transaction_session_timeout, the
// defaults unless the DSN sets its own.
func TestServerGuardsOnPooledConnections(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		name, dsn          string
		wantLock, wantIdle string
	}{
		{"defaults", dsn, postgres.DefaultLockTimeout, postgres.DefaultIdleInTransactionTimeout},
		{"from the DSN", dsn + "&lock_timeout=1500ms&idle_in_transaction_session_timeout=42s", "1500ms", "42s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := postgres.Open(ctx, tc.dsn, parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// Every connection of the pool, not just the first one.
			pool := postgres.Pool(db)
			var conns []interface{ Release() }
			for i := range pgtest.PoolSize {
				c, err := pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
				var lock, idle string
				if err := c.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lock); err != nil {
					t.Fatal(err)
				}
				if err := c.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&idle); err != nil {
					t.Fatal(err)
				}
				if lock != tc.wantLock || idle != tc.wantIdle {
					t.Errorf("connection %d: lock_timeout %q, idle_in_transaction_session_timeout %q; want %q, %q",
						i, lock, idle, tc.wantLock, tc.wantIdle)
				}
			}
			for _, c := range conns {
				c.Release()
			}
		})
	}
}

// TestIdleLockHolderIsEnded: a pooled session that takes a conversation's
// row lock and then goes quiet inside its transaction (a gateway stopped
// between the two round trips of a send) is ended by the server; a send
// waiting behind it meanwhile is answered UNAVAILABLE by lock_timeout (the
// server's answer, not the caller's deadline, and never a terminal code),
// and its retry with the same key commits.
func TestIdleLockHolderIsEnded(t *testing.T) {
	t.Parallel() // it waits out the default idle timeout (10s)
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.DSN(t), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, u := range []string{"ana", "ben"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			t.Fatal(err)
		}
	}
	ana := parley.Principal{User: "ana", DeviceID: "phone", InstallID: "i1"}
	if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-lock", Kind: parley.KindGroup, Title: "t", Members: []string{"ben"}}); err != nil {
		t.Fatal(err)
	}

	holder, err := postgres.Pool(db).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT 1 FROM conversations WHERE id = 'c-lock' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	req := parley.SendRequest{Conv: "c-lock", CMID: "m1", Body: "hello"}
	var codes []parley.Code
	var sent parley.Sent
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatalf("the send never committed (codes %v): the idle lock holder was not ended", codes)
		}
		// Far above both defaults: an attempt that ends at this deadline
		// was not ended by the server.
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sent, err = db.Send(actx, ana, req)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("attempt %d hung until the caller's deadline: %v", attempt, err)
		}
		codes = append(codes, parley.ErrorCode(err))
		if c := parley.ErrorCode(err); c != parley.CodeUnavailable {
			t.Fatalf("attempt %d: code %s (%v); want UNAVAILABLE", attempt, c, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(codes) == 0 {
		t.Error("the first send went through although the row was locked")
	}
	if sent.Seq == 0 || sent.Dup {
		t.Errorf("sent %+v; want a new event", sent)
	}
	// The holder's session is gone: the server ended it.
	if _, err := holder.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("the idle lock holder's session still works")
	}
	t.Logf("answers before the commit: %q", codes)
}

// TestRollbackAfterDeadline: a write whose context ends while it holds a
// row lock is rolled back on a context of its own: the lock goes at once
// and the connection stays in the pool (a rollback on the expired context
// would fail and cost the connection).
func TestRollbackAfterDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.DSN(t), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ana := parley.Principal{User: "ana", DeviceID: "phone", InstallID: "i1"}
	if _, err := db.CreateUser(ctx, parley.NewUser{ID: "ana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-rb", Kind: parley.KindGroup, Title: "t"}); err != nil {
		t.Fatal(err)
	}
	pool := postgres.Pool(db)
	wctx, cancel := context.WithCancel(ctx)
	errGone := errors.New("the caller gave up")
	var pid uint32
	err = postgres.Write(db, wctx, func(tx pgx.Tx) error {
		pid = tx.Conn().PgConn().PID()
		if _, err := tx.Exec(wctx, `SELECT 1 FROM conversations WHERE id = 'c-rb' FOR UPDATE`); err != nil {
			return err
		}
		cancel() // the caller's deadline passes while the lock is held
		return errGone
	})
	if !errors.Is(err, errGone) {
		t.Fatalf("write: %v", err)
	}
	// The connection went back to the pool, alive and out of its
	// transaction.
	kept := false
	for _, c := range pool.AcquireAllIdle(ctx) {
		if c.Conn().PgConn().PID() == pid && !c.Conn().IsClosed() && c.Conn().PgConn().TxStatus() == 'I' {
			kept = true
		}
		c.Release()
	}
	if !kept {
		t.Error("the write's connection is not back in the pool: the rollback cost it")
	}
	var locked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM conversations WHERE id = 'c-rb' FOR UPDATE NOWAIT) x`).Scan(&locked); err != nil || locked != 1 {
		t.Errorf("the row is still locked after the rollback: %v", err)
	}
}
