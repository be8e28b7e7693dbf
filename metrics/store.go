package metrics

import (
	"time"

	"github.com/parleychat/parley"
)

//go:generate go run gen_store.go

// Store returns s measured: the duration of every call, and its failures
// (StoreCall), by method. Results and errors pass through unchanged; on a
// nil *Metrics it returns s itself.
//
// The measured methods are generated from the parley.Store interface
// (store_gen.go, by metrics/internal/genstore; go generate ./metrics). The
// wrapper embeds s, so a method added to parley.Store later compiles and
// passes through unmeasured until the file is generated again; a test
// fails meanwhile (TestStoreGenerated).
func (m *Metrics) Store(s parley.Store) parley.Store {
	if m == nil {
		return s
	}
	return &store{Store: s, m: m}
}

type store struct {
	parley.Store
	m *Metrics
}

func (s *store) observe(op string, start time.Time, err *error) {
	s.m.StoreCall(op, time.Since(start), *err)
}
