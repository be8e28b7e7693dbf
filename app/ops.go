package app

import (
	"context"

	"github.com/parleychat/parley"
)

// Conversation returns a conversation's header, for operators.
func (s *Service) Conversation(ctx context.Context, id string) (parley.Conversation, error) {
	return s.store.Conversation(ctx, id)
}

// Rollback returns conv to the restore point toSeq and announces its new
// head: the new epoch makes every gateway resync the conversation's
// sockets.
func (s *Service) Rollback(ctx context.Context, conv string, toSeq int64) (parley.RollbackResult, error) {
	res, err := s.store.Rollback(ctx, conv, toSeq)
	if err == nil {
		s.publish(parley.Notice{Conv: res.Conv, Seq: res.Head})
	}
	return res, err
}

// SetRetention sets conv's retention policy and returns the header with it.
func (s *Service) SetRetention(ctx context.Context, conv string, r parley.Retention) (parley.Conversation, error) {
	if err := s.store.SetRetention(ctx, conv, r); err != nil {
		return parley.Conversation{}, err
	}
	return s.store.Conversation(ctx, conv)
}

// Purge applies conv's retention policy now. Nothing is announced: a
// purge adds no event.
func (s *Service) Purge(ctx context.Context, conv string) (parley.PurgeResult, error) {
	return s.store.Purge(ctx, conv)
}

// CreateHook creates an incoming webhook; the result carries its secret,
// shown once.
func (s *Service) CreateHook(ctx context.Context, h parley.NewHook) (parley.Hook, error) {
	return s.store.CreateHook(ctx, h)
}

// DeleteHook deletes a webhook: its secret stops working.
func (s *Service) DeleteHook(ctx context.Context, id string) error {
	return s.store.DeleteHook(ctx, id)
}
