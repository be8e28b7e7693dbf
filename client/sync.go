package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// follow is the applier of one connection, the only goroutine that calls
// the Handler or moves cursors: sub, convs, sync of every conversation that
// changed, then the pushes as they come.
func (s *session) follow(ctx context.Context) error {
	if _, err := s.doPatient(ctx, wire.Request{T: wire.TSub}); err != nil {
		return err
	}
	if err := s.resyncAll(ctx); err != nil {
		return err
	}
	if s.c.opts.OnConnect != nil {
		s.c.opts.OnConnect(s.url)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return nil
		case <-s.pushed:
		}
		fs, overflow := s.takePushes()
		if overflow {
			s.c.log.Warn("client: too many pushes queued; resyncing", "url", s.url)
			if err := s.resyncAll(ctx); err != nil {
				return err
			}
			continue
		}
		if err := s.apply(ctx, fs); err != nil {
			return err
		}
	}
}

// resyncAll learns the conversation list and syncs every conversation
// whose head or epoch differs from its cursor.
func (s *session) resyncAll(ctx context.Context) error {
	convs, err := walkConvs(func(r wire.Request) (wire.Frame, error) { return s.doPatient(ctx, r) })
	if err != nil {
		return err
	}
	s.c.opts.Handler.Convs(convs)
	for _, e := range convs {
		s.c.learn(e.Conv)
	}
	for _, e := range convs {
		cur, _ := s.c.Cursor(e.Conv)
		if cur.After == e.Head && cur.Epoch == e.Epoch {
			continue
		}
		if err := s.syncConv(ctx, e.Conv); err != nil {
			return err
		}
	}
	return nil
}

// doPatient is doOwn that waits out RATE_LIMITED (retry_after_ms) and
// UNAVAILABLE (backoff) on this connection and asks again: every frame
// counts in a rate-limit bucket, and a spent one is no reason to reconnect.
func (s *session) doPatient(ctx context.Context, req wire.Request) (wire.Frame, error) {
	for retries := 0; ; retries++ {
		f, err := s.doOwn(ctx, req)
		var pe *parley.Error
		if err == nil || !errors.As(err, &pe) || pe.Code.IsTerminal() {
			return f, err
		}
		wait := backoff(retries, s.c.opts.BackoffBase, s.c.opts.BackoffMax, s.c.jitter())
		if pe.Code == parley.CodeRateLimited && f.RetryAfterMS > 0 {
			wait = msDuration(f.RetryAfterMS)
		}
		if !s.sleep(ctx, wait) {
			return f, ErrConnLost
		}
	}
}

// walkConvs reads every page of the conversation list through do, latest
// activity first.
func walkConvs(do func(wire.Request) (wire.Frame, error)) ([]wire.Conv, error) {
	var all []wire.Conv
	r := wire.Request{T: wire.TConvs}
	for {
		f, err := do(r)
		if err != nil {
			return nil, err
		}
		all = append(all, f.Convs...)
		if f.HasMore == nil || !*f.HasMore {
			return all, nil
		}
		if f.Next == "" || f.Next == r.Before {
			return nil, fmt.Errorf("client: convs: has_more without a new next")
		}
		r.Before = f.Next
	}
}

// apply handles a run of pushes in order. Consecutive events that continue
// a conversation's cursor are handed over as one batch and stored once.
func (s *session) apply(ctx context.Context, fs []wire.Frame) error {
	var conv string
	var batch []wire.Event
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		cur, _ := s.c.Cursor(conv)
		s.c.opts.Handler.Events(conv, cur.Epoch, batch)
		last := batch[len(batch)-1].Seq
		batch = nil
		return s.c.setCursor(ctx, conv, Cursor{After: last, Epoch: cur.Epoch})
	}
	for _, f := range fs {
		switch f.T {
		case wire.TEvent:
			if f.Ev == nil || f.Ev.Conv == "" {
				continue
			}
			ev := *f.Ev
			if ev.Conv != conv {
				if err := flush(); err != nil {
					return err
				}
				conv = ev.Conv
			}
			cur, known := s.c.Cursor(ev.Conv)
			after := cur.After
			if len(batch) > 0 {
				after = batch[len(batch)-1].Seq
			}
			switch {
			case known && cur.Epoch != 0 && ev.Seq <= after:
				// A duplicate: already handed over.
			case known && cur.Epoch != 0 && ev.Seq == after+1:
				batch = append(batch, ev)
			default:
				// A gap, or a conversation not synced yet: sync fills it.
				if err := flush(); err != nil {
					return err
				}
				if err := s.syncConv(ctx, ev.Conv); err != nil {
					return err
				}
			}
		case wire.THint:
			if err := flush(); err != nil {
				return err
			}
			if f.Conv == "" {
				continue
			}
			if f.Read != nil {
				s.c.opts.Handler.Read(f.Conv, *f.Read)
			}
			cur, known := s.c.Cursor(f.Conv)
			if !known || cur.Epoch == 0 || (f.Head != nil && *f.Head > cur.After) {
				if err := s.syncConv(ctx, f.Conv); err != nil {
					return err
				}
			}
		case wire.TResync:
			if err := flush(); err != nil {
				return err
			}
			if err := s.resyncAll(ctx); err != nil {
				return err
			}
		case wire.TTyping, wire.TPresence:
			if err := flush(); err != nil {
				return err
			}
			s.signal(f)
		}
	}
	return flush()
}

