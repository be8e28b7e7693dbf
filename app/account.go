package app

import (
	"context"

	"github.com/parleychat/parley"
)

// Accounts a person manages. Frames and events keep naming users by id;
// display names are read here and shown by clients in their place.

// Me returns the caller's account (its display name for GET /api/me).
func (s *Service) Me(ctx context.Context, p parley.Principal) (parley.User, error) {
	return s.store.User(ctx, p.User)
}

// SetDisplayName sets the caller's display name (empty clears it) and
// returns the account.
func (s *Service) SetDisplayName(ctx context.Context, p parley.Principal, name string) (parley.User, error) {
	return s.store.SetDisplayName(ctx, p.User, name)
}

// errNoUser answers a user the caller may not list exactly as one that
// does not exist, so the policy tells nobody who is there.
var errNoUser = parley.Errorf(parley.CodeNotFound, "no such user")

// UserEntry returns user id as the directory shows it to p, under the
// directory policy in force: NOT_FOUND for an unknown, disabled, or (with
// directory: shared) unshared user alike.
func (s *Service) UserEntry(ctx context.Context, p parley.Principal, id string) (parley.DirectoryEntry, error) {
	q := parley.DirectoryQuery{ID: id, Limit: 1, Shared: s.config().DirectoryShared()}
	page, err := s.store.Directory(ctx, p, q)
	if err != nil {
		return parley.DirectoryEntry{}, err
	}
	if len(page.Items) == 0 {
		return parley.DirectoryEntry{}, errNoUser
	}
	return page.Items[0], nil
}

// ChangePassword changes the caller's password (checking the current one)
// and logs out every other device of the user: their tokens are deleted
// with the new hash, their sockets end at once here and on every gateway
// (the re-check keeps the caller's own sockets, whose token stays), and
// cached lookups are forgotten. keep is the caller's token.
func (s *Service) ChangePassword(ctx context.Context, p parley.Principal, keep, current, next string) error {
	if err := s.store.ChangePassword(ctx, p, keep, current, next); err != nil {
		return err
	}
	s.revoke.RevokeUser(p.User)
	return nil
}

// Sessions lists the caller's signed-in devices.
func (s *Service) Sessions(ctx context.Context, p parley.Principal) ([]parley.DeviceSession, error) {
	return s.store.Sessions(ctx, p)
}

// RevokeDevice signs one of the caller's devices out: its tokens are
// deleted and its sockets end at once on every gateway.
func (s *Service) RevokeDevice(ctx context.Context, p parley.Principal, device string) error {
	if err := s.store.RevokeDevice(ctx, p, device); err != nil {
		return err
	}
	s.revoke.RevokeUser(p.User)
	return nil
}
