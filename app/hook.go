package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
)

// Incoming webhooks post a message as the hook's bot user. A request
// carries the message's request key, a timestamp (decimal Unix seconds)
// and a signature, "sha256=" and the lower-case hex HMAC-SHA256 under the
// hook's secret of timestamp "." key "." raw body. The signature binds the
// key, so a captured request cannot be replayed under another key; within
// the HookMaxSkew a timestamp is accepted, a replay under the same key is a
// send replay (dup), and later it is refused.
const HookMaxSkew = 5 * time.Minute

// ErrHookSignature is every signature failure: a client learns no more
// than "does not verify" (unknown hook, bad signature, stale timestamp are
// told apart only in the server log).
var ErrHookSignature = parley.Errorf(parley.CodeUnauthenticated, "webhook signature does not verify (or the timestamp is outside 5 minutes)")

// SignHook returns the signature of a webhook request: senders and tests
// use it.
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

// HookPost is one webhook request as a transport received it.
type HookPost struct {
	Hook      string // the hook's id
	Key       string // the message's request key
	Timestamp string
	Signature string
	Raw       []byte    // the body, exactly as received: the signature covers it
	Now       time.Time // the time the timestamp is judged at
	// Decode reads the message out of Raw, once the signature verified.
	Decode func(raw []byte) (HookMessage, error)
}

// HookMessage is what a webhook request's body says: the text, and the
// message it replies to (0: none). Mentions are the store's to find in
// the text, as for any send.
type HookMessage struct {
	Body    string
	ReplyTo int64
}

// PostHook checks a webhook request and posts its message as the hook's
// bot user, counted under the hook transport. In order: the hook exists
// and the signature verifies (ErrHookSignature otherwise, the reason only
// logged), the body decodes, the bot is not disabled (a hook outlives its
// checks: ErrAccessDenied), then Send.
func (s *Service) PostHook(ctx context.Context, hp HookPost) (parley.Sent, error) {
	h, err := s.store.Hook(ctx, hp.Hook)
	switch code := parley.ErrorCode(err); {
	case err == nil:
		if err = VerifyHook(h.Secret, hp.Timestamp, hp.Key, hp.Raw, hp.Signature, hp.Now); err != nil {
			s.log.Info("webhook refused", "hook", hp.Hook, "why", err.Error())
			err = ErrHookSignature
		}
	case code == parley.CodeNotFound || code == parley.CodeInvalidArgument:
		s.log.Info("webhook refused", "hook", hp.Hook, "why", "no such hook")
		err = ErrHookSignature
	}
	if err != nil {
		return parley.Sent{}, s.RefuseSend(Webhook, err)
	}
	msg, err := hp.Decode(hp.Raw)
	if err != nil {
		return parley.Sent{}, s.RefuseSend(Webhook, err)
	}
	if u, err := s.store.User(ctx, h.Bot); err != nil || u.Disabled {
		if err == nil || parley.ErrorCode(err) == parley.CodeNotFound {
			err = parley.ErrAccessDenied
		}
		return parley.Sent{}, s.RefuseSend(Webhook, err)
	}
	bot := parley.Principal{User: h.Bot, Role: parley.RoleUser, DeviceID: "hook:" + h.ID}
	return s.Send(ctx, Webhook, bot, parley.SendRequest{Conv: h.Conv, CMID: hp.Key, Body: msg.Body, ReplyTo: msg.ReplyTo})
}
