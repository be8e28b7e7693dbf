package sqlite_test

import (
	"testing"

	"github.com/parleychat/parley/storetest"
)

// TestFaultPoints arms the store's fault points. It must not call
// t.Parallel: the points are armed for the whole test binary.
func TestFaultPoints(t *testing.T) {
	storetest.RunFaults(t, backend{})
}
