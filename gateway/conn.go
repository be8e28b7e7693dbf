package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/wire"
)

// frame is one queued server frame; hint names the conversation of a
// coalesced hint, cleared when the hint is written. One frame may be queued
// to many sockets (an event push): it is never changed once made.
type frame struct {
	b    []byte
	hint string
}

// size is what a queued frame counts against its socket's budget.
func (f *frame) size() int64 { return int64(len(f.b)) + FrameOverhead }

// queued is one entry of a socket's queue: the frame and whether it is a
// push (counted in pushBytes) or a reply.
type queued struct {
	f    *frame
	push bool
}

// conn is one socket. The reader goroutine answers requests in order; the
// writer goroutine owns every write; the hub's keepalive loop pings it.
type conn struct {
	h     *Hub
	ws    *websocket.Conn
	p     parley.Principal
	token string // re-checked now and then: a revoked token ends the socket

	// The send queue. Bytes are counted from enqueue until the frame is
	// written, so a write blocked on a peer that does not read still counts.
	qmu       sync.Mutex
	queue     []queued
	bytes     int64         // everything queued
	pushBytes int64         // the pushes among it
	wake      chan struct{} // the writer has something to write
	room      chan struct{} // the queue went back under its budget

	// Guarded by h.mu.
	subscribed bool
	watched    map[string]struct{}

	hmu    sync.Mutex
	hinted map[string]bool // conversations with a hint in the queue

	ctx       context.Context // ends when the socket is done
	cancel    context.CancelFunc
	closeOnce sync.Once
	flush     chan closeReq
	kicked    atomic.Bool
	pinging   atomic.Bool
	revoked   atomic.Bool // the token stopped working: frames are refused

	// How the socket ended, for its lifetime log line: the first close
	// noted wins (the server's own, or the peer's).
	endMu     sync.Mutex
	endCode   websocket.StatusCode
	endReason string
	endBy     string // "server" or "client"
	started   time.Time
}

// ended notes how the socket closed, unless a close was noted already.
func (c *conn) ended(code websocket.StatusCode, reason, by string) {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	if c.endBy == "" {
		c.endCode, c.endReason, c.endBy = code, reason, by
	}
}

// end returns how the socket closed: 1006 (abnormal closure, no close
// frame) when nothing was noted.
func (c *conn) end() (websocket.StatusCode, string, string) {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	if c.endBy == "" {
		return websocket.StatusAbnormalClosure, "connection lost", "client"
	}
	return c.endCode, c.endReason, c.endBy
}

// readEnded notes why a read ended: the peer's close frame, a frame over
// the read limit (the library closed it with 1009), or a lost connection.
func (c *conn) readEnded(err error) {
	var ce websocket.CloseError
	switch {
	case errors.As(err, &ce):
		c.ended(ce.Code, ce.Reason, "client")
	case strings.Contains(err.Error(), "read limited at"):
		c.ended(websocket.StatusMessageTooBig, "frame over the size limit", "server")
	case c.ctx.Err() != nil:
		c.ended(websocket.StatusGoingAway, "server shutting down", "server")
	}
}

type closeReq struct {
	code   websocket.StatusCode
	reason string
}

func newConn(parent context.Context, h *Hub, ws *websocket.Conn, p parley.Principal, token string) *conn {
	ctx, cancel := context.WithCancel(parent)
	return &conn{
		h: h, ws: ws, p: p, token: token, ctx: ctx, cancel: cancel,
		wake:    make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
		watched: map[string]struct{}{},
		hinted:  map[string]bool{},
		flush:   make(chan closeReq, 1),
		started: time.Now(),
	}
}

// serve runs the socket until it closes.
func (c *conn) serve() {
	defer c.cancel()
	var wg sync.WaitGroup
	wg.Go(func() { c.writeLoop(c.ctx) })
	c.readLoop(c.ctx)
	c.cancel()
	wg.Wait()
	c.ws.CloseNow()
}

func (c *conn) readLoop(ctx context.Context) {
	for {
		if !c.waitRoom(ctx) {
			return
		}
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			c.readEnded(err)
			return // closed, or over the read limit (the library closed it with 1009)
		}
		if typ != websocket.MessageText {
			c.reply(wire.Error(parley.CodeInvalidArgument, "frames must be JSON text frames"), nil)
			continue
		}
		if c.revoked.Load() {
			c.refuse(data, parley.CodeUnauthenticated, parley.ErrBadToken.Msg)
			continue
		}
		c.h.drainMu.RLock()
		if c.h.draining.Load() {
			c.h.drainMu.RUnlock()
			c.refuse(data, parley.CodeUnavailable, "server is draining; reconnect and retry with the same request key")
			continue
		}
		c.handle(ctx, data)
		c.h.drainMu.RUnlock()
	}
}

