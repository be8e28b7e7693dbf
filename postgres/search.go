package postgres

import (
	"context"
	"errors"

	"github.com/parleychat/parley"
)

// Placeholder so the tree builds while the index is written; replaced
// before this branch lands.

// Search implements parley.Store.
func (db *DB) Search(ctx context.Context, p parley.Principal, r parley.SearchRequest) (parley.SearchPage, error) {
	return parley.SearchPage{}, errors.New("search: not built yet")
}

// RebuildSearch implements parley.Store.
func (db *DB) RebuildSearch(ctx context.Context, conv string, progress parley.SearchProgress) (parley.SearchRebuild, error) {
	return parley.SearchRebuild{}, errors.New("search: not built yet")
}
