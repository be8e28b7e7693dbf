package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
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

// conn is one socket. The reader goroutine answers requests in order; a
// writer goroutine, started when something is queued and gone once the
// queue is empty, owns every write of frames; the hub's keepalive loop
// pings it. An idle socket so costs one goroutine (its reader). Whether it
// is subscribed, and what it watches, is the registry's (Hub.subs), under
// the hub's lock; nothing of the conn is guarded by a lock but its own.
type conn struct {
	h     *Hub
	ws    *websocket.Conn
	raw   *corkConn // the TCP connection under ws; nil: not hijacked through hijackWriter
	p     parley.Principal
	token string // re-checked now and then: a revoked token ends the socket

	// The send queue. Bytes are counted from enqueue until the frame is
	// written, so a write blocked on a peer that does not read still counts.
	qmu       sync.Mutex
	queue     []queued
	bytes     int64     // everything queued
	pushBytes int64     // the pushes among it
	writing   bool      // a writer goroutine runs (wwg counts it)
	wave      *wave     // the fan-out wave that started the writer, until it takes its first batch
	stopped   bool      // nothing more is queued or written
	closing   *closeReq // write what is queued, then close
	wwg       sync.WaitGroup
	room      chan struct{} // the queue went back under its budget

	hmu    sync.Mutex
	hinted map[string]bool // conversations with a hint in the queue

	ctx       context.Context // ends when the socket is done
	cancel    context.CancelFunc
	closeOnce sync.Once
	kicked    atomic.Bool
	pinging   atomic.Bool
	revoked   atomic.Bool // the token stopped working: frames are refused
	away      atomic.Bool // the client reported this socket idle (presence frame)

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
		room:    make(chan struct{}, 1),
		hinted:  map[string]bool{},
		started: time.Now(),
	}
}

// serve runs the socket until it closes. Once the reader ends nothing more
// is queued; a write still blocked on a peer that does not read ends with
// the connection, and whatever is still queued is uncounted.
func (c *conn) serve() {
	defer c.cancel()
	// The reads are not given c.ctx (see read): the socket's end closes
	// the connection instead, which ends a read the same way.
	stop := context.AfterFunc(c.ctx, func() { c.ws.CloseNow() })
	c.readLoop(c.ctx)
	stop()
	c.cancel()
	c.qmu.Lock()
	c.stopped = true
	c.qmu.Unlock()
	c.ws.CloseNow()
	c.wwg.Wait()
	c.qmu.Lock()
	rest := c.queue
	c.queue = nil
	c.qmu.Unlock()
	c.doneAll(rest)
}

func (c *conn) readLoop(ctx context.Context) {
	for {
		if !c.waitRoom(ctx) {
			return
		}
		typ, buf, err := c.read()
		if err != nil {
			c.readEnded(err)
			return // closed, or over the read limit (the library closed it with 1009)
		}
		c.answer(ctx, typ, *buf)
		putFrameBuf(buf)
	}
}

// answer handles one frame read from the socket; data is not kept after
// it returns (its buffer is reused).
func (c *conn) answer(ctx context.Context, typ websocket.MessageType, data []byte) {
	if typ != websocket.MessageText {
		c.reply(wire.Error(parley.CodeInvalidArgument, "frames must be JSON text frames"), nil)
		return
	}
	if c.revoked.Load() {
		c.refuse(data, parley.CodeUnauthenticated, parley.ErrBadToken.Msg)
		return
	}
	c.h.drainMu.RLock()
	if c.h.draining.Load() {
		c.h.drainMu.RUnlock()
		c.refuse(data, parley.CodeUnavailable, "server is draining; reconnect and retry with the same request key")
		return
	}
	c.handleOff(ctx, data)
	c.h.drainMu.RUnlock()
}

// read reads one message into a pooled buffer (putFrameBuf gives it
// back). It gives the library no context: with one, the library registers
// a cancel callback on it (context.AfterFunc, a few allocations and the
// parent's lock) for every frame header and every payload read; serve
// closes the connection when c.ctx ends instead.
func (c *conn) read() (websocket.MessageType, *[]byte, error) {
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, err
	}
	buf := frameBufs.Get().(*[]byte)
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			*buf = b
			return typ, buf, nil
		}
		if err != nil {
			*buf = b
			putFrameBuf(buf)
			return 0, nil, err
		}
	}
}

// frameBufs holds the buffers frames are read into: a socket holds one
// only while it reads and answers a frame, never while it is idle.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// putFrameBuf gives a frame's buffer back, unless a large frame grew it
// (kept, a few of them would hold megabytes nobody needs).
func putFrameBuf(buf *[]byte) {
	if cap(*buf) <= 16<<10 {
		frameBufs.Put(buf)
	}
}

