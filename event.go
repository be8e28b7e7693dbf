package parley

import (
	"bytes"
	"crypto/sha256"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// EventKind is the kind of an event in a conversation's log.
type EventKind string

const (
	EventMessage      EventKind = "message"
	EventRecall       EventKind = "recall"
	EventMemberJoined EventKind = "member_joined"
	EventMemberLeft   EventKind = "member_left"
	EventEdit         EventKind = "edit"     // a new version of a message's text
	EventReaction     EventKind = "reaction" // a reaction set or removed
)

// Event is one entry of a conversation's log, immutable once committed
// (a recall appends a recall event; the recalled message is then served
// with an empty body and Recalled set).
type Event struct {
	Conv     string
	Seq      int64
	MID      string // server id
	Kind     EventKind
	Sender   string    // user who did it; empty for the system (rollback)
	Device   string    // sender's device; empty for membership and system events
	Body     string    // message and edit text; empty when recalled and for other kinds
	Target   int64     // recall, edit, reaction: the seq of the message it concerns
	User     string    // membership events: whom it concerns
	Recalled bool      // message: a recall of it has been committed; edit: of its target
	At       time.Time // database clock, UTC, millisecond precision

	ReplyTo     int64        // message: the thread root it replies to (0: none)
	Mentions    []string     // message: the members it mentions; edit: those it newly mentions
	Attachments []Attachment // message: the files it carries, as they were when it was sent
	Emoji       string       // reaction: the emoji
	On          bool         // reaction: set (true) or removed (false)

	// Derived is a message's state as read (Sync, Fetch, Convs' Last,
	// exports): nil for other kinds and for events read without it (the
	// gateways' Feed: a client folds the events that follow).
	Derived *Derived
}

// SendRequest is the input of Store.Send.
type SendRequest struct {
	Conv string
	CMID string // the client's request key, 1–64 characters
	Body string // 1–4000 code points of valid UTF-8

	// ReplyTo names the message this one replies to (0: none): a message
	// of the conversation the sender may see (else NOT_FOUND). A reply to
	// a reply joins its thread: the event's ReplyTo is the thread's root.
	ReplyTo int64

	// Attachments names the files the message carries (at most
	// MaxAttachments, each once): ready files of the sender's own (else
	// NOT_FOUND, ErrNotAttachable). With attachments the body may be
	// empty. They are part of the fingerprint: the same key with another
	// list is IDEMPOTENCY_MISMATCH.
	Attachments []string

	// AllMax is the policy for @all (the policy file's mention_all_max):
	// it mentions every other member only in a conversation of at most
	// AllMax members with open periods; 0 leaves @all as plain text. It
	// is policy, not content: it is not part of the fingerprint.
	AllMax int
}

// Sent is the reply to a send: the event's seq and mid, whether this was a
// replay of an earlier request (Dup), and the conversation's epoch. At is
// the event's commit time as Event.At reads it back, when the store
// reports it (zero otherwise, and on a Dup): with it the gateway's notice
// carries the whole event (SentNotice).
type Sent struct {
	Conv  string
	Seq   int64
	MID   string
	Dup   bool
	Epoch int64
	At    time.Time
}

// SyncRequest is the input of Store.Sync. Limit must be at least 1 and is
// capped at MaxPage (the wire layers put DefaultPage in for an omitted
// limit); Epoch 0 means "not given" (epochs start at 1).
type SyncRequest struct {
	Conv  string
	After int64
	Limit int
	Epoch int64

	// Thread, when not 0, reads one thread: the root message of that seq
	// and the replies to it, nothing else (a root the caller cannot see,
	// or that is no message: NOT_FOUND).
	Thread int64
}

// Page is one page of a sync (docs/design.md#syncing).
type Page struct {
	Conv      string
	Events    []Event
	NextAfter int64 // the cursor to store after applying the whole page
	HasMore   bool
	Head      int64 // capped at the caller's last visible seq
	MinSeq    int64
	Trimmed   bool // events after After were purged
	Epoch     int64
}

// RecallRequest is the input of Store.Recall.
type RecallRequest struct {
	Conv   string
	Target int64
	CMID   string
}

// Recalled is the reply to a recall: the seq of the recall event.
type Recalled struct {
	Conv string
	Seq  int64
	Dup  bool
}

// SendFingerprint is a send's request hash: Fingerprint for a message
// that replies to nothing and attaches nothing; for a reply
// sha256(conv || 0x00 || "reply:" || reply_to || 0x00 || body); with
// attachments sha256(conv || 0x00 || "files:" || ids joined by "," || 0x00
// || "reply:" || reply_to || 0x00 || body). A body holds no NUL, so no two
// forms meet.
func SendFingerprint(r SendRequest) []byte {
	if r.ReplyTo == 0 && len(r.Attachments) == 0 {
		return Fingerprint(r.Conv, r.Body)
	}
	if len(r.Attachments) == 0 {
		return Fingerprint(r.Conv, "reply:"+strconv.FormatInt(r.ReplyTo, 10)+"\x00"+r.Body)
	}
	return Fingerprint(r.Conv, "files:"+strings.Join(r.Attachments, ",")+"\x00reply:"+strconv.FormatInt(r.ReplyTo, 10)+"\x00"+r.Body)
}

// EditFingerprint is an edit's request hash:
// sha256(conv || 0x00 || "edit:" || target || 0x00 || body).
func EditFingerprint(conv string, target int64, body string) []byte {
	return Fingerprint(conv, "edit:"+strconv.FormatInt(target, 10)+"\x00"+body)
}

// ReactFingerprint is a reaction's request hash:
// sha256(conv || 0x00 || "react:" || target || 0x00 || emoji || 0x00 || "1"|"0").
func ReactFingerprint(conv string, target int64, emoji string, on bool) []byte {
	state := "0"
	if on {
		state = "1"
	}
	return Fingerprint(conv, "react:"+strconv.FormatInt(target, 10)+"\x00"+emoji+"\x00"+state)
}

// Fingerprint is a send's request hash: sha256(conv || 0x00 || body).
func Fingerprint(conv, body string) []byte {
	// One buffer on the stack for an ordinary message and one Sum256: a
	// hash.Hash, fed through its interface, costs an allocation for the
	// digest and one for each conversion to []byte.
	var buf [512]byte
	b := append(append(append(buf[:0], conv...), 0), body...)
	sum := sha256.Sum256(b)
	return sum[:]
}

// RecallFingerprint is a recall's request hash:
// sha256(conv || 0x00 || "recall:" || target).
func RecallFingerprint(conv string, target int64) []byte {
	return Fingerprint(conv, "recall:"+strconv.FormatInt(target, 10))
}

// charCount returns the number of code points of s, or -1 when s is not
// valid UTF-8 or holds U+0000. NUL is refused everywhere, up front: a
// PostgreSQL text column cannot store it, and both stores must answer alike.
func charCount(s string) int {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return -1
	}
	return utf8.RuneCountInString(s)
}

