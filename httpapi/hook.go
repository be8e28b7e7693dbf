package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
)

// Incoming webhooks: POST /hooks/{id} with
//
//	Idempotency-Key: <key>                 the message's cmid (required)
//	X-Parley-Timestamp: <unix seconds>
//	X-Parley-Signature: sha256=<hex HMAC-SHA256(secret, timestamp "." key "." raw body)>
//	{"body": "…", "reply_to": 12}        reply_to optional
//
// app.PostHook checks the signature (app.VerifyHook) and posts the message
// as the hook's bot user.
const (
	HookTimestampHeader = "X-Parley-Timestamp"
	HookSignatureHeader = "X-Parley-Signature"
)

// handleHook posts a signed message as the hook's bot user.
func handleHook(c calls, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		if err != nil {
			c.refuseSend(w, err, app.Webhook)
			return
		}
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			c.refuseSend(w, parley.Errorf(parley.CodeInvalidArgument, "request body over %d bytes", maxBody), app.Webhook)
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		sent, err := c.app.PostHook(ctx, app.HookPost{
			Hook: r.PathValue("id"), Key: key, Raw: raw, Now: now(),
			Timestamp: r.Header.Get(HookTimestampHeader), Signature: r.Header.Get(HookSignatureHeader),
			Decode: func(raw []byte) (app.HookMessage, error) {
				var b sendBody
				err := decodeFrom(bytes.NewReader(raw), &b)
				return app.HookMessage{Body: b.Body, ReplyTo: b.ReplyTo}, err
			},
		})
		c.answerSent(w, sent, err)
	})
}
