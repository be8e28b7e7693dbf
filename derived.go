package parley

import (
	"cmp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Derived state: an edit's text, a reaction count, a thread's reply count,
// a mention. Every piece of it is caused by an event of the log, and two
// rules keep it from ever showing what a reader may not see:
//
//  1. A derived row is written in the transaction of the event that causes
//     it (the reactions row of a reaction, the mentions rows of a message
//     or an edit), or is computed from the events at read time.
//  2. Every read of derived state is filtered, inside the query, by the
//     seq of the event that caused it against the reader's membership
//     periods, before any count: a former member reads a message as it
//     was at their last visible seq, with the reactions as they stood then.
//
// So sync, fetch, exports, retention, rollback and the former-member cap
// apply to derived state as they apply to the events themselves.

// EditRequest is the input of Store.Edit.
type EditRequest struct {
	Conv   string
	Target int64  // the message to edit
	CMID   string // the request key
	Body   string // the new text: 1–4000 code points, as a message's

	// Window is the edit window in force (the policy file's edit_window):
	// a message older than Window by the database clock cannot be edited
	// (EDIT_WINDOW_EXPIRED). 0: no window.
	Window time.Duration

	// AllMax is the policy for @all, as SendRequest.AllMax.
	AllMax int
}

// Edited is the reply to an edit: the seq of the edit event.
type Edited struct {
	Conv string
	Seq  int64
	Dup  bool
}

// ReactRequest is the input of Store.React.
type ReactRequest struct {
	Conv   string
	Target int64  // the message reacted to
	Emoji  string // CheckEmoji
	On     bool   // set (true) or remove (false)
	CMID   string // the request key
}

// Reacted is the reply to a reaction: the seq of the reaction event that
// set the state asked for. Dup is true for a replay of the same request key
// and when the state already held (then Seq is the event that set it, 0
// when no reaction ever did: a removal of a reaction never made).
type Reacted struct {
	Conv string
	Seq  int64
	Dup  bool
}

// Version is one version of a message's text (Store.Versions): the
// original (Seq the message's) or an edit (Seq the edit event's).
type Version struct {
	Seq  int64
	Body string
	At   time.Time
}

// Derived is a message's derived state as one caller reads it: computed
// over the events visible to that caller with seq at most AsOf. A client
// folds an edit, reaction or reply event into a message only when the
// event's seq is above the message's AsOf (the events at or below it are
// already in; a pushed message, read without Derived, counts as AsOf its
// own seq).
type Derived struct {
	AsOf         int64      // the highest seq folded in: the read's capped head
	EditSeq      int64      // the seq of the edit whose text Body shows (0: the original)
	EditedAt     time.Time  // that edit's time
	Reactions    []Reaction // each emoji once, ordered by its oldest reaction still standing
	Replies      int64      // replies visible, not recalled
	LastReplySeq int64      // the latest of them
}

// Reaction is one emoji's count on a message as read.
type Reaction struct {
	Emoji string
	Count int64
	Me    bool // the caller's own reaction is among them
}

// DerivedRow is what a store reads for Decorate: one event visible to the
// caller, with seq at most the read's AsOf, whose Target (edits and
// reactions) or ReplyTo (replies) is a message of the page: Kind, Seq,
// Sender, and per kind Body and At (edit), Emoji and On (reaction),
// Recalled (a reply, or an edit of a recalled target).
type DerivedRow = Event

// Decorate sets Derived on every message of evs from rows (DerivedRows read
// for those messages, in any order) as caller reads them with head asOf:
// the newest edit's text (none on a recalled message), the reactions whose
// latest visible state per (user, emoji) is on, and the replies that are
// not recalled. Other events are left as they are.
func Decorate(evs []Event, rows []DerivedRow, caller string, asOf int64) {
	slices.SortFunc(rows, func(a, b DerivedRow) int { return cmp.Compare(a.Seq, b.Seq) })
	idx := make(map[int64]int, len(evs))
	for i := range evs {
		if evs[i].Kind == EventMessage {
			evs[i].Derived = &Derived{AsOf: asOf}
			idx[evs[i].Seq] = i
		}
	}
	type reactKey struct {
		target int64
		user   string
		emoji  string
	}
	state := map[reactKey]int64{} // the seq of the latest on state; 0 once off
	var order []reactKey
	for _, r := range rows {
		switch {
		case r.Kind == EventEdit:
			if i, ok := idx[r.Target]; ok && !evs[i].Recalled && !r.Recalled {
				evs[i].Body = r.Body
				evs[i].Derived.EditSeq, evs[i].Derived.EditedAt = r.Seq, r.At
			}
		case r.Kind == EventReaction:
			k := reactKey{r.Target, r.Sender, r.Emoji}
			if _, seen := state[k]; !seen {
				order = append(order, k)
			}
			state[k] = 0
			if r.On {
				state[k] = r.Seq
			}
		case r.Kind == EventMessage && r.ReplyTo != 0 && !r.Recalled:
			if i, ok := idx[r.ReplyTo]; ok {
				d := evs[i].Derived
				d.Replies++
				d.LastReplySeq = max(d.LastReplySeq, r.Seq)
			}
		}
	}
	// Emoji in the order of their oldest reaction still standing (a
	// reaction removed and set again counts from its new seq).
	slices.SortStableFunc(order, func(a, b reactKey) int { return cmp.Compare(state[a], state[b]) })
	for _, k := range order {
		i, ok := idx[k.target]
		if !ok || state[k] == 0 || evs[i].Recalled {
			continue
		}
		d := evs[i].Derived
		j := slices.IndexFunc(d.Reactions, func(r Reaction) bool { return r.Emoji == k.emoji })
		if j < 0 {
			d.Reactions = append(d.Reactions, Reaction{Emoji: k.emoji})
			j = len(d.Reactions) - 1
		}
		d.Reactions[j].Count++
		d.Reactions[j].Me = d.Reactions[j].Me || k.user == caller
	}
}

// MessageSeqs returns the seqs of the message events of evs: the targets a
// store reads DerivedRows for.
func MessageSeqs(evs []Event) []int64 {
	var seqs []int64
	for _, ev := range evs {
		if ev.Kind == EventMessage {
			seqs = append(seqs, ev.Seq)
		}
	}
	return seqs
}

// MaxEmojiChars bounds a reaction's emoji.
const MaxEmojiChars = 64

// CheckEmoji validates a reaction's emoji: 1–64 characters of valid UTF-8
// with no whitespace and no control characters (a Unicode emoji sequence,
// or a :shortcode:).
func CheckEmoji(emoji string) error {
	n := charCount(emoji)
	bad := n < 1 || n > MaxEmojiChars
	for _, r := range emoji {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			bad = true
		}
	}
	if bad {
		return Errorf(CodeInvalidArgument, "emoji must be 1–%d characters of valid UTF-8 without whitespace or control characters", MaxEmojiChars)
	}
	return nil
}

