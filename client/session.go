package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// maxReadBytes bounds a server frame: a full page of maximal bodies with
// JSON escaping fits well within it.
const maxReadBytes = 32 << 20

// maxPushes bounds the pushes waiting for the applier. Past it the client
// drops them and resyncs every conversation instead: the reader must never
// wait on the applier, which itself waits on replies the reader delivers.
const maxPushes = 4096

// drainTimeout bounds how long a connection that got goaway waits for the
// replies it is owed before the client moves on.
const drainTimeout = time.Second

// errNotSent says a request was not written because its connection was
// closing: it had no effect and may go out on the next connection.
var errNotSent = errors.New("client: connection closing; request not sent")

// errGoaway ends a connection the server is draining.
var errGoaway = errors.New("client: server sent goaway")

// session is one WebSocket connection and what runs on it: the reader,
// the applier (sub, convs, sync, pushes), the outbox pump and the pinger.
// Sessions of a Client never overlap: Run waits for every goroutine of one
// before it dials the next.
type session struct {
	c    *Client
	url  string
	conn *websocket.Conn

	done    chan struct{} // closed by fail
	err     error         // why the session ended; set before done closes
	goaway  chan struct{} // closed when the server sent goaway
	pushed  chan struct{} // cap 1: pushes are waiting
	idle    chan struct{} // cap 1: no request is awaiting its reply
	endOnce sync.Once
	gaOnce  sync.Once

	mu       sync.Mutex
	waiting  map[string]chan wire.Frame // by rid
	draining bool
	pushes   []wire.Frame
	overflow bool
}

func newSession(c *Client, url string, conn *websocket.Conn) *session {
	return &session{
		c: c, url: url, conn: conn,
		done:    make(chan struct{}),
		goaway:  make(chan struct{}),
		pushed:  make(chan struct{}, 1),
		idle:    make(chan struct{}, 1),
		waiting: map[string]chan wire.Frame{},
	}
}

// fail ends the session with err; the first call wins.
func (s *session) fail(err error) {
	s.endOnce.Do(func() {
		s.err = err
		close(s.done)
		s.c.unsetLive(s)
	})
}

// read is the session's only reader: it hands replies to their waiters and
// queues pushes for the applier. It never blocks on either.
func (s *session) read(ctx context.Context) {
	for {
		typ, b, err := s.conn.Read(ctx)
		if err != nil {
			s.fail(fmt.Errorf("client: read from %s: %w", s.url, err))
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			s.c.log.Warn("client: ignoring a bad server frame", "url", s.url, "err", err)
			continue
		}
		if len(f.RID) > 0 {
			s.reply(f)
			continue
		}
		switch f.T {
		case wire.TGoaway:
			s.startDrain()
		case wire.TError:
			if f.Code == parley.CodeUnauthenticated || f.Code == parley.CodeStaleInstall {
				s.fail(&parley.Error{Code: f.Code, Msg: f.Msg})
				return
			}
			s.c.log.Warn("client: server error without a request", "url", s.url, "code", f.Code, "msg", f.Msg)
		case wire.TEvent, wire.THint, wire.TResync, wire.TTyping, wire.TPresence:
			s.push(f)
		default:
			s.c.log.Warn("client: ignoring an unknown push", "url", s.url, "t", f.T)
		}
	}
}

func (s *session) reply(f wire.Frame) {
	var rid string
	if json.Unmarshal(f.RID, &rid) != nil {
		return
	}
	s.mu.Lock()
	ch, ok := s.waiting[rid]
	delete(s.waiting, rid)
	s.signalIdleLocked()
	s.mu.Unlock()
	if ok {
		ch <- f // cap 1, one reply per rid
	}
	if f.T == wire.TError && (f.Code == parley.CodeUnauthenticated || f.Code == parley.CodeStaleInstall) {
		// The token no longer holds: nothing more will succeed here, and
		// Run returns the code.
		s.fail(&parley.Error{Code: f.Code, Msg: f.Msg})
	}
}

