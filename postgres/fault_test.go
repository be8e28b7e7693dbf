package postgres_test

import (
	"testing"

	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/storetest"
)

// TestFaultPoints arms the store's fault points, store.before_commit
// included, which sends COMMIT as a round trip of its own. It must not call
// t.Parallel: the points are armed for the whole test binary.
func TestFaultPoints(t *testing.T) {
	pgtest.Server(t)
	storetest.RunFaults(t, backend{})
}
