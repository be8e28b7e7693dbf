package sqlite

import (
	"context"
	"errors"

	"github.com/parleychat/parley"
)

var errTODO = errors.New("sqlite: not implemented yet")

// Edit implements parley.Store.
func (db *DB) Edit(ctx context.Context, p parley.Principal, r parley.EditRequest) (parley.Edited, error) {
	return parley.Edited{}, errTODO
}

// React implements parley.Store.
func (db *DB) React(ctx context.Context, p parley.Principal, r parley.ReactRequest) (parley.Reacted, error) {
	return parley.Reacted{}, errTODO
}

// Versions implements parley.Store.
func (db *DB) Versions(ctx context.Context, p parley.Principal, conv string, seq int64) ([]parley.Version, bool, error) {
	return nil, false, errTODO
}

// OpenDirect implements parley.Store.
func (db *DB) OpenDirect(ctx context.Context, p parley.Principal, user string) (parley.Conversation, bool, error) {
	return parley.Conversation{}, false, errTODO
}

// Directory implements parley.Store.
func (db *DB) Directory(ctx context.Context, p parley.Principal, q parley.DirectoryQuery) (parley.AdminPage[parley.DirectoryEntry], error) {
	return parley.AdminPage[parley.DirectoryEntry]{}, errTODO
}
