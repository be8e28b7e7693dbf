package parley

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ConvKind is a conversation's kind.
type ConvKind string

const (
	KindDirect ConvKind = "direct" // exactly two members, no owner actions
	KindGroup  ConvKind = "group"
)

// Conversation is a conversation's header. Head is NextSeq-1; MinSeq is the
// lowest seq still stored (Head+1 when nothing is).
type Conversation struct {
	ID        string
	Kind      ConvKind
	Title     string
	Owner     string // empty for direct conversations
	Head      int64
	MinSeq    int64
	Epoch     int64
	Retention Retention
	CreatedAt time.Time
}

// NewConversation is the input of Store.CreateConversation. The creator is
// added to Members when missing and becomes the owner of a group.
type NewConversation struct {
	ID      string // empty: the store generates one
	Kind    ConvKind
	Title   string
	Members []string
}

// Retention is a conversation's retention policy. Zero values mean "keep":
// a conversation without a policy keeps everything.
type Retention struct {
	MaxAge   time.Duration // purge events older than this (0: no age limit)
	KeepLast int64         // keep only the last KeepLast seqs (0: no count limit)
}

// ConvSummary is one entry of Store.Convs, as the caller may see
// it. For a caller with no open membership period, Head is capped at the
// last seq the caller may see.
type ConvSummary struct {
	Conv         string
	Title        string
	Kind         ConvKind
	Head         int64
	MinSeq       int64
	Delivered    int64 // this device's delivered cursor
	Read         int64 // the user's read cursor
	Unread       int64 // visible messages by others after Read, not recalled; at most UnreadCap
	UnreadCapped bool  // Unread stopped counting at UnreadCap
	// MentionsUnread counts the visible messages and edits after Read that
	// mention the caller and are not recalled, at most UnreadCap.
	MentionsUnread int64
	Epoch          int64
	Member         bool   // the caller has an open membership period
	Last           *Event // the latest visible message event
}

// Period is one membership period: the member may see seq iff
// From <= seq and (To == 0 || seq <= To). To == 0 means open.
type Period struct {
	From int64
	To   int64
}

// Open reports whether the period has not ended.
func (p Period) Open() bool { return p.To == 0 }

// Contains reports whether seq falls inside the period.
func (p Period) Contains(seq int64) bool { return p.From <= seq && (p.To == 0 || seq <= p.To) }

// Periods are one user's membership periods in one conversation, disjoint
// and ordered by From. Stores read them and use these methods, so visibility
// has one definition.
type Periods []Period

// Open reports whether the last period is open: the user is a member now.
func (ps Periods) Open() bool { return len(ps) > 0 && ps[len(ps)-1].Open() }

// Visible reports whether seq falls inside one of the periods.
func (ps Periods) Visible(seq int64) bool {
	for _, p := range ps {
		if p.Contains(seq) {
			return true
		}
	}
	return false
}

// Head caps the conversation head at the last seq the user may see: head
// itself for a member, the end of the last period for a former member.
func (ps Periods) Head(head int64) int64 {
	if len(ps) == 0 {
		return 0
	}
	if last := ps[len(ps)-1]; !last.Open() && last.To < head {
		return last.To
	}
	return head
}

// Ranges returns the seq ranges [from, to] the user may see after `after`
// and up to head, in order. A sync walks them with one index range scan
// each, so invisible ranges cost nothing.
func (ps Periods) Ranges(after, head int64) [][2]int64 {
	var out [][2]int64
	for _, p := range ps {
		from, to := p.From, p.To
		if to == 0 || to > head {
			to = head
		}
		if from <= after {
			from = after + 1
		}
		if from <= to {
			out = append(out, [2]int64{from, to})
		}
	}
	return out
}