// ValidateEdit checks an edit before any storage work.
func ValidateEdit(r EditRequest) error {
	if err := CheckConvID(r.Conv); err != nil {
		return err
	}
	if r.Target < 1 {
		return Errorf(CodeInvalidArgument, "target must be a seq of at least 1")
	}
	if err := CheckCMID(r.CMID); err != nil {
		return err
	}
	if r.Window < 0 || r.AllMax < 0 {
		return Errorf(CodeInvalidArgument, "the edit window and the @all limit must not be negative")
	}
	return checkBody(r.Body)
}

// ValidateReact checks a reaction before any storage work.
func ValidateReact(r ReactRequest) error {
	if err := CheckConvID(r.Conv); err != nil {
		return err
	}
	if r.Target < 1 {
		return Errorf(CodeInvalidArgument, "target must be a seq of at least 1")
	}
	if err := CheckCMID(r.CMID); err != nil {
		return err
	}
	return CheckEmoji(r.Emoji)
}

// EditTarget is what a store read, inside the locked transaction, about the
// message an edit names.
type EditTarget struct {
	Found    bool      // a stored event has that seq
	Visible  bool      // inside the caller's membership periods
	Kind     EventKind // its kind
	Sender   string    // its sender
	Recalled bool      // a recall of it is committed
	Expired  bool      // the database clock is past its time plus the window (false without one)
}

// Check applies the target checks of an edit in the contract's order: a
// stored message the caller may see (NOT_FOUND) → of the caller
// (NOT_SENDER) → not recalled (ALREADY_RECALLED) → within the edit window
// (EDIT_WINDOW_EXPIRED).
func (t EditTarget) Check(caller string, target int64) error {
	switch {
	case !t.Found || !t.Visible || t.Kind != EventMessage:
		return Errorf(CodeNotFound, "no message %d in this conversation", target)
	case t.Sender != caller:
		return Errorf(CodeNotSender, "only the sender can edit a message")
	case t.Recalled:
		return Errorf(CodeAlreadyRecalled, "message %d is recalled", target)
	case t.Expired:
		return Errorf(CodeEditWindowExpired, "the edit window has passed")
	}
	return nil
}

// MessageTarget is what a store read about the message a reaction or a
// reply names; Check refuses what is no message the caller may see.
type MessageTarget struct {
	Found    bool
	Visible  bool
	Kind     EventKind
	Recalled bool
	ReplyTo  int64 // the message's own thread root (0: it is none)
}

// Check applies the checks of a reaction's or a reply's target: a stored
// message the caller may see (NOT_FOUND) → not recalled (ALREADY_RECALLED).
func (t MessageTarget) Check(target int64) error {
	switch {
	case !t.Found || !t.Visible || t.Kind != EventMessage:
		return Errorf(CodeNotFound, "no message %d in this conversation", target)
	case t.Recalled:
		return Errorf(CodeAlreadyRecalled, "message %d is recalled", target)
	}
	return nil
}

// Root returns the thread root a reply to seq joins: seq itself, or the
// root of the thread seq is a reply in.
func (t MessageTarget) Root(seq int64) int64 {
	if t.ReplyTo != 0 {
		return t.ReplyTo
	}
	return seq
}

// MentionAll is the token that mentions every member (within AllMax).
const MentionAll = "all"

