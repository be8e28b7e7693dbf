package parley

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"time"
	"unicode/utf8"
)

// Operations (docs/protocol.md#http-api-operations): the audit log of the
// operations API and the incoming webhooks; Admin.AdminHooks lists the
// webhooks. Both live in the Store so that every gateway and every restart
// sees the same hooks and the same log.
type Operations interface {
	// AppendAudit records one operations-API call. Params must already be
	// redacted and capped by the caller (httpapi.RedactParams); the store keeps
	// them as given. The store sets ID and At (database clock). Errors:
	// INVALID_ARGUMENT (empty operator or action, a field over its bound).
	AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)

	// FinishAudit sets the outcome of an entry appended with Outcome
	// AuditPending, once: the operations API writes its entry before it
	// acts and finishes it after, so a crash in between leaves a visible
	// pending entry instead of an operation nobody recorded. Errors:
	// INVALID_ARGUMENT (a bad outcome, or AuditPending), NOT_FOUND (no
	// pending entry with that id).
	FinishAudit(ctx context.Context, id int64, outcome string) error

	// Audit returns audit entries newest first: those with an ID below
	// q.Before when it is set, at most q.Limit (1..MaxAuditPage; 0 means
	// DefaultAuditPage). Errors: INVALID_ARGUMENT.
	Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)

	// CreateHook creates an incoming webhook that posts into conv as the
	// bot user: a new random id and secret (shown once to the operator;
	// the store keeps the secret, which the HMAC check needs). Check order:
	// INVALID_ARGUMENT → conv exists (NOT_FOUND) → bot exists and is not
	// disabled (NOT_FOUND) → bot has an open membership period in conv
	// (NOT_MEMBER: add the bot as a member first).
	CreateHook(ctx context.Context, h NewHook) (Hook, error)

	// Hook returns a webhook with its secret. Errors: INVALID_ARGUMENT
	// (malformed id), NOT_FOUND (unknown or deleted).
	Hook(ctx context.Context, id string) (Hook, error)

	// DeleteHook removes a webhook: its secret stops working at once.
	// Errors: INVALID_ARGUMENT, NOT_FOUND.
	DeleteHook(ctx context.Context, id string) error
}

// Bounds of the operations records.
const (
	MaxAuditAction   = 64   // bytes of AuditEntry.Action and Target
	MaxAuditParams   = 4096 // bytes of AuditEntry.Params (after redaction)
	MaxAuditPage     = 200
	AuditPending     = "pending" // the Outcome of an entry whose operation has not finished
	DefaultAuditPage = 50
	HookSecretBytes  = 32
)

// AuditEntry is one recorded operations-API call.
type AuditEntry struct {
	ID       int64     // increasing; set by the store
	At       time.Time // database clock; set by the store
	Operator string    // the authenticated caller's user id, never client input
	Action   string    // e.g. "user.disable", "conv.rollback"
	Target   string    // the object acted on (user id, conversation id, hook id)
	Params   string    // redacted, capped JSON of the request parameters
	Outcome  string    // "ok" or the protocol error code
}

// AuditQuery pages through the audit log.
type AuditQuery struct {
	Before int64 // 0: from the newest
	Limit  int
}

// NewHook is the input of Store.CreateHook.
type NewHook struct {
	Conv      string
	Bot       string // the user the hook posts as
	CreatedBy string // the operator
}

// Hook is an incoming webhook.
type Hook struct {
	ID        string // NewID text
	Conv      string
	Bot       string
	Secret    string // base64url, HookSecretBytes random bytes; blank in listings
	CreatedBy string
	CreatedAt time.Time
}

// Errors of the operations records, defined once so both stores answer
// alike.
var (
	ErrHookNotFound = &Error{Code: CodeNotFound, Msg: "webhook not found"}
	ErrBotNotFound  = &Error{Code: CodeNotFound, Msg: "bot user not found or disabled"}
	ErrBotNotMember = &Error{Code: CodeNotMember, Msg: "the bot user is not a member of the conversation; add it as a member first"}
)

