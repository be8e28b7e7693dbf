// Package storetest is the one behaviour suite of parley.Store. Every store
// implementation runs it (as fstest.TestFS is run for every fs.FS):
//
//	func TestContract(t *testing.T) { storetest.Run(t, backend{}) }
//
// Each behaviour is a named subtest with its own fresh database. The store
// benchmarks (BenchSend, BenchSendHotConversation, BenchSync, BenchConvs)
// live here too, so both stores are measured by the same code.
package storetest

import (
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Backend opens fresh databases for the suite.
type Backend interface {
	// New returns a handle on a fresh, empty, migrated database whose store
	// enforces opts. The backend closes and removes it at t.Cleanup.
	New(t testing.TB, opts parley.Options) DB
}

// DB is one fresh database and the raw access the suite needs to check that
// storage did (or did not) change. Raw queries use ? placeholders and the
// table and column names of the migrations, which both dialects share.
type DB interface {
	// Store is the store under test.
	Store() parley.Store
	// Open returns another store on the same database with its own
	// connections, as a second server process would have. Closed at cleanup.
	Open(t testing.TB) parley.Store
	// OpenWith returns another store on the same database that enforces
	// opts, or the error of its Open (a refusal, say). A store it returns
	// is closed at cleanup.
	OpenWith(t testing.TB, opts parley.Options) (parley.Store, error)
	// Text runs a raw query that returns one text or byte string (NULL
	// reads as "").
	Text(t testing.TB, query string, args ...any) string
	// Exec runs a raw statement.
	Exec(t testing.TB, query string, args ...any)
	// Int runs a raw query that returns one integer (NULL reads as 0).
	Int(t testing.TB, query string, args ...any) int64
	// Backdate moves created_at of the events of conv with seq <= upTo d
	// into the past, as if the database clock had moved on by d.
	Backdate(t testing.TB, conv string, upTo int64, d time.Duration)
	// BackdateTokens moves every time of every token (created_at,
	// last_used_at, replaced_at) d into the past, as if the database clock
	// had moved on by d.
	BackdateTokens(t testing.TB, d time.Duration)
}
