package app

import (
	"context"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// Send stores p's message and announces it: after the commit the notice
// carrying the event is published (parley.SentNotice: ids only for a reply
// or a text that may mention someone), then the
// api.after_send_commit fault point may fail the request (the message is
// stored: the client's retry under the same key is a replay), and the
// outcome is counted under transport. A replay publishes again: a
// gateway ignores a seq it has pushed. A new message is also handed to
// Options.OnSent (the push worker), which does not hold the send.
func (s *Service) Send(ctx context.Context, transport string, p parley.Principal, req parley.SendRequest) (parley.Sent, error) {
	req.AllMax = s.config().MentionAllMax()
	sent, err := s.store.Send(ctx, p, req)
	if err == nil && transport == WebSocket && !sent.Dup && fault.Hit(fault.GatewaySend) != nil {
		s.double(ctx, p, req)
	}
	if err == nil {
		s.publish(parley.SentNotice(p, req, sent))
		if !sent.Dup {
			s.onSent(sent.Conv, sent.Seq)
		}
		err = fault.Hit(fault.APIAfterSendCommit)
	}
	s.countSend(transport, sent, err)
	return sent, err
}

// double is the gateway.send=dup lab fault (broken on purpose): the
// message is committed a second time under another key, as a server that
// doubled a socket send would.
func (s *Service) double(ctx context.Context, p parley.Principal, req parley.SendRequest) {
	req.CMID = dupKey(req.CMID)
	if again, err := s.store.Send(ctx, p, req); err == nil {
		s.publish(parley.Notice{Conv: again.Conv, Seq: again.Seq})
	}
}

// dupKey is the request key of the gateway.send=dup fault's second copy.
func dupKey(cmid string) string {
	if len(cmid) > parley.MaxCMIDChars-4 {
		cmid = cmid[:parley.MaxCMIDChars-4]
	}
	return cmid + "~dup"
}

// RefuseSend counts a send refused before it reached the store (a request
// that could not be decoded, a webhook that does not verify) and returns
// err, so a transport answers it like any other failed send.
func (s *Service) RefuseSend(transport string, err error) error {
	s.countSend(transport, parley.Sent{}, err)
	return err
}

// Recall recalls one of p's messages and announces the recall event.
func (s *Service) Recall(ctx context.Context, p parley.Principal, req parley.RecallRequest) (parley.Recalled, error) {
	rec, err := s.store.Recall(ctx, p, req)
	if err == nil {
		s.publish(parley.RecalledNotice(rec))
	}
	return rec, err
}

// Edit stores a new version of one of p's messages under the edit window
// in force, and announces the edit event (a new event of the
// conversation, like a recall: ids only, a gateway reads it). A replay
// announces it again; a gateway ignores a seq it has pushed.
func (s *Service) Edit(ctx context.Context, p parley.Principal, req parley.EditRequest) (parley.Edited, error) {
	cfg := s.config()
	req.Window, req.AllMax = cfg.EditWindow(), cfg.MentionAllMax()
	ed, err := s.store.Edit(ctx, p, req)
	if err == nil {
		s.publish(parley.Notice{Conv: ed.Conv, Seq: ed.Seq})
	}
	return ed, err
}

// React sets or removes p's reaction on a message and announces the
// reaction event. A request for the state that already held writes
// nothing; it announces the event that set it, if any, again.
func (s *Service) React(ctx context.Context, p parley.Principal, req parley.ReactRequest) (parley.Reacted, error) {
	r, err := s.store.React(ctx, p, req)
	if err == nil && r.Seq > 0 {
		s.publish(parley.Notice{Conv: r.Conv, Seq: r.Seq})
	}
	return r, err
}

// Versions reads the versions of message seq of conv that p may see,
// oldest first; none, with recalled true, for a recalled message.
func (s *Service) Versions(ctx context.Context, p parley.Principal, conv string, seq int64) ([]parley.Version, bool, error) {
	return s.store.Versions(ctx, p, conv, seq)
}

// Read moves p's read cursor in conv to seq and returns the cursor's new
// value; when it moved to seq, p's other devices are told.
func (s *Service) Read(ctx context.Context, p parley.Principal, conv string, seq int64) (int64, error) {
	read, err := s.store.Read(ctx, p, conv, seq)
	if err == nil && read == seq {
		s.publish(parley.Notice{Conv: conv, Seq: read, User: p.User, Device: p.DeviceID})
	}
	return read, err
}

// Ack moves p's device's delivered cursor in conv to seq and returns its
// new value. Nobody else is told.
func (s *Service) Ack(ctx context.Context, p parley.Principal, conv string, seq int64) (int64, error) {
	return s.store.Ack(ctx, p, conv, seq)
}

// Sync reads one page of conv's events that p may see (parley.Store.Sync).
func (s *Service) Sync(ctx context.Context, p parley.Principal, req parley.SyncRequest) (parley.Page, error) {
	return s.store.Sync(ctx, p, req)
}

// Fetch reads one event of conv that p may see.
func (s *Service) Fetch(ctx context.Context, p parley.Principal, conv string, seq int64) (parley.Event, error) {
	return s.store.Fetch(ctx, p, conv, seq)
}

// Convs reads one page of p's conversations, latest activity first.
func (s *Service) Convs(ctx context.Context, p parley.Principal, req parley.ConvsRequest) (parley.ConvsPage, error) {
	return s.store.Convs(ctx, p, req)
}
