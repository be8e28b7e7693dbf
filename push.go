package parley

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"net/url"
	"strings"
	"time"
)

// Web Push (docs/design.md#push-notifications). A browser subscribes with
// its push service and hands the server the subscription (an endpoint URL
// and two keys); when a message is committed, the gateway that committed
// it pushes a hint {conv, seq} to the subscriptions of the members who
// should hear of it, encrypted for each (package webpush). The store keeps
// the server's VAPID key, the subscriptions, each user's level per
// conversation, and answers who to push to.
type Push interface {
	// PushKey returns the deployment's VAPID private key, a P-256 scalar
	// of 32 bytes (NewPushKey): created by the first caller, the same for
	// every later caller and every store on the database, kept sealed
	// (Options.Secrets, label PushKeyLabel).
	PushKey(ctx context.Context) ([]byte, error)

	// SavePushSubscription binds a subscription to p's device (user and
	// device id). Its endpoint is unique: an endpoint already bound to p's
	// device keeps its id (its keys are updated: created false); one bound
	// to another device, of p or of anyone, moves to p's device under a new
	// id (created true), as does a new endpoint. A device holds at most
	// MaxPushSubscriptions; a new one beyond that replaces the device's
	// oldest. Check order: CheckPushSubscription (INVALID_ARGUMENT).
	SavePushSubscription(ctx context.Context, p Principal, s NewPushSubscription) (sub PushSubscription, created bool, err error)

	// DeletePushSubscription deletes one of p's subscriptions (of any of
	// the user's devices). Errors: INVALID_ARGUMENT (malformed id),
	// NOT_FOUND (none of p's has that id: someone else's alike).
	DeletePushSubscription(ctx context.Context, p Principal, id string) error

	// RemovePushSubscription deletes subscription id whatever its owner,
	// when it still has endpoint (the push service said it is gone: a
	// subscription that moved or was renewed since is kept); removed
	// reports whether a row went. Errors: INVALID_ARGUMENT.
	RemovePushSubscription(ctx context.Context, id, endpoint string) (removed bool, err error)

	// PushSettings lists p's levels that are not the default (PushAll), by
	// conversation id.
	PushSettings(ctx context.Context, p Principal) ([]PushSetting, error)

	// SetPushLevel sets p's level in conv. Check order: CheckConvID,
	// CheckPushLevel (INVALID_ARGUMENT) → p has an open period in conv
	// (NOT_MEMBER). Setting PushAll removes the row.
	SetPushLevel(ctx context.Context, p Principal, conv string, level PushLevel) (PushSetting, error)

	// PushTargets returns the subscriptions to push for each message of
	// msgs (at most MaxPushBatch), in the order of msgs and by id within a
	// message, each filtered in the query: the event is a message that is not
	// recalled; its recipients are the users with an open period in conv
	// that began at or before seq (so not former members), not its sender,
	// whose level in conv is PushAll, or PushMentions when the message
	// mentions them (a mentions row at seq); each subscription's device
	// has a token that is not of a replaced install (a device signed out
	// gets nothing) and a delivered cursor in conv below seq (a device
	// that has the message gets nothing). None for an unknown
	// conversation or seq. Errors: INVALID_ARGUMENT (CheckPushTargets:
	// any message, or the batch's size).
	PushTargets(ctx context.Context, msgs []PushMessage) ([]PushTarget, error)
}

// MaxPushBatch bounds the messages of one Push.PushTargets call.
const MaxPushBatch = 256

// PushMessage names one committed message to push.
type PushMessage struct {
	Conv string
	Seq  int64
}

// PushTarget is one subscription to push one message to.
type PushTarget struct {
	Msg PushMessage
	Sub PushSubscription
}

// PushLevel is which messages of a conversation a user is pushed.
type PushLevel string

// The levels.
const (
	PushAll      PushLevel = "all"      // every message (the default)
	PushMentions PushLevel = "mentions" // messages that mention the user
	PushNone     PushLevel = "none"     // nothing
)

// Bounds of the push state.
const (
	MaxPushEndpoint      = 2048 // bytes of an endpoint URL
	MaxPushSubscriptions = 10   // per device
	PushKeyID            = "vapid"
)

// PushKeyLabel is the label of the sealed VAPID key id.
func PushKeyLabel(id string) string { return "parley/push_keys.secret/" + id }

