package httpapi

import (
	"context"
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/wire"
)

type sendBody struct {
	Body string `json:"body"`
}

// handleSend posts a message: 201 for the first request under an
// Idempotency-Key, 200 with dup true for its replays. The key (the cmid) is
// read before the body, so a request without one changes nothing.
func handleSend(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		var b sendBody
		if err == nil {
			err = decode(w, r, &b)
		}
		if err != nil {
			d.refuseSend(w, err, "http")
			return
		}
		ctx, cancel := d.ctx(r)
		defer cancel()
		p, req := caller(r), parley.SendRequest{Conv: r.PathValue("id"), CMID: key, Body: b.Body}
		sent, err := d.Store.Send(ctx, p, req)
		d.answerSent(w, p, req, sent, err, "http")
	})
}

// answerSent finishes p's send req (HTTP or webhook): publish after the
// commit (carrying the event, as a WebSocket send does), then count the
// outcome, then answer.
func (d Deps) answerSent(w http.ResponseWriter, p parley.Principal, req parley.SendRequest, sent parley.Sent, err error, transport string) {
	if err == nil {
		d.Publish(parley.SentNotice(p, req, sent))
		err = fault.Hit(fault.APIAfterSendCommit)
	}
	d.Metrics.Send(transport, parley.SendOutcome(sent, err))
	if err != nil {
		writeError(w, d.Log, err, "send")
		return
	}
	status := http.StatusCreated
	if sent.Dup {
		status = http.StatusOK
	}
	encode(w, status, frameBody(wire.Sent(sent)))
}

// refuseSend answers a send that never reached the store, counting it.
func (d Deps) refuseSend(w http.ResponseWriter, err error, transport string) {
	d.Metrics.Send(transport, parley.SendOutcome(parley.Sent{}, err))
	writeError(w, d.Log, err, "send")
}

// handleEvents is sync: GET /api/convs/{id}/events?after=&limit=&epoch=.
func handleEvents(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		after, err := queryInt(r, "after", 0)
		var limit, epoch int64
		if err == nil {
			limit, err = queryInt(r, "limit", parley.DefaultPage)
		}
		if err == nil {
			epoch, err = queryInt(r, "epoch", 0)
		}
		if err != nil {
			writeError(w, d.Log, err, "sync")
			return
		}
		if limit < 1 {
			writeError(w, d.Log, parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1"), "sync")
			return
		}
		ctx, cancel := d.ctx(r)
		defer cancel()
		page, err := d.Store.Sync(ctx, caller(r), parley.SyncRequest{
			Conv: r.PathValue("id"), After: after, Limit: int(min(limit, parley.MaxPage)), Epoch: epoch,
		})
		if err != nil {
			writeError(w, d.Log, err, "sync")
			return
		}
		encode(w, http.StatusOK, frameBody(wire.Page(page)))
	})
}

// handleFetch returns one event: GET /api/convs/{id}/events/{seq}.
func handleFetch(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, err := pathSeq(r, "seq")
		if err != nil {
			writeError(w, d.Log, err, "fetch")
			return
		}
		ctx, cancel := d.ctx(r)
		defer cancel()
		ev, err := d.Store.Fetch(ctx, caller(r), r.PathValue("id"), seq)
		if err != nil {
			writeError(w, d.Log, err, "fetch")
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
func handleRead(d Deps) http.Handler {
	return handleCursor(d, "read", d.Store.Read, func(p parley.Principal, conv string, asked, read int64) wire.Frame {
		if read == asked {
			d.Publish(parley.Notice{Conv: conv, Seq: read, User: p.User, Device: p.DeviceID})
		}
		return wire.ReadOK(conv, read)
	})
}

// handleAck moves the device's delivered cursor.
func handleAck(d Deps) http.Handler {
	return handleCursor(d, "ack", d.Store.Ack, func(_ parley.Principal, conv string, _, delivered int64) wire.Frame {
		return wire.Acked(conv, delivered)
	})
}

// handleCursor serves read and ack: {seq} in, the cursor's new value out.
func handleCursor(d Deps, op string,
	move func(context.Context, parley.Principal, string, int64) (int64, error),
	reply func(p parley.Principal, conv string, asked, now int64) wire.Frame,
) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b seqBody
		err := decode(w, r, &b)
		if err == nil {
			err = b.check()
		}
		if err != nil {
			writeError(w, d.Log, err, op)
			return
		}
		ctx, cancel := d.ctx(r)
		defer cancel()
		p, conv := caller(r), r.PathValue("id")
		now, err := move(ctx, p, conv, *b.Seq)
		if err != nil {
			writeError(w, d.Log, err, op)
			return
		}
		encode(w, http.StatusOK, frameBody(reply(p, conv, *b.Seq, now)))
	})
}

type recallBody struct {
	Target *int64 `json:"target"`
}

// handleRecall recalls the caller's message: 201 first, 200 with dup true
// for a replay under the same Idempotency-Key.
func handleRecall(d Deps) http.Handler {
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
			writeError(w, d.Log, err, "recall")
			return
		}
		ctx, cancel := d.ctx(r)
		defer cancel()
		rec, err := d.Store.Recall(ctx, caller(r), parley.RecallRequest{Conv: r.PathValue("id"), Target: *b.Target, CMID: key})
		if err != nil {
			writeError(w, d.Log, err, "recall")
			return
		}
		d.Publish(parley.RecalledNotice(rec))
		status := http.StatusCreated
		if rec.Dup {
			status = http.StatusOK
		}
		encode(w, status, frameBody(wire.Recalled(rec)))
	})
}
