package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// pumpBatch is how many pending items the pump reads from the file at once.
const pumpBatch = 256

// pump sends the outbox on one connection: first every item pending when
// the connection came up, in the order written, then each new item as it
// is written. At most Window items await their reply at once; each is
// settled by a goroutine of its own, which the pump waits for.
func (s *session) pump(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, s.c.opts.Window)
	var last int64 // the highest item id handed to this connection
	for {
		items, err := s.c.box.items(ctx, false, last, pumpBatch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(items) == 0 {
			select {
			case <-s.c.kick:
				continue
			case <-ctx.Done():
				return nil
			case <-s.done:
				return nil
			}
		}
		for _, it := range items {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			case <-s.done:
				return nil
			}
			last = it.ID
			rid, ch, err := s.start(ctx, it.request())
			if err != nil {
				<-sem
				return nil // the connection is closing; the next one resends from the file
			}
			wg.Go(func() {
				defer func() { <-sem }()
				s.settle(ctx, it, rid, ch)
			})
		}
	}
}

// settle waits for the reply to an item's attempt and ends the item on
// success or a terminal code. On UNAVAILABLE it tries again after backoff
// and on RATE_LIMITED after retry_after_ms, on this connection; when the
// connection ends first the item stays pending for the next one.
func (s *session) settle(ctx context.Context, it Item, rid string, ch chan wire.Frame) {
	for n := 0; ; n++ {
		rctx, cancel := context.WithTimeout(ctx, s.c.opts.RequestTimeout)
		f, err := s.await(rctx, rid, ch, replyType[string(it.Kind)])
		cancel()
		switch {
		case err == nil:
			s.recorded(s.c.finish(ctx, it, Item{Seq: deref(f.Seq), Dup: deref(f.Dup), Epoch: deref(f.Epoch)}))
			return
		case IsTerminal(err):
			var pe *parley.Error
			errors.As(err, &pe)
			s.recorded(s.c.finish(ctx, it, Item{Code: pe.Code, Msg: pe.Msg}))
			return
		case errors.Is(err, ErrConnLost), ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			// No reply: the connection is presumed dead. The item stays
			// pending; the next connection resends it.
			s.fail(err)
			return
		}
		wait := backoff(n, s.c.opts.BackoffBase, s.c.opts.BackoffMax, s.c.jitter())
		if parley.ErrorCode(err) == parley.CodeRateLimited && f.RetryAfterMS > 0 {
			wait = msDuration(f.RetryAfterMS)
		}
		s.c.log.Info("client: outbox item kept; retrying", "cmid", it.CMID, "code", parley.ErrorCode(err), "err", err, "wait", wait)
		if !s.sleep(ctx, wait) {
			return
		}
		rid, ch, err = s.start(ctx, it.request())
		if err != nil {
			return
		}
	}
}

// recorded ends the connection when an outcome could not be written: the
// item is still pending in the file, and only a new connection's pump
// reads it again (its resend is answered as a replay), so keeping this
// connection would leave it waiting until some other disconnect.
func (s *session) recorded(err error) {
	if err != nil {
		s.fail(fmt.Errorf("client: outcome not recorded: %w", err))
	}
}