// syncConv pages through conv from its cursor until has_more is false,
// handing each page to the Handler before storing the cursor after it.
// EPOCH_CHANGED and CURSOR_AHEAD reset the conversation and start it over
// from 0. Other terminal codes (NOT_MEMBER, …) skip the conversation; a
// retryable code is retried on this connection after backoff; a lost
// connection or no reply returns the error, which ends the connection.
func (s *session) syncConv(ctx context.Context, conv string) error {
	resets, retries := 0, 0
	for {
		cur, _ := s.c.Cursor(conv)
		after, limit := cur.After, s.c.opts.SyncLimit
		req := wire.Request{T: wire.TSync, Conv: conv, After: &after, Limit: &limit}
		if cur.Epoch != 0 {
			epoch := cur.Epoch
			req.Epoch = &epoch
		}
		f, err := s.doOwn(ctx, req)
		code := parley.ErrorCode(err)
		var pe *parley.Error
		switch {
		case err == nil:
		case code == parley.CodeEpochChanged || code == parley.CodeCursorAhead:
			if resets++; resets > 3 {
				return fmt.Errorf("client: sync %s: %s again after a reset: %w", conv, code, err)
			}
			if err := s.reset(ctx, conv, code); err != nil {
				return err
			}
			continue
		case errors.As(err, &pe) && pe.Code.IsTerminal():
			s.c.log.Warn("client: cannot sync conversation; skipping it", "conv", conv, "code", pe.Code, "msg", pe.Msg)
			return nil
		case errors.As(err, &pe):
			// UNAVAILABLE or RATE_LIMITED from the server: the connection is fine.
			wait := backoff(retries, s.c.opts.BackoffBase, s.c.opts.BackoffMax, s.c.jitter())
			if pe.Code == parley.CodeRateLimited && f.RetryAfterMS > 0 {
				wait = msDuration(f.RetryAfterMS)
			}
			retries++
			if !s.sleep(ctx, wait) {
				return ErrConnLost
			}
			continue
		default:
			return err
		}
		retries = 0

		p := pageOf(f)
		if cur.Epoch != 0 && p.Epoch != cur.Epoch {
			// The server should have said EPOCH_CHANGED; rebuild all the same.
			if resets++; resets > 3 {
				return fmt.Errorf("client: sync %s: epoch %d after a reset, want %d", conv, p.Epoch, cur.Epoch)
			}
			if err := s.reset(ctx, conv, parley.CodeEpochChanged); err != nil {
				return err
			}
			continue
		}
		if p.Trimmed {
			s.c.opts.Handler.Trimmed(conv, p.MinSeq)
		}
		evs, last := continuing(p.Events, cur.After)
		if len(evs) > 0 {
			s.c.opts.Handler.Events(conv, p.Epoch, evs)
		}
		next := max(p.NextAfter, last)
		if err := s.c.setCursor(ctx, conv, Cursor{After: next, Epoch: p.Epoch}); err != nil {
			return err
		}
		if !p.HasMore {
			return nil
		}
		if next <= cur.After {
			return fmt.Errorf("client: sync %s: has_more without progress past %d", conv, cur.After)
		}
	}
}

// continuing returns the events of a page that continue a cursor at
// after, ascending, and the seq of the last one (after when none): a page
// is trusted for order but never allowed to repeat or go back.
func continuing(page []wire.Event, after int64) ([]wire.Event, int64) {
	evs := make([]wire.Event, 0, len(page))
	last := after
	for _, ev := range page {
		if ev.Seq > last {
			evs = append(evs, ev)
			last = ev.Seq
		}
	}
	return evs, last
}

// reset tells the Handler to drop conv and starts its cursor over.
func (s *session) reset(ctx context.Context, conv string, code parley.Code) error {
	s.c.log.Info("client: rebuilding conversation", "conv", conv, "code", code)
	s.c.opts.Handler.Reset(conv, code)
	return s.c.setCursor(ctx, conv, Cursor{})
}

// signal hands a typing or presence push to the Handler, when it is a
// SignalHandler; a push whose times do not parse is dropped.
func (s *session) signal(f wire.Frame) {
	sh, ok := s.c.opts.Handler.(SignalHandler)
	if !ok || f.User == "" {
		return
	}
	if f.T == wire.TTyping {
		if until, err := time.Parse(wire.TimeFormat, f.Until); err == nil && f.Conv != "" {
			sh.Typing(f.Conv, f.User, until)
		}
		return
	}
	var seen time.Time
	if f.LastSeen != "" {
		t, err := time.Parse(wire.TimeFormat, f.LastSeen)
		if err != nil {
			return
		}
		seen = t
	}
	if st := parley.PresenceState(f.State); st.Valid() {
		sh.Presence(f.User, st, seen)
	}
}
