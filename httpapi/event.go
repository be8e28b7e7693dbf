package httpapi

import (
	"context"
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/wire"
)

type sendBody struct {
	Body    string `json:"body"`
	ReplyTo int64  `json:"reply_to"` // 0 or absent: a reply to nothing

	Attachments []string `json:"attachments"` // upload ids of files the message carries
}

// handleSend posts a message, optionally a reply (reply_to): 201 for the
// first request under an Idempotency-Key, 200 with dup true for its
// replays. The key (the cmid) is
// read before the body, so a request without one changes nothing.
func handleSend(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		var b sendBody
		if err == nil {
			err = decode(w, r, &b)
		}
		if err == nil && b.ReplyTo < 0 {
			err = parley.Errorf(parley.CodeInvalidArgument, "reply_to must be a seq of at least 1")
		}
		if err != nil {
			c.refuseSend(w, err, app.HTTP)
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		sent, err := c.app.Send(ctx, app.HTTP, caller(r), parley.SendRequest{Conv: r.PathValue("id"), CMID: key, Body: b.Body, ReplyTo: b.ReplyTo, Attachments: b.Attachments})
		c.answerSent(w, sent, err)
	})
}

// answerSent answers a send (HTTP or webhook): 201 for a new message, 200
// for a replay.
func (c calls) answerSent(w http.ResponseWriter, sent parley.Sent, err error) {
	if err != nil {
		c.writeError(w, err, "send")
		return
	}
	status := http.StatusCreated
	if sent.Dup {
		status = http.StatusOK
	}
	encode(w, status, frameBody(wire.Sent(sent)))
}

// refuseSend answers a send that never reached the store, counting it.
func (c calls) refuseSend(w http.ResponseWriter, err error, transport string) {
	c.writeError(w, c.app.RefuseSend(transport, err), "send")
}

// handleEvents is sync: GET /api/convs/{id}/events?after=&limit=&epoch=&thread=.
func handleEvents(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		after, err := queryInt(r, "after", 0)
		var limit, epoch, thread int64
		if err == nil {
			limit, err = queryInt(r, "limit", parley.DefaultPage)
		}
		if err == nil {
			epoch, err = queryInt(r, "epoch", 0)
		}
		if err == nil {
			thread, err = queryInt(r, "thread", 0)
		}
		if _, given := r.URL.Query()["thread"]; err == nil && given && thread < 1 {
			err = parley.Errorf(parley.CodeInvalidArgument, "thread must be a seq of at least 1")
		}
		if err != nil {
			c.writeError(w, err, "sync")
			return
		}
		if limit < 1 {
			c.writeError(w, parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1"), "sync")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		page, err := c.app.Sync(ctx, caller(r), parley.SyncRequest{
			Conv: r.PathValue("id"), After: after, Limit: int(min(limit, parley.MaxPage)), Epoch: epoch, Thread: thread,
		})
		if err != nil {
			c.writeError(w, err, "sync")
			return
		}
		encode(w, http.StatusOK, frameBody(wire.Page(page)))
	})
}

// handleFetch returns one event: GET /api/convs/{id}/events/{seq}.
func handleFetch(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, err := pathSeq(r, "seq")
		if err != nil {
			c.writeError(w, err, "fetch")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		ev, err := c.app.Fetch(ctx, caller(r), r.PathValue("id"), seq)
		if err != nil {
			c.writeError(w, err, "fetch")
			return
		}
		encode(w, http.StatusOK, frameBody(wire.Fetched(ev)))
	})
}

type seqBody struct {
	Seq *int64 `json:"seq"`
}

func (b seqBody) check() error {
	if b.Seq == nil {
		return parley.Errorf(parley.CodeInvalidArgument, "seq is required")
	}
	return nil
}

// handleRead moves the user's read cursor; the user's other devices get a
// hint when it moved.
func handleRead(c calls) http.Handler {
	return handleCursor(c, "read", c.app.Read, wire.ReadOK)
}

// handleAck moves the device's delivered cursor.
func handleAck(c calls) http.Handler {
	return handleCursor(c, "ack", c.app.Ack, wire.Acked)
}

// handleCursor serves read and ack: {seq} in, the cursor's new value out.
func handleCursor(c calls, op string,
	move func(context.Context, parley.Principal, string, int64) (int64, error),
	reply func(conv string, now int64) wire.Frame,
) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b seqBody
		err := decode(w, r, &b)
		if err == nil {
			err = b.check()
		}
		if err != nil {
			c.writeError(w, err, op)
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		conv := r.PathValue("id")
		now, err := move(ctx, caller(r), conv, *b.Seq)
		if err != nil {
			c.writeError(w, err, op)
			return
		}
		encode(w, http.StatusOK, frameBody(reply(conv, now)))
	})
}

type recallBody struct {
	Target *int64 `json:"target"`
}

// handleRecall recalls the caller's message: 201 first, 200 with dup true
// for a replay under the same Idempotency-Key.
func handleRecall(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		var b recallBody
		if err == nil {
			err = decode(w, r, &b)
		}
		if err == nil && b.Target == nil {
			err = parley.Errorf(parley.CodeInvalidArgument, "target is required")
		}
		if err != nil {
			c.writeError(w, err, "recall")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		rec, err := c.app.Recall(ctx, caller(r), parley.RecallRequest{Conv: r.PathValue("id"), Target: *b.Target, CMID: key})
		if err != nil {
			c.writeError(w, err, "recall")
			return
		}
		status := http.StatusCreated
		if rec.Dup {
			status = http.StatusOK
		}
		encode(w, status, frameBody(wire.Recalled(rec)))
	})
}
