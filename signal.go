package parley

import (
	"fmt"
	"time"
)

// Live signals: typing and presence. Neither is an event of any
// conversation's log. A typing signal is never stored: it travels from the
// typist's gateway to the others over the Bus and is pushed to the sockets
// of the conversation's members. Presence is kept as leases in the store
// (Store.PutPresence): each gateway holds one per user it has sockets of,
// renewed while a socket is open, so the users of a gateway that died read
// offline once its leases expire (Store.SweepPresence).
const (
	// TypingEvery is the least time between two typing signals of one
	// user in one conversation: a gateway drops, silently, those that come
	// sooner.
	TypingEvery = 3 * time.Second
	// TypingFor is how long a typing signal lasts: a push says "until
	// now+TypingFor", and clients hide the line then (or when the typist's
	// message arrives).
	TypingFor = 5 * time.Second
	// MaxTypingMembers: in a conversation with more members, typing is
	// accepted and pushed to nobody.
	MaxTypingMembers = 100
	// MaxPresenceUsers bounds the users of one presence read.
	MaxPresenceUsers = 100
	// DefaultPresenceTTL is how long a presence lease lasts unless its
	// gateway renews it: the longest a crashed gateway's users still read
	// online.
	DefaultPresenceTTL = 30 * time.Second
)

// PresenceState is what a user's presence is.
type PresenceState string

// The presence states. A user is online when any of their sockets (on any
// gateway) is online, away when all of them are away, offline when they
// have none (no unexpired lease).
const (
	PresenceOnline  PresenceState = "online"
	PresenceAway    PresenceState = "away"
	PresenceOffline PresenceState = "offline"
)

// Valid reports whether s is one of the three states.
func (s PresenceState) Valid() bool {
	return s == PresenceOnline || s == PresenceAway || s == PresenceOffline
}

// CheckSocketState checks a state a client reports for one socket:
// online or away (offline is what a closed socket is).
func CheckSocketState(s string) error {
	if s != string(PresenceOnline) && s != string(PresenceAway) {
		return Errorf(CodeInvalidArgument, "state must be online or away")
	}
	return nil
}

// Presence is one user's presence. LastSeen is when the user was last
// known to be connected (the database clock, whole milliseconds); zero
// for a user never seen.
type Presence struct {
	User     string
	State    PresenceState
	LastSeen time.Time
}

// PresenceLease is what one gateway holds of one user: State online when
// one of the user's sockets there is online, away when all are; offline
// gives the lease up (the user's last socket there closed).
type PresenceLease struct {
	User  string
	State PresenceState
}

// CheckPresenceUsers checks the users of a presence read: 1 to
// MaxPresenceUsers valid ids (repeats allowed).
func CheckPresenceUsers(users []string) error {
	if len(users) == 0 || len(users) > MaxPresenceUsers {
		return Errorf(CodeInvalidArgument, "users must list 1 to %d user ids", MaxPresenceUsers)
	}
	for _, u := range users {
		if !ValidUserID(u) {
			return Errorf(CodeInvalidArgument, "users: %q is not a user id", u)
		}
	}
	return nil
}

// CheckGatewayID checks a gateway's lease holder id: 1 to 64 bytes of
// [A-Za-z0-9_-].
func CheckGatewayID(id string) error {
	ok := len(id) >= 1 && len(id) <= 64
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return Errorf(CodeInvalidArgument, "gateway id %q must be 1 to 64 of [A-Za-z0-9_-]", id)
	}
	return nil
}

// CheckLeases checks the leases of one PutPresence call.
func CheckLeases(gateway string, leases []PresenceLease, ttl time.Duration) error {
	if err := CheckGatewayID(gateway); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return Errorf(CodeInvalidArgument, "lease ttl must be at least 1ms")
	}
	seen := make(map[string]bool, len(leases))
	for _, l := range leases {
		if !ValidUserID(l.User) || !l.State.Valid() {
			return Errorf(CodeInvalidArgument, "lease %+v: a user id and online, away or offline", l)
		}
		if seen[l.User] {
			return Errorf(CodeInvalidArgument, "lease of %q given twice", l.User)
		}
		seen[l.User] = true
	}
	return nil
}

// NoticeKind tells the notices of committed changes (event, read-cursor
// and account notices) from the live signals a Bus carries beside them.
type NoticeKind uint8

const (
	// NoticeCommitted is every notice of a committed change.
	NoticeCommitted NoticeKind = iota
	// NoticeTyping: User is typing in Conv until At.
	NoticeTyping
	// NoticePresence: User's presence changed to State (LastSeen At).
	// Published once per conversation in which User has an open period
	// (Conv), so that it reaches every gateway that watches one of them;
	// receivers drop the repeats.
	NoticePresence
)

// TypingNotice is the notice that user is typing in conv until until.
func TypingNotice(conv, user string, until time.Time) Notice {
	return Notice{Kind: NoticeTyping, Conv: conv, User: user, At: until}
}

// PresenceNotices are the notices of a presence change: one per
// conversation of convs (the user's conversations with an open period).
func PresenceNotices(p Presence, convs []string) []Notice {
	ns := make([]Notice, len(convs))
	for i, c := range convs {
		ns[i] = Notice{Kind: NoticePresence, Conv: c, User: p.User, State: p.State, At: p.LastSeen}
	}
	return ns
}

// Signal reports whether n is a typing or presence notice.
func (n Notice) Signal() bool { return n.Kind != NoticeCommitted }

// ValidSignal reports whether n is a signal notice a bus carries: a
// conversation and a user, a time of whole milliseconds after 1970 (the
// buses' precision), a presence state on presence notices only, and
// nothing else.
func (n Notice) ValidSignal() bool {
	if n.Kind != NoticeTyping && n.Kind != NoticePresence {
		return false
	}
	if !ValidConvID(n.Conv) || !ValidUserID(n.User) || n.Seq != 0 || n.Device != "" || n.Event != nil || n.Epoch != 0 {
		return false
	}
	if n.Kind == NoticeTyping && n.State != "" || n.Kind == NoticePresence && !n.State.Valid() {
		return false
	}
	ms := n.At.UnixMilli()
	return ms >= 0 && n.At.Equal(time.UnixMilli(ms))
}

// String names a notice kind.
func (k NoticeKind) String() string {
	switch k {
	case NoticeCommitted:
		return "committed"
	case NoticeTyping:
		return "typing"
	case NoticePresence:
		return "presence"
	}
	return fmt.Sprintf("NoticeKind(%d)", uint8(k))
}
