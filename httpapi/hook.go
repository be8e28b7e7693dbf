package httpapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
)

// Incoming webhooks: POST /hooks/{id} with
//
//	Idempotency-Key: <key>                 the message's cmid (required)
//	X-Parley-Timestamp: <unix seconds>
//	X-Parley-Signature: sha256=<hex HMAC-SHA256(secret, timestamp "." key "." raw body)>
//	{"body": "…"}
//
// The signature binds the key, so a captured request cannot be replayed
// under another key; within the 5 minutes a timestamp is accepted, a replay
// under the same key is a send replay (200, dup true), and later it is
// refused. The message is posted as the hook's bot user through Store.Send.
const (
	HookTimestampHeader = "X-Parley-Timestamp"
	HookSignatureHeader = "X-Parley-Signature"
	HookMaxSkew         = 5 * time.Minute
)

// ErrHookSignature is every signature failure: a client learns no more
// than "does not verify" (unknown hook, bad signature, stale timestamp are
// told apart only in the server log).
var ErrHookSignature = parley.Errorf(parley.CodeUnauthenticated, "webhook signature does not verify (or the timestamp is outside 5 minutes)")

// SignHook returns the X-Parley-Signature value for a request: senders and
// tests use it.
func SignHook(secret, timestamp, key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	io.WriteString(m, timestamp)
	io.WriteString(m, ".")
	io.WriteString(m, key)
	io.WriteString(m, ".")
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifyHook checks a webhook request's timestamp and signature against
// secret at now. The timestamp is decimal Unix seconds within HookMaxSkew
// of now, either side; the signature is compared in constant time. The
// returned error says why, for the log; clients get ErrHookSignature.
func VerifyHook(secret, timestamp, key string, body []byte, signature string, now time.Time) error {
	if timestamp == "" || len(timestamp) > 12 || strings.TrimLeft(timestamp, "0123456789") != "" {
		return errors.New("timestamp is not decimal Unix seconds")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("timestamp is not decimal Unix seconds")
	}
	if skew := now.Sub(time.Unix(ts, 0)); skew > HookMaxSkew || skew < -HookMaxSkew {
		return errors.New("timestamp outside 5 minutes")
	}
	got, ok := strings.CutPrefix(signature, "sha256=")
	if !ok {
		return errors.New("signature must be sha256=<hex>")
	}
	gotMAC, err := hex.DecodeString(got)
	if err != nil || len(gotMAC) != sha256.Size || got != strings.ToLower(got) {
		return errors.New("signature must be sha256=<64 lower-case hex digits>")
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(SignHook(secret, timestamp, key, body), "sha256="))
	if !hmac.Equal(gotMAC, want) {
		return errors.New("signature mismatch")
	}
	return nil
}

// handleHook posts a signed message as the hook's bot user.
func handleHook(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		if err != nil {
			d.refuseSend(w, err, "hook")
			return
		}
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			d.refuseSend(w, parley.Errorf(parley.CodeInvalidArgument, "request body over %d bytes", maxBody), "hook")
			return
		}
		ctx, cancel := d.ctx(r)
		defer cancel()
		id := r.PathValue("id")
		h, err := d.Store.Hook(ctx, id)
		switch code := parley.ErrorCode(err); {
		case err == nil:
			err = VerifyHook(h.Secret, r.Header.Get(HookTimestampHeader), key, raw, r.Header.Get(HookSignatureHeader), d.Now())
			if err != nil {
				d.Log.Info("webhook refused", "hook", id, "why", err.Error())
				err = ErrHookSignature
			}
		case code == parley.CodeNotFound || code == parley.CodeInvalidArgument:
			d.Log.Info("webhook refused", "hook", id, "why", "no such hook")
			err = ErrHookSignature
		}
		if err != nil {
			d.refuseSend(w, err, "hook")
			return
		}
		var b sendBody
		if err := decodeFrom(bytes.NewReader(raw), &b); err != nil {
			d.refuseSend(w, err, "hook")
			return
		}
		// A hook outlives its checks: a bot disabled since is refused.
		if u, err := d.Store.User(ctx, h.Bot); err != nil || u.Disabled {
			if err == nil || parley.ErrorCode(err) == parley.CodeNotFound {
				err = parley.ErrAccessDenied
			}
			d.refuseSend(w, err, "hook")
			return
		}
		bot := parley.Principal{User: h.Bot, Role: parley.RoleUser, DeviceID: "hook:" + h.ID}
		req := parley.SendRequest{Conv: h.Conv, CMID: key, Body: b.Body}
		sent, err := d.Store.Send(ctx, bot, req)
		d.answerSent(w, bot, req, sent, err, "hook")
	})
}
