package app

import (
	"context"
	"sync"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/webpush"
)

// Web Push: the VAPID key browsers subscribe with, the subscriptions of
// the caller's device, and the caller's level per conversation. The pushes
// themselves are sent by webpush.Worker, told of each committed send by
// Options.OnSent.

// pushKey loads the store's VAPID key once (every gateway on the database
// reads the same one) and keeps it; a failed load is retried next time.
type pushKey struct {
	mu  sync.Mutex
	key *webpush.Key
}

// VAPIDKey returns the deployment's VAPID key pair, created in the store
// by the first gateway that needs it.
func (s *Service) VAPIDKey(ctx context.Context) (*webpush.Key, error) {
	s.vapid.mu.Lock()
	defer s.vapid.mu.Unlock()
	if s.vapid.key != nil {
		return s.vapid.key, nil
	}
	raw, err := s.store.PushKey(ctx)
	if err != nil {
		return nil, err
	}
	k, err := webpush.ParseKey(raw)
	if err != nil {
		return nil, err
	}
	s.vapid.key = k
	return k, nil
}

// PushPublicKey returns the VAPID public key as a browser's
// applicationServerKey takes it (unpadded base64url of the uncompressed
// point).
func (s *Service) PushPublicKey(ctx context.Context) (string, error) {
	k, err := s.VAPIDKey(ctx)
	if err != nil {
		return "", err
	}
	return k.Public(), nil
}

// Subscribe binds a browser's push subscription to p's device. The
// endpoint must be https, unless the policy's push.allow_endpoints names
// it (INVALID_ARGUMENT, nothing stored); created is false when the
// endpoint was already this device's.
func (s *Service) Subscribe(ctx context.Context, p parley.Principal, ns parley.NewPushSubscription) (parley.PushSubscription, bool, error) {
	allowed := webpush.Allowed(ns.Endpoint, s.config().PushAllowEndpoints())
	if _, err := webpush.ParseEndpoint(ns.Endpoint, allowed); err != nil {
		return parley.PushSubscription{}, false, parley.Errorf(parley.CodeInvalidArgument, "%s", err.Error())
	}
	return s.store.SavePushSubscription(ctx, p, ns)
}

// Unsubscribe deletes one of p's subscriptions (NOT_FOUND for anyone
// else's).
func (s *Service) Unsubscribe(ctx context.Context, p parley.Principal, id string) error {
	return s.store.DeletePushSubscription(ctx, p, id)
}

// PushSettings lists p's levels other than the default (all).
func (s *Service) PushSettings(ctx context.Context, p parley.Principal) ([]parley.PushSetting, error) {
	return s.store.PushSettings(ctx, p)
}

// SetPushLevel sets p's level in conv; p needs an open period there.
func (s *Service) SetPushLevel(ctx context.Context, p parley.Principal, conv string, level parley.PushLevel) (parley.PushSetting, error) {
	return s.store.SetPushLevel(ctx, p, conv, level)
}
