package app

import (
	"context"

	"github.com/parleychat/parley"
)

// CreateConversation creates a conversation owned by p. Every initial
// member's gateway learns of it at once: one notice per member, naming the
// member, at the seq of the member's join event.
func (s *Service) CreateConversation(ctx context.Context, p parley.Principal, nc parley.NewConversation) (parley.Conversation, error) {
	c, err := s.store.CreateConversation(ctx, p, nc)
	if err != nil {
		return c, err
	}
	// The members in the store's order (creator first): member i joined
	// at seq i+1.
	nc.ID, nc.Kind = c.ID, c.Kind
	if v, err := parley.ValidateNewConversation(p.User, nc); err == nil {
		for i, m := range v.Members {
			s.publish(parley.Notice{Conv: c.ID, Seq: int64(i + 1), User: m})
		}
	}
	return c, nil
}

// OpenDirect returns the direct conversation of p and user, creating it
// when there is none (created true): then both members' gateways learn of
// it at once, p's join at seq 1 and user's at seq 2.
func (s *Service) OpenDirect(ctx context.Context, p parley.Principal, user string) (parley.Conversation, bool, error) {
	c, created, err := s.store.OpenDirect(ctx, p, user)
	if err == nil && created {
		s.publish(parley.Notice{Conv: c.ID, Seq: 1, User: p.User})
		s.publish(parley.Notice{Conv: c.ID, Seq: 2, User: user})
	}
	return c, created, err
}

// AddMember adds user to the group conv on p's behalf (a member or an
// admin may) and announces the join to the conversation and to the user.
// The change always names conv and user, also when it failed.
func (s *Service) AddMember(ctx context.Context, p parley.Principal, conv, user string) (parley.MemberChange, error) {
	mc, err := s.store.AddMember(ctx, p, conv, user)
	return s.memberChanged(conv, user, mc, err)
}

// RemoveMember removes user from the group conv on p's behalf (the owner,
// an admin, or the user themself may) and announces the leave.
func (s *Service) RemoveMember(ctx context.Context, p parley.Principal, conv, user string) (parley.MemberChange, error) {
	mc, err := s.store.RemoveMember(ctx, p, conv, user)
	return s.memberChanged(conv, user, mc, err)
}

func (s *Service) memberChanged(conv, user string, mc parley.MemberChange, err error) (parley.MemberChange, error) {
	mc.Conv, mc.User = conv, user
	if err == nil && mc.Changed {
		s.publish(parley.Notice{Conv: mc.Conv, Seq: mc.Seq, User: mc.User})
	}
	return mc, err
}
