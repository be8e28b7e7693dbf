package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// Requests. A socket's reader hands each request frame to the hub's
// request pool (reqpool.go), which runs conn.handle: the rate limit of the
// frame's bucket (limited), the use case (package app, which publishes a
// write's notice through Publish) and the reply.

// FrameBuckets maps every request frame to the rate-limit bucket of its
// HTTP twin (httpapi/routes.go): send and recall count with HTTP sends and
// recalls, edit with PATCH of a message, react with PUT and DELETE of a
// reaction, search with GET /api/search, the reads with the read routes.
// sub has no twin: it reads the store like GET /api/convs, so it counts in
// read too, as do the signals (typing, presence), which read the store
// once each. A typing repeat within parley.TypingEvery is dropped before
// the bucket is asked: it costs nothing and is never answered.
var FrameBuckets = map[string]string{
	wire.TSend:     ratelimit.BucketSend,
	wire.TRecall:   ratelimit.BucketSend,
	wire.TEdit:     ratelimit.BucketEdit,
	wire.TReact:    ratelimit.BucketReact,
	wire.TSync:     ratelimit.BucketRead,
	wire.TConvs:    ratelimit.BucketRead,
	wire.TFetch:    ratelimit.BucketRead,
	wire.TAck:      ratelimit.BucketRead,
	wire.TRead:     ratelimit.BucketRead,
	wire.TSub:      ratelimit.BucketRead,
	wire.TSearch:   ratelimit.BucketSearch,
	wire.TTyping:   ratelimit.BucketRead,
	wire.TPresence: ratelimit.BucketRead,
}

// replyErr replies with what app.Explain lets the client see of err.
func (c *conn) replyErr(rid json.RawMessage, err error, op string) {
	e := c.h.app.Explain(err, op, "")
	f := wire.Error(e.Code, e.Msg)
	f.RequestID = e.RequestID
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

// handle answers one request frame: decode, pass the rate limit, run the
// use case (package app) under the store timeout, reply.
func (c *conn) handle(ctx context.Context, data []byte) {
	req, err := wire.DecodeRequest(data)
	if err != nil {
		c.replyErr(req.RID, err, "decode")
		return
	}
	if req.T == wire.TTyping && !c.h.sig.allowTyping(c.p.User, req.Conv, time.Now()) {
		return // a repeat: dropped, silently
	}
	ctx, cancel := context.WithTimeout(ctx, c.h.timeout())
	defer cancel()
	if c.limited(ctx, req) {
		return
	}
	switch req.T {
	case wire.TSend:
		c.send(ctx, req)
		return
	case wire.TTyping:
		c.typing(ctx, req)
		return
	case wire.TPresence:
		c.setPresence(req)
		return
	}
	f, err := c.request(ctx, req)
	if err != nil {
		c.replyErr(req.RID, err, req.T)
		return
	}
	c.reply(f, req.RID)
}

// send answers a send frame. While it is being committed, the push of its
// conversation's fan-out may wait for it (awaitSends), so its event leaves
// with the others of the wave; its reply is encoded without reflection.
func (c *conn) send(ctx context.Context, req wire.Request) {
	fo := c.h.fanoutOf(req.Conv)
	fo.sendStarted()
	sent, err := c.h.app.Send(ctx, app.WebSocket, c.p, req.SendRequest())
	fo.sendDone()
	if err != nil {
		c.replyErr(req.RID, err, req.T)
		return
	}
	c.enqueue(&frame{b: wire.MarshalSent(sent, req.RID)})
}

// request runs every request but send and returns its reply frame.
func (c *conn) request(ctx context.Context, req wire.Request) (wire.Frame, error) {
	a, p := c.h.app, c.p
	switch req.T {
	case wire.TRecall:
		r, err := a.Recall(ctx, p, parley.RecallRequest{Conv: req.Conv, Target: *req.Target, CMID: req.CMID})
		return wire.Recalled(r), err
	case wire.TEdit:
		e, err := a.Edit(ctx, p, req.EditRequest())
		return wire.Edited(e), err
	case wire.TReact:
		r, err := a.React(ctx, p, req.ReactRequest())
		return wire.Reacted(r), err
	case wire.TSync:
		page, err := a.Sync(ctx, p, req.SyncRequest())
		if err == nil && len(page.Events) > 0 && fault.Hit(fault.GatewaySync) != nil {
			// Lab fault (broken on purpose): the page skips an event but
			// keeps its cursor, so the client never sees it.
			page.Events = page.Events[1:]
		}
		return wire.Page(page), err
	case wire.TAck:
		d, err := a.Ack(ctx, p, req.Conv, *req.Seq)
		return wire.Acked(req.Conv, d), err
	case wire.TRead:
		r, err := a.Read(ctx, p, req.Conv, *req.Seq)
		return wire.ReadOK(req.Conv, r), err
	case wire.TConvs:
		page, err := a.Convs(ctx, p, req.ConvsRequest())
		return wire.Convs(page), err
	case wire.TFetch:
		ev, err := a.Fetch(ctx, p, req.Conv, *req.Seq)
		return wire.Fetched(ev), err
	case wire.TSub:
		return wire.Subscribed(), c.h.subscribe(ctx, c)
	case wire.TSearch:
		r, err := req.SearchRequest() // checked by the decoder: cannot fail here
		if err != nil {
			return wire.Frame{}, err
		}
		page, err := a.Search(ctx, app.WebSocket, p, r)
		return wire.Results(page), err
	}
	return wire.Frame{}, parley.Errorf(parley.CodeInvalidArgument, "unknown request type %q", req.T)
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