// CheckCMID validates a request key: 1–64 characters of valid UTF-8.
func CheckCMID(cmid string) error {
	if n := charCount(cmid); n < 1 || n > MaxCMIDChars {
		return Errorf(CodeInvalidArgument, "cmid must be 1–%d characters of valid UTF-8 without NUL", MaxCMIDChars)
	}
	return nil
}

// ValidateSend checks a send before any storage work.
func ValidateSend(r SendRequest) error {
	if err := CheckConvID(r.Conv); err != nil {
		return err
	}
	if err := CheckCMID(r.CMID); err != nil {
		return err
	}
	if err := CheckAttachments(r.Attachments); err != nil {
		return err
	}
	if len(r.Attachments) == 0 || r.Body != "" {
		if err := checkBody(r.Body); err != nil {
			return err
		}
	}
	if r.ReplyTo < 0 {
		return Errorf(CodeInvalidArgument, "reply_to must be a seq of at least 1")
	}
	if r.AllMax < 0 {
		return Errorf(CodeInvalidArgument, "the @all limit must not be negative")
	}
	return nil
}

func checkBody(body string) error {
	if n := charCount(body); n < 1 || n > MaxBodyChars {
		return Errorf(CodeInvalidArgument, "body must be 1–%d characters of valid UTF-8 without NUL", MaxBodyChars)
	}
	return nil
}

