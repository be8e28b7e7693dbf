package gateway

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// Requests. A socket's reader hands each request frame to the hub's
// request pool (reqpool.go), which runs conn.handle: the rate limit of the
// frame's bucket (limited), the store call, the notice of a write
// (Publish) and the reply.

// FrameBuckets maps every request frame to the rate-limit bucket of its
// HTTP twin (httpapi/routes.go): send and recall count with HTTP sends and
// recalls, the reads with the read routes. sub has no twin: it reads the
// store like GET /api/convs, so it counts in read too.
var FrameBuckets = map[string]string{
	wire.TSend:   ratelimit.BucketSend,
	wire.TRecall: ratelimit.BucketSend,
	wire.TSync:   ratelimit.BucketRead,
	wire.TConvs:  ratelimit.BucketRead,
	wire.TFetch:  ratelimit.BucketRead,
	wire.TAck:    ratelimit.BucketRead,
	wire.TRead:   ratelimit.BucketRead,
	wire.TSub:    ratelimit.BucketRead,
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
	var sentReply []byte // a send's reply, written without reflection
	if c.limited(ctx, req) {
		return
	}
	switch req.T {
	case wire.TSend:
		var sent parley.Sent
		sw := c.h.worker(req.Conv)
		sw.sendStarted() // its push may wait for it (awaitSends)
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
			c.h.Publish(parley.SentNotice(p, parley.SendRequest{Conv: req.Conv, Body: req.Body}, sent))
			err = fault.Hit(fault.APIAfterSendCommit)
			sentReply = wire.MarshalSent(sent, req.RID)
		}
		sw.sendDone()
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
	switch {
	case err != nil:
		c.replyErr(req.RID, err, req.T)
	case sentReply != nil:
		c.enqueue(&frame{b: sentReply})
	default:
		c.reply(f, req.RID)
	}
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

// errorOf turns an error into what a client sees. An error without a
// protocol code is internal: logged with a request id, shown as UNAVAILABLE
// with a generic message and that id.
func (h *Hub) errorOf(err error, op string) (code parley.Code, msg, requestID string) {
	code = parley.ErrorCode(err)
	var pe *parley.Error
	if errors.As(err, &pe) {
		return code, pe.Msg, ""
	}
	if errors.Is(err, context.Canceled) {
		// The socket or the server ended mid-request: nobody is left to
		// judge, and nothing went wrong inside (the lifetime line says
		// how the socket closed).
		return parley.CodeUnavailable, parley.InternalMessage, ""
	}
	requestID = parley.NewID()
	h.log.Error("internal error", "op", op, "request_id", requestID, "err", err)
	return parley.CodeUnavailable, parley.InternalMessage, requestID
}

// dupKey is the request key of the gateway.send=dup fault's second copy.
func dupKey(cmid string) string {
	if len(cmid) > parley.MaxCMIDChars-4 {
		cmid = cmid[:parley.MaxCMIDChars-4]
	}
	return cmid + "~dup"
}
