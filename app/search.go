package app

import (
	"context"

	"github.com/parleychat/parley"
)

// Search reads one page of the messages matching r that p may read
// (parley.Store.Search), newest first, and counts the outcome under
// transport. The store parses the query before any storage work (its
// contract's first check), so a bad query costs no read.
func (s *Service) Search(ctx context.Context, transport string, p parley.Principal, r parley.SearchRequest) (parley.SearchPage, error) {
	page, err := s.store.Search(ctx, p, r)
	s.countSearch(transport, err)
	return page, err
}

// RefuseSearch counts a search refused before it reached the use case (a
// request whose parameters do not read) and returns err, so a transport
// answers it like any other failed search.
func (s *Service) RefuseSearch(transport string, err error) error {
	s.countSearch(transport, err)
	return err
}

// countSearch counts a search's outcome; a panic in the metrics never
// reaches the request.
func (s *Service) countSearch(transport string, err error) {
	if s.metrics == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("metric failed; request unaffected", "panic", v)
		}
	}()
	outcome := "ok"
	if err != nil {
		outcome = string(parley.ErrorCode(err)) // UNAVAILABLE for an internal error
	}
	s.metrics.Search(transport, outcome)
}