// NewPushKey returns a new VAPID private key: a P-256 scalar, 32 bytes.
func NewPushKey() []byte {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic("parley: crypto/rand failed: " + err.Error())
	}
	return k.Bytes()
}

// NewPushSubscription is a browser's PushSubscription as
// SavePushSubscription takes it: the endpoint, and the keys as the browser
// gives them (base64url, padded or not).
type NewPushSubscription struct {
	Endpoint string
	P256DH   string
	Auth     string
}

// PushSubscription is a stored subscription. P256DH and Auth are
// unpadded base64url of 65 and 16 bytes.
type PushSubscription struct {
	ID        string
	User      string
	Device    string
	Endpoint  string
	P256DH    string
	Auth      string
	CreatedAt time.Time
}

// PushSetting is a user's level in one conversation.
type PushSetting struct {
	Conv  string
	Level PushLevel
}

// CheckPushLevel validates a level.
func CheckPushLevel(l PushLevel) error {
	switch l {
	case PushAll, PushMentions, PushNone:
		return nil
	}
	return Errorf(CodeInvalidArgument, "level must be all, mentions or none")
}

// CheckPushSubscription validates a subscription and returns it with its
// keys in canonical form (unpadded base64url). The endpoint is an absolute
// http or https URL with a host and no user info or fragment, printable
// ASCII, at most MaxPushEndpoint bytes (whether http is allowed, and which
// addresses, is the server's policy, checked before the store is asked);
// p256dh is an uncompressed point on P-256 (65 bytes); auth is 16 bytes.
func CheckPushSubscription(s NewPushSubscription) (NewPushSubscription, error) {
	if err := checkPushEndpoint(s.Endpoint); err != nil {
		return s, err
	}
	dh, err := decodeKey(s.P256DH)
	if err != nil || len(dh) != 65 {
		return s, Errorf(CodeInvalidArgument, "keys.p256dh must be a base64url uncompressed P-256 public key (65 bytes)")
	}
	if _, err := ecdh.P256().NewPublicKey(dh); err != nil {
		return s, Errorf(CodeInvalidArgument, "keys.p256dh is not a point on P-256")
	}
	auth, err := decodeKey(s.Auth)
	if err != nil || len(auth) != 16 {
		return s, Errorf(CodeInvalidArgument, "keys.auth must be 16 bytes of base64url")
	}
	s.P256DH, s.Auth = base64.RawURLEncoding.EncodeToString(dh), base64.RawURLEncoding.EncodeToString(auth)
	return s, nil
}

func checkPushEndpoint(endpoint string) error {
	if endpoint == "" || len(endpoint) > MaxPushEndpoint {
		return Errorf(CodeInvalidArgument, "endpoint must be 1–%d bytes", MaxPushEndpoint)
	}
	for i := 0; i < len(endpoint); i++ {
		if c := endpoint[i]; c <= 0x20 || c >= 0x7f || c == '#' {
			return Errorf(CodeInvalidArgument, "endpoint must be a URL of printable ASCII without a fragment")
		}
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http"):
		return Errorf(CodeInvalidArgument, "endpoint must be an https URL")
	case u.Opaque != "" || u.Hostname() == "":
		return Errorf(CodeInvalidArgument, "endpoint must name a host")
	case u.User != nil:
		return Errorf(CodeInvalidArgument, "endpoint must not carry user info")
	}
	return nil
}

// decodeKey reads base64url, padded or not (browsers give it unpadded;
// some libraries pad).
func decodeKey(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// CheckPushID validates a subscription id (NewID text).
func CheckPushID(id string) error {
	if len(id) != 36 || strings.Trim(id, "0123456789abcdef-") != "" {
		return Errorf(CodeInvalidArgument, "a subscription id is a 36-character id")
	}
	return nil
}

// ErrNoPushSubscription answers a subscription id that is not the
// caller's, whether or not it exists.
var ErrNoPushSubscription = &Error{Code: CodeNotFound, Msg: "push subscription not found"}

// CheckPushTargets validates the arguments of Push.PushTargets.
func CheckPushTargets(msgs []PushMessage) error {
	if len(msgs) > MaxPushBatch {
		return Errorf(CodeInvalidArgument, "at most %d messages in one batch, not %d", MaxPushBatch, len(msgs))
	}
	for _, m := range msgs {
		if err := CheckConvID(m.Conv); err != nil {
			return err
		}
		if m.Seq < 1 {
			return Errorf(CodeInvalidArgument, "seq must be at least 1")
		}
	}
	return nil
}