// ValidateAuditEntry checks an entry for Operations.AppendAudit: operator
// and action are required; operator, action, target and outcome are at most
// MaxAuditAction bytes, params at most MaxAuditParams; all are valid UTF-8
// without NUL (which PostgreSQL text cannot hold), so both stores keep
// exactly the same entries.
func ValidateAuditEntry(e AuditEntry) error {
	for _, f := range []struct {
		name     string
		v        string
		required bool
		maxBytes int
	}{
		{"operator", e.Operator, true, MaxAuditAction},
		{"action", e.Action, true, MaxAuditAction},
		{"target", e.Target, false, MaxAuditAction},
		{"params", e.Params, false, MaxAuditParams},
		{"outcome", e.Outcome, false, MaxAuditAction},
	} {
		if err := checkText(f.name, f.v, f.required, f.maxBytes); err != nil {
			return err
		}
	}
	return nil
}

// CheckAuditOutcome checks the outcome FinishAudit sets.
func CheckAuditOutcome(id int64, outcome string) error {
	if id < 1 {
		return Errorf(CodeInvalidArgument, "audit id must be positive")
	}
	if outcome == AuditPending {
		return Errorf(CodeInvalidArgument, "an audit entry cannot be finished as %s", AuditPending)
	}
	return checkText("outcome", outcome, true, MaxAuditAction)
}

// CheckAuditQuery checks an AuditQuery and returns it with the default
// limit filled in.
func CheckAuditQuery(q AuditQuery) (AuditQuery, error) {
	if q.Before < 0 {
		return q, Errorf(CodeInvalidArgument, "before must not be negative")
	}
	if q.Limit == 0 {
		q.Limit = DefaultAuditPage
	}
	if q.Limit < 1 || q.Limit > MaxAuditPage {
		return q, Errorf(CodeInvalidArgument, "limit must be 1–%d", MaxAuditPage)
	}
	return q, nil
}

// ValidateNewHook checks the input of Operations.CreateHook: a valid
// conversation id, a valid bot user id, and an operator (CreatedBy) as
// AppendAudit takes one.
func ValidateNewHook(h NewHook) error {
	if err := CheckConvID(h.Conv); err != nil {
		return err
	}
	if !ValidUserID(h.Bot) {
		return Errorf(CodeInvalidArgument, "bot %q is not a valid user id", truncate(h.Bot, 40))
	}
	return checkText("created_by", h.CreatedBy, true, MaxAuditAction)
}

// MaxHookIDChars bounds a webhook id: NewID text is 36 characters.
const MaxHookIDChars = 64

// ValidHookID reports whether id could name a webhook: 1–64 characters of
// [0-9a-f-] (NewID text is lower-case hex and dashes).
func ValidHookID(id string) bool {
	if len(id) < 1 || len(id) > MaxHookIDChars {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// CheckHookID returns INVALID_ARGUMENT for a malformed webhook id.
func CheckHookID(id string) error {
	if !ValidHookID(id) {
		return Errorf(CodeInvalidArgument, "hook id must be 1–%d characters of [0-9a-f-]", MaxHookIDChars)
	}
	return nil
}

// NewHookSecret returns a fresh webhook secret: HookSecretBytes random
// bytes, base64url without padding.
func NewHookSecret() string {
	b := make([]byte, HookSecretBytes)
	if _, err := rand.Read(b); err != nil {
		panic("parley: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// checkText checks one text field: valid UTF-8 without NUL, at most maxBytes
// bytes, and not empty when required.
func checkText(field, v string, required bool, maxBytes int) error {
	if required && v == "" {
		return Errorf(CodeInvalidArgument, "%s is required", field)
	}
	if len(v) > maxBytes || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
		return Errorf(CodeInvalidArgument, "%s must be at most %d bytes of valid UTF-8 without NUL", field, maxBytes)
	}
	return nil
}
