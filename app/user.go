package app

import (
	"context"

	"github.com/parleychat/parley"
)

// Login checks a password and issues a device token. A login that
// replaced the device's install revokes the user's tokens' cached lookups
// and makes every gateway re-check the user's sockets (the old install's
// end with STALE_INSTALL). Any other login changed no token's standing and
// announces nothing, so a login costs the gateways nothing. The caller
// guards the password hash (backoff per login name, a bounded number of
// hashes at once) before calling.
func (s *Service) Login(ctx context.Context, req parley.LoginRequest) (parley.Session, error) {
	sess, err := s.store.Login(ctx, req)
	if err == nil && sess.Replaced {
		s.revoke.RevokeUser(sess.User)
	}
	return sess, err
}

// Logout revokes token, which signed in user ("" when the token was not
// known to the caller): its sockets end here at once, and every gateway
// re-checks the user's sockets and forgets their cached lookups.
func (s *Service) Logout(ctx context.Context, token, user string) error {
	if err := s.store.Logout(ctx, token); err != nil {
		return err
	}
	s.revoke.RevokeToken(token)
	if user != "" {
		s.revoke.RevokeUser(user)
	}
	return nil
}

// CreateUser creates an account (without a password: a bot that posts
// through webhooks and cannot log in).
func (s *Service) CreateUser(ctx context.Context, nu parley.NewUser) (parley.User, error) {
	return s.store.CreateUser(ctx, nu)
}

// SetUserDisabled disables or enables an account and returns it. Disabling
// ends the user's tokens at once: cached lookups are forgotten and every
// gateway re-checks the user's sockets.
func (s *Service) SetUserDisabled(ctx context.Context, id string, disabled bool) (parley.User, error) {
	if err := s.store.SetUserDisabled(ctx, id, disabled); err != nil {
		return parley.User{}, err
	}
	s.revoke.RevokeUser(id)
	return s.store.User(ctx, id)
}

// Directory lists one page of the active users p may find, under the
// directory policy in force (config directory: all, or only users who
// share a conversation with p).
func (s *Service) Directory(ctx context.Context, p parley.Principal, q parley.DirectoryQuery) (parley.AdminPage[parley.DirectoryEntry], error) {
	q.Shared = s.config().DirectoryShared()
	return s.store.Directory(ctx, p, q)
}

// Presence reads the presence of users that p may see (parley.Store.Presence).
func (s *Service) Presence(ctx context.Context, p parley.Principal, users []string) ([]parley.Presence, error) {
	return s.store.Presence(ctx, p, users)
}