// ParseMentions returns the user ids a text's @tokens name, deduplicated
// in order of appearance, and whether it holds @all. A token is '@' at the
// start of the text or after a character that is no letter, digit or one
// of "._-@", followed by a user id (lower-cased; a trailing '.', '_' or
// '-' is punctuation, not part of it). Ids nobody has are returned too:
// the store keeps only members with an open period.
func ParseMentions(text string) (users []string, all bool) {
	for i := 0; i < len(text); i++ {
		if text[i] != '@' {
			continue
		}
		if i > 0 {
			prev, _ := utf8.DecodeLastRuneInString(text[:i])
			if unicode.IsLetter(prev) || unicode.IsDigit(prev) || strings.ContainsRune("._-@", prev) {
				continue
			}
		}
		j := i + 1
		for j < len(text) && j-i-1 < 64 && isIDByte(text[j]) {
			j++
		}
		id := strings.TrimRight(strings.ToLower(text[i+1:j]), "._-")
		switch {
		case id == MentionAll:
			all = true
		case ValidUserID(id) && !slices.Contains(users, id):
			users = append(users, id)
		}
		i = j - 1
	}
	return users, all
}

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Mentioned resolves a text's mentions against the members with an open
// period (open, sorted) for sender: the named members, or with @all every
// member when there are at most allMax of them; never the sender, never
// one in already (the users an earlier version of an edited message
// mentioned). Sorted by id; nil for none.
func Mentioned(text, sender string, open []string, allMax int, already []string) []string {
	users, all := ParseMentions(text)
	var out []string
	for _, m := range open {
		named := slices.Contains(users, m) || (all && allMax > 0 && len(open) <= allMax)
		if named && m != sender && !slices.Contains(already, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// HasMentionToken reports whether text may mention anyone: a store skips
// reading the members for a text without '@'.
func HasMentionToken(text string) bool { return strings.IndexByte(text, '@') >= 0 }

// DirectID returns the id of the one direct conversation of two users
// (Store.OpenDirect): "dm:" and the two ids in byte order, or, when that is
// longer than a conversation id may be, "dmh:" and 40 hex digits of the
// sha256 of the pair. User ids hold no ':', so the pair is unambiguous;
// CreateConversation refuses both prefixes, so nobody takes a pair's id.
func DirectID(a, b string) string {
	if b < a {
		a, b = b, a
	}
	id := "dm:" + a + ":" + b
	if len(id) <= MaxConvIDChars {
		return id
	}
	sum := Fingerprint(a, b)
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 44)
	out = append(out, "dmh:"...)
	for _, c := range sum[:20] {
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// CheckDirectPeer validates the other user of OpenDirect.
func CheckDirectPeer(caller, user string) error {
	if !ValidUserID(user) {
		return Errorf(CodeInvalidArgument, "user %q is not a valid user id", truncate(user, 40))
	}
	if user == caller {
		return Errorf(CodeInvalidArgument, "a direct conversation is with another user")
	}
	return nil
}

// ReservedConvID reports whether id is of the form only OpenDirect makes.
func ReservedConvID(id string) bool {
	return strings.HasPrefix(id, "dm:") || strings.HasPrefix(id, "dmh:")
}

// DirectoryQuery pages the user directory (Store.Directory).
type DirectoryQuery struct {
	Prefix string // matches an id or an email prefix, case-insensitively; empty: everyone
	After  string // a previous page's Next; empty: the first page
	Limit  int    // 1..MaxAdminPage

	// Shared limits the directory to users who share a conversation with
	// the caller (an open period each); the policy file's directory.
	Shared bool

	// ID, when set, limits the listing to the user with exactly this id
	// (GET /api/users/{id}): a page of one entry, or none when that user
	// is unknown, disabled, or outside the policy.
	ID string
}

// DirectoryEntry is one user as the directory shows them: the id and the
// display name (an email matches a prefix but is never shown).
type DirectoryEntry struct {
	ID          string
	DisplayName string // "" when none is set
}

// MaxPrefixChars bounds a directory prefix.
const MaxPrefixChars = 64

// CheckDirectoryQuery checks a DirectoryQuery and returns the lower-cased
// prefix and the id its cursor names ("" for the first page).
func CheckDirectoryQuery(q DirectoryQuery) (prefix, after string, err error) {
	if n := charCount(q.Prefix); n < 0 || n > MaxPrefixChars {
		return "", "", Errorf(CodeInvalidArgument, "q must be at most %d characters of valid UTF-8", MaxPrefixChars)
	}
	if q.ID != "" && !ValidUserID(q.ID) {
		return "", "", Errorf(CodeInvalidArgument, "user id %q is not valid", truncate(q.ID, 80))
	}
	after, err = CheckAdminQuery(AdminQuery{After: q.After, Limit: q.Limit})
	return strings.ToLower(strings.TrimSpace(q.Prefix)), after, err
}

// JoinMentions is how the stores keep Event.Mentions in one text column:
// the ids joined by single spaces ("" for none).
func JoinMentions(users []string) string { return strings.Join(users, " ") }

// SplitMentions reads what JoinMentions wrote; nil for none.
func SplitMentions(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, " ")
}