// refuse answers a frame with an error without handling it, echoing its
// rid when it has a readable one.
func (c *conn) refuse(data []byte, code parley.Code, msg string) {
	req, _ := wire.DecodeRequest(data)
	c.reply(wire.Error(code, msg), req.RID)
}

// waitRoom holds the reader while the socket's queue is over its budget
// (backpressure: a client that does not read its replies stops being
// read); false when the socket ended meanwhile.
func (c *conn) waitRoom(ctx context.Context) bool {
	counted := false
	for {
		c.qmu.Lock()
		over := c.bytes > int64(c.h.o.SendBudget)
		c.qmu.Unlock()
		if !over {
			return true
		}
		if !counted {
			counted = true
			c.h.stats.Backpressured.Add(1)
		}
		select {
		case <-c.room:
		case <-ctx.Done():
			return false
		}
	}
}

// add queues q, counting its bytes.
func (c *conn) add(q queued) {
	c.addIf(q, nil)
}

// addIf queues q when fits, asked under the queue's lock with what is
// queued (all bytes, push bytes) and q's size, says yes (nil: always), so
// concurrent pushes cannot both squeeze past a bound; it reports whether
// q was queued.
func (c *conn) addIf(q queued, fits func(bytes, pushBytes, n int64) bool) bool {
	n := q.f.size()
	c.qmu.Lock()
	if fits != nil && !fits(c.bytes, c.pushBytes, n) {
		c.qmu.Unlock()
		return false
	}
	c.queue = append(c.queue, q)
	c.bytes += n
	if q.push {
		c.pushBytes += n
	}
	total := c.bytes
	c.qmu.Unlock()
	c.h.stats.QueuedBytes.Add(n)
	for peak := c.h.stats.PeakQueuedBytes.Load(); total > peak; peak = c.h.stats.PeakQueuedBytes.Load() {
		if c.h.stats.PeakQueuedBytes.CompareAndSwap(peak, total) {
			break
		}
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// next returns the oldest queued frame, still counted, or false.
func (c *conn) next() (queued, bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if len(c.queue) == 0 {
		return queued{}, false
	}
	q := c.queue[0]
	c.queue[0] = queued{}
	c.queue = c.queue[1:]
	if len(c.queue) == 0 {
		c.queue = nil // let the backing array go
	}
	return q, true
}

// done uncounts a written (or abandoned) frame and lets the reader go on
// once the queue is back under its budget.
func (c *conn) done(q queued) {
	n := q.f.size()
	c.qmu.Lock()
	c.bytes -= n
	if q.push {
		c.pushBytes -= n
	}
	under := c.bytes <= int64(c.h.o.SendBudget)
	c.qmu.Unlock()
	c.h.stats.QueuedBytes.Add(-n)
	if under {
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

// inBudget: the pushes queued, n more included, stay within the budget.
func (c *conn) inBudget(_, pushBytes, n int64) bool {
	return pushBytes+n <= int64(c.h.o.SendBudget)
}

// underHighWater: the queue, n more included, stays under the high-water
// mark.
func (c *conn) underHighWater(bytes, _, n int64) bool {
	return bytes+n <= int64(c.h.o.HighWater)
}

func (c *conn) writeLoop(ctx context.Context) {
	// Whatever is still queued when the socket ends is uncounted.
	defer func() {
		for q, ok := c.next(); ok; q, ok = c.next() {
			c.done(q)
		}
	}()
	for {
		select {
		case req := <-c.flush:
			c.flushAndClose(ctx, req)
			return
		default:
		}
		if q, ok := c.next(); ok {
			if !c.write(ctx, q) {
				c.ended(websocket.StatusAbnormalClosure, "write failed or timed out", "server")
				c.cancel()
				return
			}
			continue
		}
		select {
		case <-c.wake:
		case req := <-c.flush:
			c.flushAndClose(ctx, req)
			return
		case <-ctx.Done():
			return
		}
	}
}

// flushAndClose writes what is queued now, then closes the socket.
func (c *conn) flushAndClose(ctx context.Context, req closeReq) {
	c.qmu.Lock()
	n := len(c.queue)
	c.qmu.Unlock()
	for range n {
		q, ok := c.next()
		if !ok || !c.write(ctx, q) {
			break
		}
	}
	c.ended(req.code, req.reason, "server")
	c.ws.Close(req.code, req.reason)
	c.cancel()
}

func (c *conn) write(ctx context.Context, q queued) bool {
	defer c.done(q)
	f := q.f
	if f.hint != "" {
		c.hmu.Lock()
		delete(c.hinted, f.hint)
		c.hmu.Unlock()
	}
	wctx, cancel := context.WithTimeout(ctx, c.h.o.WriteTimeout)
	defer cancel()
	return c.ws.Write(wctx, websocket.MessageText, f.b) == nil
}

// ping checks that the peer answers; one that does not within PongTimeout
// is dropped. The hub's keepalive loop calls it, so an idle socket costs no
// goroutine of its own for it.
func (c *conn) ping() {
	if c.pinging.Swap(true) {
		return // the last ping is still waiting for its pong
	}
	defer c.pinging.Store(false)
	ctx, cancel := context.WithTimeout(c.ctx, c.h.o.PongTimeout)
	defer cancel()
	if err := c.ws.Ping(ctx); err != nil {
		c.cancel()
	}
}

// enqueue queues a reply: it is never dropped. The reader pauses before
// its next request while the queue is over budget (waitRoom).
func (c *conn) enqueue(f *frame) {
	c.add(queued{f: f})
}

// control queues a push that must not be dropped (resync, goaway, read
// hints, hints): one that does not fit in the budget means the client is
// not reading, and it is closed with 1008.
func (c *conn) control(f *frame) {
	if !c.addIf(queued{f: f, push: true}, c.inBudget) {
		c.kick()
	}
}

// push queues an event; above the high-water mark it becomes a hint.
func (c *conn) push(f *frame, conv string, head int64) {
	if !c.addIf(queued{f: f, push: true}, c.underHighWater) {
		c.hint(conv, head)
		return
	}
	c.h.stats.Pushed.Add(1)
}

// hint queues one hint for conv unless one is already waiting.
func (c *conn) hint(conv string, head int64) {
	c.hmu.Lock()
	if c.hinted[conv] {
		c.hmu.Unlock()
		return
	}
	c.hinted[conv] = true
	c.hmu.Unlock()
	c.h.stats.Hinted.Add(1)
	c.control(&frame{b: wire.MarshalFrame(wire.Hint(conv, head, nil)), hint: conv})
}

// kick disconnects a client whose pushes do not fit in its budget; it
// resyncs when it reconnects. Nobody waits for it: the close runs on its own goroutine.
func (c *conn) kick() {
	if c.kicked.Swap(true) {
		return
	}
	c.h.stats.Kicked.Add(1)
	c.h.log.Info("closing slow client", "user", c.p.User, "device", c.p.DeviceID)
	c.ended(websocket.StatusPolicyViolation, "send budget exceeded: the client reads too slowly", "server")
	go func() {
		c.ws.Close(websocket.StatusPolicyViolation, "send budget exceeded: the client reads too slowly")
		c.cancel()
	}()
}

// revoke ends a socket whose token no longer authenticates: an error frame
// with the code (UNAUTHENTICATED or STALE_INSTALL) so the client knows not
// to reconnect with it, then close 1008. From then on it gets nothing.
func (c *conn) revoke(code parley.Code, msg string) {
	if c.revoked.Swap(true) {
		return
	}
	c.h.mu.Lock()
	c.h.unsubscribeLocked(c)
	c.h.mu.Unlock()
	c.h.stats.Revoked.Add(1)
	c.enqueue(&frame{b: wire.MarshalFrame(wire.Error(code, msg))})
	c.closeAfterFlush(websocket.StatusPolicyViolation, "token revoked")
}

// closeAfterFlush closes the socket once what is queued is written.
func (c *conn) closeAfterFlush(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() { c.flush <- closeReq{code, reason} })
}

// reply queues a reply frame with the request's rid.
func (c *conn) reply(f wire.Frame, rid json.RawMessage) {
	f.RID = rid
	c.enqueue(&frame{b: wire.MarshalFrame(f)})
}

func (c *conn) replyErr(rid json.RawMessage, err error, op string) {
	code, msg, requestID := c.h.errorOf(err, op)
	f := wire.Error(code, msg)
	f.RequestID = requestID
	c.reply(f, rid)
}

// limited answers RATE_LIMITED with retry_after_ms when the user's bucket
// for this frame (the bucket of its HTTP twin, FrameBuckets) is spent. A
// refused frame has no effect and is counted as rate limited only (a
// refused send is not a send).
func (c *conn) limited(ctx context.Context, req wire.Request) bool {
	lim, bucket := c.h.o.Limit, FrameBuckets[req.T]
	if lim == nil || bucket == "" {
		return false
	}
	ok, after := lim(ctx, bucket, c.p.User)
	if ok {
		return false
	}
	c.h.metric(func(m Metrics) { m.RateLimited(bucket, "ws") })
	f := wire.Error(parley.CodeRateLimited, "too many requests; retry after retry_after_ms with the same request key")
	f.RetryAfterMS = max(1, after.Milliseconds())
	c.reply(f, req.RID)
	return true
}

// metric runs one metrics call; a panic in it never reaches the socket.
func (h *Hub) metric(f func(Metrics)) {
	if h.o.Metrics == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("metric failed; request unaffected", "panic", v)
		}
	}()
	f(h.o.Metrics)
}

// handle answers one request frame.
func (c *conn) handle(ctx context.Context, data []byte) {
	req, err := wire.DecodeRequest(data)
	if err != nil {
		c.replyErr(req.RID, err, "decode")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.h.timeout())
	defer cancel()
	s, p := c.h.store, c.p
	var f wire.Frame
	if c.limited(ctx, req) {
		return
	}
	switch req.T {
	case wire.TSend:
		var sent parley.Sent
		sent, err = s.Send(ctx, p, parley.SendRequest{Conv: req.Conv, CMID: req.CMID, Body: req.Body})
		if err == nil && !sent.Dup && fault.Hit(fault.GatewaySend) != nil {
			// Lab fault (broken on purpose): the message is committed a
			// second time under another key, as a server that doubled a
			// send would.
			if again, e := s.Send(ctx, p, parley.SendRequest{Conv: req.Conv, CMID: dupKey(req.CMID), Body: req.Body}); e == nil {
				c.h.Publish(parley.Notice{Conv: again.Conv, Seq: again.Seq})
			}
		}
		if err == nil {
			c.h.Publish(parley.Notice{Conv: sent.Conv, Seq: sent.Seq})
			err = fault.Hit(fault.APIAfterSendCommit)
			f = wire.Sent(sent)
		}
		c.h.metric(func(m Metrics) { m.Send("ws", parley.SendOutcome(sent, err)) })
	case wire.TRecall:
		var r parley.Recalled
		r, err = s.Recall(ctx, p, parley.RecallRequest{Conv: req.Conv, Target: *req.Target, CMID: req.CMID})
		if err == nil {
			c.h.Publish(parley.Notice{Conv: r.Conv, Seq: r.Seq})
			f = wire.Recalled(r)
		}
	case wire.TSync:
		var page parley.Page
		page, err = s.Sync(ctx, p, req.SyncRequest())
		if err == nil && len(page.Events) > 0 && fault.Hit(fault.GatewaySync) != nil {
			// Lab fault (broken on purpose): the page skips an event but
			// keeps its cursor, so the client never sees it.
			page.Events = page.Events[1:]
		}
		f = wire.Page(page)
	case wire.TAck:
		var d int64
		d, err = s.Ack(ctx, p, req.Conv, *req.Seq)
		f = wire.Acked(req.Conv, d)
	case wire.TRead:
		var r int64
		r, err = s.Read(ctx, p, req.Conv, *req.Seq)
		if err == nil && r == *req.Seq {
			c.h.Publish(parley.Notice{Conv: req.Conv, Seq: r, User: p.User, Device: p.DeviceID})
		}
		f = wire.ReadOK(req.Conv, r)
	case wire.TConvs:
		var page parley.ConvsPage
		page, err = s.Convs(ctx, p, req.ConvsRequest())
		f = wire.Convs(page)
	case wire.TFetch:
		var ev parley.Event
		ev, err = s.Fetch(ctx, p, req.Conv, *req.Seq)
		f = wire.Fetched(ev)
	case wire.TSub:
		err = c.h.subscribe(ctx, c)
		f = wire.Subscribed()
	}
	if err != nil {
		c.replyErr(req.RID, err, req.T)
		return
	}
	c.reply(f, req.RID)
}

// Publish announces a committed change: to this gateway's fan-out at once
// and to every gateway over the bus. Call it after the commit, for every
// write (the HTTP API's too): a send or recall with the event's seq, a
// membership change with User set to the member, a read with User and
// Device. The bus may echo it back; the fan-out
// ignores seqs it has pushed. The bus.publish fault point drops both, as a
// publisher that died between commit and publish would: the backstop is
// then the only way the event is pushed.
func (h *Hub) Publish(n parley.Notice) {
	if fault.Hit(fault.BusPublish) != nil {
		return
	}
	h.Notify([]parley.Notice{n})
	if h.bus != nil {
		h.stats.NoticesSent.Add(1)
		h.bus.Publish(n)
	}
}

// dupKey is the request key of the gateway.send=dup fault's second copy.
func dupKey(cmid string) string {
	if len(cmid) > parley.MaxCMIDChars-4 {
		cmid = cmid[:parley.MaxCMIDChars-4]
	}
	return cmid + "~dup"
}
