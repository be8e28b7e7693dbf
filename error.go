package parley

import (
	"errors"
	"fmt"
)

// Code is a protocol error code (docs/protocol.md#error-codes). Client logic
// reads only the code; the message is for people.
type Code string

// The protocol error codes. Every code is either terminal (the request had no
// effect and repeating it cannot succeed) or retryable with the same request
// key. See Codes for the class of each.
const (
	CodeInvalidArgument     Code = "INVALID_ARGUMENT"
	CodeUnauthenticated     Code = "UNAUTHENTICATED"
	CodeNotMember           Code = "NOT_MEMBER"
	CodeIdempotencyMismatch Code = "IDEMPOTENCY_MISMATCH"
	CodeOriginalExpired     Code = "ORIGINAL_EXPIRED"
	CodeNotSender           Code = "NOT_SENDER"
	CodeAlreadyRecalled     Code = "ALREADY_RECALLED"
	CodeRecallWindowExpired Code = "RECALL_WINDOW_EXPIRED"
	CodeEditWindowExpired   Code = "EDIT_WINDOW_EXPIRED"
	CodeNotFound            Code = "NOT_FOUND"
	CodeCursorAhead         Code = "CURSOR_AHEAD"
	CodeEpochChanged        Code = "EPOCH_CHANGED"
	CodeStaleInstall        Code = "STALE_INSTALL"
	CodePermissionDenied    Code = "PERMISSION_DENIED"
	CodeAlreadyExists       Code = "ALREADY_EXISTS"
	CodeUnavailable         Code = "UNAVAILABLE"
	CodeRateLimited         Code = "RATE_LIMITED"
	CodeTooLarge            Code = "TOO_LARGE"
)

// CodeInfo is one row of the error table: whether a client may retry the
// request with the same key, and what a client does on receiving it
// (documented in docs/protocol.md#error-codes).
type CodeInfo struct {
	Code      Code
	Retryable bool
	Action    string
}

// Codes is the one table of protocol error codes: nothing else decides
// whether a code is terminal. Each code's HTTP status is the HTTP side's
// business, in one table of its own (wire.HTTPStatus).
var Codes = []CodeInfo{
	{CodeInvalidArgument, false, "fix the request; do not retry it"},
	{CodeUnauthenticated, false, "log in again"},
	{CodeNotMember, false, "remove the conversation locally or tell the user"},
	{CodeIdempotencyMismatch, false, "client bug: the key was reused for other content; confirm with the user before sending under a new key"},
	{CodeOriginalExpired, false, "mark as sent and expired; never resend under a new key"},
	{CodeNotSender, false, "tell the user only the sender can recall or edit"},
	{CodeAlreadyRecalled, false, "mark the message recalled locally"},
	{CodeRecallWindowExpired, false, "tell the user the recall window has passed"},
	{CodeEditWindowExpired, false, "tell the user the edit window has passed"},
	{CodeNotFound, false, "refresh local state"},
	{CodeCursorAhead, false, "drop the local cursor and rebuild from a trusted position"},
	{CodeEpochChanged, false, "rebuild the conversation's local state"},
	{CodeStaleInstall, false, "drop the old install's local state and log in again"},
	{CodePermissionDenied, false, "tell the user; do not retry"},
	{CodeAlreadyExists, false, "use the existing object or choose another id"},
	{CodeUnavailable, true, "keep the request; retry with the same key after backoff"},
	{CodeRateLimited, true, "keep the request; retry with the same key after retry_after_ms"},
	{CodeTooLarge, false, "tell the user the file is larger than allowed or their quota is used up"},
}

var codeIndex = func() map[Code]CodeInfo {
	m := make(map[Code]CodeInfo, len(Codes))
	for _, c := range Codes {
		m[c.Code] = c
	}
	return m
}()

// Info returns the table row of a code; unknown codes are reported as
// UNAVAILABLE, the safe reading of an outcome nobody can vouch for.
func (c Code) Info() CodeInfo {
	if info, ok := codeIndex[c]; ok {
		return info
	}
	return codeIndex[CodeUnavailable]
}

// IsTerminal reports whether a client must stop retrying a request that got
// this code: everything but UNAVAILABLE and RATE_LIMITED.
func (c Code) IsTerminal() bool { return !c.Info().Retryable }

// Error is the one error type that crosses package boundaries with a
// protocol code. Msg is safe to show to the client.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Msg) }

// Errorf returns an *Error with a formatted client-facing message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// InternalMessage is what a client sees for an error that has no protocol
// code: its outcome is unknown, so it is UNAVAILABLE and the client retries
// with the same key. The cause goes to the log only.
const InternalMessage = "internal error; retry with the same request key"

// ErrorCode returns the protocol code of err: the code of the first *Error
// in its chain, or UNAVAILABLE for anything else (an internal error whose
// outcome is unknown). A nil error has no code.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnavailable
}

// ErrorMessage returns the client-facing message of err: the message of its
// *Error, or InternalMessage for anything without a protocol code, so no
// driver text, SQL or path ever reaches a client.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return InternalMessage
}

// ErrNotMember is the single answer for "no such conversation" and "not a
// member" alike, so nobody can probe which conversations exist.
var ErrNotMember = &Error{Code: CodeNotMember, Msg: "conversation not found or not visible"}

// ErrStaleInstall answers a request from an install its device replaced.
var ErrStaleInstall = &Error{Code: CodeStaleInstall, Msg: "this install was replaced by a newer one on the device; drop its local state and log in again"}

// Errors that both stores answer with, defined once so their codes and
// messages agree.
var (
	ErrIdempotencyMismatch = &Error{Code: CodeIdempotencyMismatch, Msg: "this cmid was already used with other content; the original is unchanged"}
	ErrOriginalExpired     = &Error{Code: CodeOriginalExpired, Msg: "the original request was executed and its event has been purged by retention; do not resend under a new cmid"}
	ErrNoEvent             = &Error{Code: CodeNotFound, Msg: "no such event (purged or not yet written)"}
	ErrConvNotFound        = &Error{Code: CodeNotFound, Msg: "conversation not found"}
	ErrUserNotFound        = &Error{Code: CodeNotFound, Msg: "user not found"}
	ErrBadLogin            = &Error{Code: CodeUnauthenticated, Msg: "invalid login or password"}
	ErrBadToken            = &Error{Code: CodeUnauthenticated, Msg: "invalid or expired token"}
	ErrAccessDenied        = &Error{Code: CodePermissionDenied, Msg: "Access denied"}
)

// ErrCursorAhead answers a cursor above the caller's head.
func ErrCursorAhead(head int64) error {
	return Errorf(CodeCursorAhead, "cursor is above the conversation head %d; rebuild from a trusted position", head)
}

// ErrEpochChanged answers a sync that names an epoch the conversation left.
func ErrEpochChanged(epoch, yours int64) error {
	return Errorf(CodeEpochChanged, "the conversation was rolled back (epoch %d, yours %d); rebuild it", epoch, yours)
}