// ValidateSync checks a sync and returns it with Limit capped at MaxPage.
func ValidateSync(r SyncRequest) (SyncRequest, error) {
	if err := CheckConvID(r.Conv); err != nil {
		return r, err
	}
	if r.After < 0 {
		return r, Errorf(CodeInvalidArgument, "after must not be negative")
	}
	if r.Limit < 1 {
		return r, Errorf(CodeInvalidArgument, "limit must be at least 1")
	}
	if r.Limit > MaxPage {
		r.Limit = MaxPage
	}
	if r.Epoch < 0 {
		return r, Errorf(CodeInvalidArgument, "epoch must not be negative")
	}
	if r.Thread < 0 {
		return r, Errorf(CodeInvalidArgument, "thread must be a seq of at least 1")
	}
	return r, nil
}

// ValidateRecall checks a recall before any storage work.
func ValidateRecall(r RecallRequest) error {
	if err := CheckConvID(r.Conv); err != nil {
		return err
	}
	if r.Target < 1 {
		return Errorf(CodeInvalidArgument, "target must be a seq of at least 1")
	}
	return CheckCMID(r.CMID)
}

// CheckSeq validates a seq argument (ack, read, fetch, rollback).
func CheckSeq(field string, seq int64) error {
	if seq < 0 {
		return Errorf(CodeInvalidArgument, "%s must not be negative", field)
	}
	return nil
}

// CheckReplay decides a request whose key (conv, sender, cmid) is already
// stored: nil means a replay, to be answered with the stored seq and Dup.
// The same key with another fingerprint, or for another kind of request,
// is IDEMPOTENCY_MISMATCH: a message whose body reads "recall:N" has the
// fingerprint of a recall of N but is not one.
func CheckReplay(storedKind EventKind, storedHash []byte, kind EventKind, hash []byte) error {
	if storedKind != kind || !bytes.Equal(storedHash, hash) {
		return ErrIdempotencyMismatch
	}
	return nil
}

// RecallTarget is what a store read, inside the locked transaction, about
// the event a recall names.
type RecallTarget struct {
	Found    bool      // a stored event has that seq
	Kind     EventKind // its kind
	Sender   string    // its sender
	Recalled bool      // a recall of it is committed
	Expired  bool      // the database clock is past its time plus the window
}

// Check applies the target checks of a recall in the contract's order:
// a stored message (NOT_FOUND) → of the caller (NOT_SENDER) → not yet
// recalled (ALREADY_RECALLED) → within the window (RECALL_WINDOW_EXPIRED).
func (t RecallTarget) Check(caller string, target int64, window time.Duration) error {
	switch {
	case !t.Found || t.Kind != EventMessage:
		return Errorf(CodeNotFound, "no message %d in this conversation", target)
	case t.Sender != caller:
		return Errorf(CodeNotSender, "only the sender can recall a message")
	case t.Recalled:
		return Errorf(CodeAlreadyRecalled, "message %d is already recalled", target)
	case t.Expired:
		return Errorf(CodeRecallWindowExpired, "the recall window of %s has passed", window)
	}
	return nil
}

// CheckFetchSeq validates a fetch's seq.
func CheckFetchSeq(seq int64) error {
	if seq < 1 {
		return Errorf(CodeInvalidArgument, "seq must be at least 1")
	}
	return nil
}

// SendOutcome names how a send ended, as the metrics count it: "new", "dup"
// (a replay answered with the stored message), or the code the client was
// told (ErrorCode: UNAVAILABLE for an internal error).
func SendOutcome(s Sent, err error) string {
	switch {
	case err != nil:
		return string(ErrorCode(err))
	case s.Dup:
		return "dup"
	}
	return "new"
}