// ValidConvID reports whether id matches [A-Za-z0-9._:-]{1,64}.
func ValidConvID(id string) bool {
	if len(id) < 1 || len(id) > MaxConvIDChars {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckConvID returns INVALID_ARGUMENT for a malformed conversation id.
func CheckConvID(id string) error {
	if !ValidConvID(id) {
		return Errorf(CodeInvalidArgument, "conv must match [A-Za-z0-9._:-]{1,64}")
	}
	return nil
}

// ValidateNewConversation checks a NewConversation for creator and returns
// it normalised: an id generated when empty, the creator among the members,
// members deduplicated in order.
func ValidateNewConversation(creator string, c NewConversation) (NewConversation, error) {
	if c.ID == "" {
		c.ID = "c-" + NewID()
	}
	if err := CheckConvID(c.ID); err != nil {
		return c, err
	}
	if ReservedConvID(c.ID) {
		return c, Errorf(CodeInvalidArgument, "conversation ids starting with dm: or dmh: are reserved for direct messages (POST /api/dms)")
	}
	if c.Kind == "" {
		c.Kind = KindGroup
	}
	if c.Kind != KindGroup && c.Kind != KindDirect {
		return c, Errorf(CodeInvalidArgument, "kind must be direct or group")
	}
	if n := charCount(c.Title); n < 0 || n > MaxTitleChars {
		return c, Errorf(CodeInvalidArgument, "title must be valid UTF-8 without NUL, at most %d characters", MaxTitleChars)
	}
	seen := map[string]bool{creator: true}
	members := []string{creator}
	for _, m := range c.Members {
		if !ValidUserID(m) {
			return c, Errorf(CodeInvalidArgument, "member %q is not a valid user id", truncate(m, 40))
		}
		if !seen[m] {
			seen[m] = true
			members = append(members, m)
		}
	}
	if c.Kind == KindDirect && len(members) != 2 {
		return c, Errorf(CodeInvalidArgument, "a direct conversation has exactly two members")
	}
	if len(members) > 100000 {
		return c, Errorf(CodeInvalidArgument, "too many members")
	}
	c.Members = members
	return c, nil
}

// ValidateRetention rejects negative policies.
func ValidateRetention(r Retention) error {
	if r.MaxAge < 0 || r.KeepLast < 0 {
		return Errorf(CodeInvalidArgument, "retention values must not be negative")
	}
	if r.MaxAge > 0 && r.MaxAge < time.Millisecond {
		return Errorf(CodeInvalidArgument, "retention max age must be at least 1ms")
	}
	return nil
}

// CheckMemberArgs validates the arguments of AddMember and RemoveMember.
func CheckMemberArgs(conv, user string) error {
	if err := CheckConvID(conv); err != nil {
		return err
	}
	if !ValidUserID(user) {
		return Errorf(CodeInvalidArgument, "user must be a valid user id")
	}
	return nil
}

// CheckMemberChange is who may change a conversation's members, after the
// conversation row is locked: the caller must have an open period or be an
// admin (else NOT_MEMBER, as for a conversation that does not exist); a
// direct conversation's members never change (PERMISSION_DENIED); a
// removal is for the owner, an admin, or the leaver themself
// (PERMISSION_DENIED).
func CheckMemberChange(p Principal, kind ConvKind, owner string, callerIn, remove bool, user string) error {
	admin := p.Role == RoleAdmin
	switch {
	case !callerIn && !admin:
		return ErrNotMember
	case kind == KindDirect:
		return Errorf(CodePermissionDenied, "a direct conversation's members cannot change")
	case remove && p.User != owner && !admin && p.User != user:
		return ErrAccessDenied
	}
	return nil
}

// CheckRollback validates a rollback target against the conversation.
func CheckRollback(toSeq, minSeq, head int64) error {
	if toSeq > head || toSeq < minSeq-1 {
		return Errorf(CodeInvalidArgument, "to_seq must be between %d and %d", minSeq-1, head)
	}
	return nil
}

// RestoreMembership is the membership a rollback appends: given
// the members now and the members at the restore point, each in user id
// order, the users to write member_left for (in then, out now) and then
// member_joined for (in now, out then), so nobody regains or loses access
// by the rollback.
func RestoreMembership(now, then []string) (leave, join []string) {
	for _, u := range then {
		if !slices.Contains(now, u) {
			leave = append(leave, u)
		}
	}
	for _, u := range now {
		if !slices.Contains(then, u) {
			join = append(join, u)
		}
	}
	return leave, join
}

// Cut returns the last seq a purge deletes: the longest prefix of the log
// the policy no longer keeps. keepFrom is the first stored seq young enough
// to keep by MaxAge (the database clock decides), or 0 when none is; it is
// read only when MaxAge is set. A cut below minSeq deletes nothing.
func (r Retention) Cut(minSeq, head, keepFrom int64) int64 {
	cut := minSeq - 1
	if r.KeepLast > 0 {
		cut = max(cut, head-r.KeepLast)
	}
	if r.MaxAge > 0 {
		if keepFrom == 0 {
			cut = head
		} else {
			cut = max(cut, keepFrom-1)
		}
	}
	return min(cut, head)
}

// ConvsRequest is the input of Store.Convs. Limit must be at least 1 and is
// capped at MaxConvsPage (the wire layers put DefaultConvs in for an omitted
// one); Before is empty for the first page, else the Next of the previous
// page.
type ConvsRequest struct {
	Limit  int
	Before string
}

// ConvsPage is one page of Store.Convs. Next is set when HasMore is: the
// Before of the following page.
type ConvsPage struct {
	Convs   []ConvSummary
	Next    string
	HasMore bool
}

// ConvsCursor is the position of one entry in the convs order: its
// activity (in the store's own clock units: opaque to clients) and its
// conversation id. On the wire it is the opaque string String returns.
type ConvsCursor struct {
	Activity int64
	Conv     string
}

// String encodes the cursor for a client (base64url, no padding).
func (c ConvsCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.Activity, 10) + "." + c.Conv))
}

// maxCursorChars bounds an encoded cursor: a 19-digit activity, a dot and
// a conversation id, in base64.
const maxCursorChars = 128

// ValidateConvs checks a convs request and returns it with Limit capped at
// MaxConvsPage and its cursor decoded (nil for the first page).
func ValidateConvs(r ConvsRequest) (ConvsRequest, *ConvsCursor, error) {
	if r.Limit < 1 {
		return r, nil, Errorf(CodeInvalidArgument, "limit must be at least 1")
	}
	r.Limit = min(r.Limit, MaxConvsPage)
	if r.Before == "" {
		return r, nil, nil
	}
	bad := Errorf(CodeInvalidArgument, "before must be the next of an earlier convs reply")
	if len(r.Before) > maxCursorChars {
		return r, nil, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(r.Before)
	if err != nil {
		return r, nil, bad
	}
	at, conv, found := strings.Cut(string(raw), ".")
	if !found {
		return r, nil, bad
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil || n < 0 || CheckConvID(conv) != nil {
		return r, nil, bad
	}
	return r, &ConvsCursor{Activity: n, Conv: conv}, nil
}
