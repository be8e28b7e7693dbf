package app

import (
	"context"
	"errors"

	"github.com/parleychat/parley"
)

// Failure is what a client may learn of an error: a protocol code, a
// message, and for an internal error the id under which it was logged.
type Failure struct {
	Code      parley.Code
	Msg       string
	RequestID string
}

// Explain turns err into what a client sees, for every transport. An error
// with a protocol code keeps its code and message, except that every
// refusal reads "Access denied" (the refused learn nothing). A request
// whose caller went away (context canceled) is UNAVAILABLE with the generic
// message and no id: nobody is left to read it, and nothing went wrong
// inside. Anything else is internal: logged with op and requestID (a fresh
// id when ""), shown as UNAVAILABLE with the generic message and that id,
// so a client that obeys the error table retries and never drops a message
// that may not have been stored.
func (s *Service) Explain(err error, op, requestID string) Failure {
	var pe *parley.Error
	if errors.As(err, &pe) {
		msg := pe.Msg
		if pe.Code == parley.CodePermissionDenied {
			msg = parley.ErrAccessDenied.Msg
		}
		return Failure{Code: pe.Code, Msg: msg}
	}
	if errors.Is(err, context.Canceled) {
		return Failure{Code: parley.CodeUnavailable, Msg: parley.InternalMessage}
	}
	if requestID == "" {
		requestID = parley.NewID()
	}
	s.log.Error("internal error", "op", op, "request_id", requestID, "err", err)
	return Failure{Code: parley.CodeUnavailable, Msg: parley.InternalMessage, RequestID: requestID}
}