func (s *session) signalIdleLocked() {
	if len(s.waiting) == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

func (s *session) push(f wire.Frame) {
	s.mu.Lock()
	if len(s.pushes) >= maxPushes {
		s.pushes, s.overflow = nil, true
	} else if !s.overflow {
		s.pushes = append(s.pushes, f)
	}
	s.mu.Unlock()
	select {
	case s.pushed <- struct{}{}:
	default:
	}
}

// takePushes returns the queued pushes, or overflow when some were dropped
// (then every conversation must be synced).
func (s *session) takePushes() (fs []wire.Frame, overflow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs, overflow = s.pushes, s.overflow
	s.pushes, s.overflow = nil, false
	return fs, overflow
}

// startDrain handles goaway: no new request goes out on this connection
// (they wait for the next one), and Run moves on once the requests in
// flight have their replies.
func (s *session) startDrain() {
	s.gaOnce.Do(func() {
		s.mu.Lock()
		s.draining = true
		s.signalIdleLocked()
		s.mu.Unlock()
		s.c.unsetLive(s)
		close(s.goaway)
	})
}

// drain waits until no request awaits its reply, or drainTimeout.
func (s *session) drain(ctx context.Context) {
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := len(s.waiting)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-s.idle:
		case <-t.C:
			return
		case <-s.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// post writes req as it is (a signal: no rid, no reply awaited).
func (s *session) post(ctx context.Context, req wire.Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("client: encode %s: %w", req.T, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("client: %s not sent: %w", req.T, err)
	}
	select {
	case <-s.done:
		return errNotSent
	default:
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.opts.RequestTimeout)
	defer cancel()
	if err := s.conn.Write(wctx, websocket.MessageText, b); err != nil {
		s.fail(fmt.Errorf("client: write to %s: %w", s.url, err))
		return ErrConnLost
	}
	return nil
}

// start writes req with a fresh rid and returns the channel its reply will
// come on. errNotSent means nothing was written; any other error means the
// write failed midway, the connection is ended, and the outcome is unknown.
func (s *session) start(ctx context.Context, req wire.Request) (rid string, ch chan wire.Frame, err error) {
	rid = strconv.FormatUint(s.c.rid.Add(1), 36)
	req.RID = json.RawMessage(strconv.Quote(rid))
	b, err := json.Marshal(req)
	if err != nil {
		return "", nil, fmt.Errorf("client: encode %s: %w", req.T, err)
	}
	if err := ctx.Err(); err != nil {
		return "", nil, fmt.Errorf("client: %s not sent: %w", req.T, err)
	}
	ch = make(chan wire.Frame, 1)
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return "", nil, errNotSent
	default:
	}
	if s.draining {
		s.mu.Unlock()
		return "", nil, errNotSent
	}
	s.waiting[rid] = ch
	s.mu.Unlock()
	// The write does not follow ctx: a caller giving up must not cut a
	// frame in half, which would end the connection for everyone. A stuck
	// socket is bounded by RequestTimeout and ended by fail.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.opts.RequestTimeout)
	defer cancel()
	if err := s.conn.Write(wctx, websocket.MessageText, b); err != nil {
		s.forget(rid)
		// A half-written frame leaves the connection unusable.
		s.fail(fmt.Errorf("client: write to %s: %w", s.url, err))
		return "", nil, ErrConnLost
	}
	return rid, ch, nil
}

func (s *session) forget(rid string) {
	s.mu.Lock()
	delete(s.waiting, rid)
	s.signalIdleLocked()
	s.mu.Unlock()
}

// await waits for the reply on ch. An error frame is returned as the frame
// and a *parley.Error; a reply of another type than want (when want is
// set) is a protocol error.
func (s *session) await(ctx context.Context, rid string, ch chan wire.Frame, want string) (wire.Frame, error) {
	var f wire.Frame
	select {
	case f = <-ch:
	case <-s.done:
		select {
		case f = <-ch: // the reply made it before the end
		default:
			return wire.Frame{}, ErrConnLost
		}
	case <-ctx.Done():
		s.forget(rid)
		return wire.Frame{}, fmt.Errorf("client: no reply from %s: %w", s.url, ctx.Err())
	}
	if f.T == wire.TError {
		return f, &parley.Error{Code: f.Code, Msg: f.Msg}
	}
	if want != "" && f.T != want {
		return f, fmt.Errorf("client: reply %q to a request that expects %q", f.T, want)
	}
	return f, nil
}

// replyType is the reply each request type expects.
var replyType = map[string]string{
	wire.TSend: wire.TSent, wire.TSync: wire.TPage, wire.TAck: wire.TAcked,
	wire.TRead: wire.TReadOK, wire.TRecall: wire.TRecalled, wire.TConvs: wire.TConvsReply,
	wire.TFetch: wire.TFetched, wire.TSub: wire.TSubscribed,
	wire.TEdit: wire.TEdited, wire.TReact: wire.TReacted,
	wire.TSearch: wire.TResults,
}

// do sends req and waits for its reply until ctx ends.
func (s *session) do(ctx context.Context, req wire.Request) (wire.Frame, error) {
	rid, ch, err := s.start(ctx, req)
	if err != nil {
		return wire.Frame{}, err
	}
	return s.await(ctx, rid, ch, replyType[req.T])
}

// doOwn is do for the client's own requests: bounded by RequestTimeout, and
// no reply within it ends the connection (it is presumed dead; the next
// one resends and resyncs).
func (s *session) doOwn(ctx context.Context, req wire.Request) (wire.Frame, error) {
	rctx, cancel := context.WithTimeout(ctx, s.c.opts.RequestTimeout)
	defer cancel()
	f, err := s.do(rctx, req)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		s.fail(fmt.Errorf("client: no reply to %s within %s: %w", req.T, s.c.opts.RequestTimeout, err))
	}
	return f, err
}

// keepalive pings the server; a missing pong ends the connection.
func (s *session) keepalive(ctx context.Context) {
	if s.c.opts.PingInterval < 0 {
		return
	}
	t := time.NewTicker(s.c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.c.opts.RequestTimeout)
		err := s.conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.fail(fmt.Errorf("client: ping %s: %w", s.url, err))
			return
		}
	}
}

// sleep waits for d, or until the session or ctx ends (false).
func (s *session) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	case <-ctx.Done():
		return false
	}
}