// handleOff answers one request on a pooled worker goroutine (reqPool)
// and waits for it: requests stay in order, and the deep stack a store call
// grows is the worker's, kept for the next request of any socket, so the
// reader, which waits on an idle socket for its whole life, keeps a small
// one.
func (c *conn) handleOff(ctx context.Context, data []byte) {
	c.h.reqs.run(c, ctx, data)
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
// q was queued (or dropped because the socket is done).
func (c *conn) addIf(q queued, fits func(bytes, pushBytes, n int64) bool) bool {
	return c.addHeld(q, fits, false)
}

// addHeld is addIf that, when hold is set, leaves the writer to be started
// by startWriterWave (unless one runs already: it takes q with its next
// batch).
func (c *conn) addHeld(q queued, fits func(bytes, pushBytes, n int64) bool, hold bool) bool {
	n := q.f.size()
	c.qmu.Lock()
	if c.stopped {
		c.qmu.Unlock()
		return true // the socket is done: nobody will read it
	}
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
	if !hold {
		c.startWriterLocked()
	}
	c.qmu.Unlock()
	c.h.stats.QueuedBytes.Add(n)
	for peak := c.h.stats.PeakQueuedBytes.Load(); total > peak; peak = c.h.stats.PeakQueuedBytes.Load() {
		if c.h.stats.PeakQueuedBytes.CompareAndSwap(peak, total) {
			break
		}
	}
	return true
}

// startWriterWave starts the writer if something is queued and none runs,
// counted in wv until it has taken its first batch (wave.taken).
func (c *conn) startWriterWave(wv *wave) {
	c.qmu.Lock()
	if len(c.queue) > 0 && !c.writing && !c.stopped {
		wv.n.Add(1)
		c.wave = wv
		c.startWriterLocked()
	}
	c.qmu.Unlock()
}

// startWriterLocked starts the writer goroutine unless one runs or the
// socket is done; under qmu.
func (c *conn) startWriterLocked() {
	if c.writing || c.stopped {
		return
	}
	c.writing = true
	c.wwg.Add(1)
	go c.writeLoop()
}

// doneAll uncounts written (or abandoned) frames and lets the reader go on
// once the queue is back under its budget.
func (c *conn) doneAll(qs []queued) {
	if len(qs) == 0 {
		return
	}
	var n, pn int64
	for _, q := range qs {
		s := q.f.size()
		n += s
		if q.push {
			pn += s
		}
	}
	c.qmu.Lock()
	c.bytes -= n
	c.pushBytes -= pn
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

// writeLoop writes what is queued, a batch at a time: every frame queued
// when it looks is written as its own WebSocket message into the corked
// connection, which sends the batch in one write under one deadline
// (WriteTimeout). It returns once the queue is empty (the next frame
// queued starts another), after a close asked by closeAfterFlush, or when
// a write fails or times out (the socket ends). A writer started by a
// fan-out wave tells the wave once it has taken its first batch.
func (c *conn) writeLoop() {
	defer c.wwg.Done()
	for {
		c.qmu.Lock()
		batch := c.queue
		c.queue = nil
		req := c.closing
		c.closing = nil
		wv := c.wave
		c.wave = nil
		switch {
		case req != nil:
			c.stopped = true // what is queued now is the last
		case c.stopped || len(batch) == 0:
			c.writing = false
			c.qmu.Unlock()
			wv.taken()
			c.doneAll(batch)
			return
		}
		c.qmu.Unlock()
		wv.taken()
		ok := c.writeBatch(batch)
		if req != nil {
			c.ended(req.code, req.reason, "server")
			c.ws.Close(req.code, req.reason)
			c.cancel()
			return
		}
		if !ok {
			c.ended(websocket.StatusAbnormalClosure, "write failed or timed out", "server")
			c.qmu.Lock()
			c.stopped = true
			c.qmu.Unlock()
			c.cancel()
			return
		}
	}
}

// writeBatch writes batch, corked, and uncounts it; false when a write
// failed or timed out.
func (c *conn) writeBatch(batch []queued) bool {
	defer c.doneAll(batch)
	for _, q := range batch {
		if q.f.hint != "" {
			c.hmu.Lock()
			delete(c.hinted, q.f.hint)
			c.hmu.Unlock()
		}
	}
	if c.raw == nil { // not hijacked by us: a deadline per frame
		c.h.stats.SocketWrites.Add(int64(len(batch)))
		for _, q := range batch {
			ctx, cancel := context.WithTimeout(c.ctx, c.h.o.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, q.f.b)
			cancel()
			if err != nil {
				return false
			}
		}
		return true
	}
	c.h.stats.SocketWrites.Add(1)
	c.raw.cork()
	ok := true
	for _, q := range batch {
		// No context deadline: the corked connection takes the bytes
		// without waiting, and the batch's write has the deadline.
		if c.ws.Write(context.Background(), websocket.MessageText, q.f.b) != nil {
			ok = false
			break
		}
	}
	if c.raw.uncork() != nil {
		ok = false
	}
	return ok
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

// pushHeld queues an event, leaving the writer to be started by the
// fan-out's wave (startWriterWave); above the high-water mark it becomes a
// hint, which starts the writer at once.
func (c *conn) pushHeld(f *frame, conv string, head int64) {
	if !c.addHeld(queued{f: f, push: true}, c.underHighWater, true) {
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

// closeAfterFlush closes the socket once what is queued now is written;
// frames queued after it are dropped.
func (c *conn) closeAfterFlush(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.qmu.Lock()
		defer c.qmu.Unlock()
		if c.stopped {
			return
		}
		c.closing = &closeReq{code, reason}
		c.startWriterLocked()
	})
}

// reply queues a reply frame with the request's rid.
func (c *conn) reply(f wire.Frame, rid json.RawMessage) {
	f.RID = rid
	c.enqueue(&frame{b: wire.MarshalFrame(f)})
}
