package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/parleychat/parley"
)

// Run connects and keeps the client connected until ctx ends (it then
// returns nil) or Close is called (ErrClosed). It owns every goroutine of
// the client and waits for all of them before it returns. It returns early
// with an UNAUTHENTICATED or STALE_INSTALL *parley.Error when the server
// refuses the token: logging in again is the application's decision. Run
// may be called again after it returned, but not twice at once.
func (c *Client) Run(ctx context.Context) error {
	if len(c.opts.URLs) == 0 {
		return errors.New("client: Options.URLs is empty")
	}
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("client: Run is already running")
	}
	defer c.running.Store(false)
	c.mu.Lock()
	if c.closing.Err() != nil {
		c.mu.Unlock()
		return ErrClosed
	}
	c.runs.Add(1) // under mu, so never after Close began waiting
	c.mu.Unlock()
	defer c.runs.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.closing, cancel)() // Close ends Run
	var pruner sync.WaitGroup
	pruner.Go(func() { c.pruneEvery(ctx) })
	defer func() { cancel(); pruner.Wait() }()

	ended := func() error {
		if c.closing.Err() != nil {
			return ErrClosed
		}
		return nil
	}
	next, n := 0, 0 // next URL; failures since the last healthy connection
	for ctx.Err() == nil {
		url := c.opts.URLs[next%len(c.opts.URLs)]
		next++
		up, err := c.connect(ctx, url)
		if c.opts.OnDisconnect != nil {
			c.opts.OnDisconnect(url, err)
		}
		if ctx.Err() != nil {
			break
		}
		if code := parley.ErrorCode(err); code == parley.CodeUnauthenticated || code == parley.CodeStaleInstall {
			return err
		}
		if errors.Is(err, errGoaway) {
			n = 0
			continue // at once, to the next URL
		}
		c.log.Info("client: disconnected", "url", url, "err", err)
		if up >= c.opts.BackoffMax {
			n = 0 // that connection was healthy: start the backoff over
		}
		wait := backoff(n, c.opts.BackoffBase, c.opts.BackoffMax, c.jitter())
		n++
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return ended()
}

// pruneEvery deletes ended items older than KeepEnded every c.every until
// ctx ends. A failure is logged: the next round tries again.
func (c *Client) pruneEvery(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := c.box.prune(ctx, c.opts.KeepEnded, c.now()); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("client: outbox not pruned", "err", err)
			}
		} else if n > 0 {
			c.log.Debug("client: ended outbox items deleted", "items", n)
		}
	}
}

// connect dials url and serves the connection until it ends, returning
// how long it was up (0: the dial failed) and why it ended.
func (c *Client) connect(ctx context.Context, url string) (up time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := c.dial(ctx, url)
	if err != nil {
		return 0, err
	}
	began := c.now()
	s := newSession(c, url, conn)
	c.setLive(s)

	var wg sync.WaitGroup
	wg.Go(func() { s.read(ctx) })
	wg.Go(func() {
		if err := s.follow(ctx); err != nil {
			s.fail(err)
		}
	})
	wg.Go(func() {
		if err := s.pump(ctx); err != nil {
			s.fail(err)
		}
	})
	wg.Go(func() { s.keepalive(ctx) })

	select {
	case <-s.done:
	case <-ctx.Done():
		s.fail(ctx.Err())
	case <-s.goaway:
		s.drain(ctx)
		s.fail(errGoaway)
	}
	c.unsetLive(s)
	if errors.Is(s.err, errGoaway) || errors.Is(s.err, context.Canceled) {
		// A polite close: the server is draining, or we are leaving.
		t := time.AfterFunc(time.Second, func() { conn.CloseNow() }) // bounds the close handshake
		conn.Close(websocket.StatusNormalClosure, "")
		t.Stop()
	}
	cancel()
	conn.CloseNow()
	wg.Wait()
	return c.now().Sub(began), s.err
}

// dial opens the WebSocket with the token. A refused token comes back as
// the *parley.Error of the problem body (UNAUTHENTICATED or STALE_INSTALL);
// every other failure is an error without a code, retried by Run.
func (c *Client) dial(ctx context.Context, url string) (*websocket.Conn, error) {
	// The handshake is bounded by a timer rather than a context deadline:
	// the connection outlives the dial, and must not die with its context.
	dctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.opts.RequestTimeout, cancel)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.opts.Token)
	conn, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: h, HTTPClient: c.opts.HTTPClient})
	if !timer.Stop() && err == nil {
		conn.CloseNow()
		cancel()
		return nil, fmt.Errorf("client: dial %s: handshake timed out", url)
	}
	if err != nil {
		cancel()
		if perr := refused(resp); perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("client: dial %s: %w", url, err)
	}
	// dctx ends with ctx, which ends with the connection.
	conn.SetReadLimit(maxReadBytes)
	return conn, nil
}

// refused reads the problem body of a 401 upgrade answer.
func refused(resp *http.Response) error {
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		return nil
	}
	var p struct {
		Code   parley.Code `json:"code"`
		Detail string      `json:"detail"`
		Title  string      `json:"title"`
		Msg    string      `json:"msg"`
	}
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_ = json.Unmarshal(b, &p)
	}
	if p.Code != parley.CodeStaleInstall {
		p.Code = parley.CodeUnauthenticated
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Msg
	}
	if msg == "" {
		msg = p.Title
	}
	if msg == "" {
		msg = "the server refused the token"
	}
	return &parley.Error{Code: p.Code, Msg: msg}
}

// backoff is the wait before retry n (from 0) with full jitter: r, in
// [0, 1), scales min(max, base·2^n).
func backoff(n int, base, max time.Duration, r float64) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return time.Duration(r * float64(d))
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
