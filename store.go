package parley

import (
	"cmp"
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"time"
)

// Store is the durable state of Parley: users, devices, conversations and
// their event logs. Two implementations exist, sqlite.DB and postgres.DB, and
// both pass the one behaviour suite in storetest; a behaviour that differs
// between them is a bug.
//
// General guarantees:
//   - Input is validated before any storage work; a rejected request changes
//     nothing (head, rows and bodies stay as they were).
//   - Every write to a conversation runs in a transaction that first locks
//     the conversation's row (SQLite: the database's one write lock). A
//     batch of sends (SendBatcher) may span several conversations in one
//     transaction; it locks each of their rows once, in id order, before
//     its first item. So per conversation seqs are assigned and committed
//     in order: a reader that sees seq n sees every seq below it that
//     still exists.
//   - Time (event at, recall window, retention age) is the database clock,
//     never the caller's.
//   - Errors carry a protocol code (ErrorCode); an error without one is an
//     internal failure whose outcome is unknown (UNAVAILABLE to clients).
//     A context deadline or a lost connection is such a failure.
//   - "Not a member" and "no such conversation" are the same NOT_MEMBER.
type Store interface {
	// CreateUser creates an account. Errors: INVALID_ARGUMENT (bad id,
	// email or role, a password shorter than MinPasswordChars; an empty
	// password makes an account that cannot log in), ALREADY_EXISTS (id or
	// email taken).
	CreateUser(ctx context.Context, u NewUser) (User, error)

	// User returns the account a login names, in any form ResolveLogin
	// accepts (id, mixed-case id, email). Errors: INVALID_ARGUMENT,
	// NOT_FOUND.
	User(ctx context.Context, login string) (User, error)

	// SetUserDisabled disables or enables an account. Disabling also
	// revokes every token of the user in the same transaction (over an
	// index: the cost grows with the user's tokens, not with all tokens),
	// so enabling the account later does not bring a possibly stolen token
	// back: the user logs in again. Errors: NOT_FOUND.
	SetUserDisabled(ctx context.Context, id string, disabled bool) error

	// SetPassword gives an account a new password (the operator's `parley
	// user passwd`). It also revokes every token of the user in the same
	// transaction, as disabling does: whoever knew the old password is
	// logged out. The password is checked (ValidateNewPassword) and hashed
	// before any storage work. Errors: INVALID_ARGUMENT (malformed id, a
	// password ValidateNewPassword refuses), NOT_FOUND.
	SetPassword(ctx context.Context, id, password string) error

	// ConvMembers returns the users who are members of conv now (an open
	// membership period), ordered by user id, for operators (`parley conv
	// show`). Errors: INVALID_ARGUMENT, NOT_FOUND (no such conversation).
	ConvMembers(ctx context.Context, conv string) ([]string, error)

	// Login checks the password and issues a new token for (user, device,
	// install), whose idle lifetime starts now. A device logging in with a
	// new install id starts a new install: every other token of the device
	// is marked replaced, answers STALE_INSTALL from then on (even if the
	// device later returns to that install id) for Options.StaleInstallGrace
	// (or until its idle lifetime ends, if sooner), and is then deleted; the
	// device's delivered cursors restart at 0. The password is checked
	// outside any transaction. Session.Replaced reports whether
	// the login replaced an existing install of the device (not for a new
	// device, nor for the device's current install): callers announce the
	// change to the gateways only then. Errors: INVALID_ARGUMENT (malformed login,
	// password, device or install id), UNAUTHENTICATED (unknown login,
	// wrong password and disabled account alike, one message).
	Login(ctx context.Context, r LoginRequest) (Session, error)

	// KnownInstall reports whether the user login names (resolved as Login
	// resolves it) has a device whose current install is installID. An
	// unknown login or install is false, not an error: the login backoff
	// asks it before any password is hashed, so an owner's known install is
	// never slowed down by failures from elsewhere. Errors: UNAVAILABLE.
	KnownInstall(ctx context.Context, login, installID string) (bool, error)

	// Authenticate returns the principal of a token. A token lives while it
	// is used: one idle (not refreshed) for longer than Options.TokenIdle
	// (database clock) is refused and deleted, and so is one issued longer
	// than Options.TokenMax ago, however busy. A successful Authenticate
	// refreshes the token's last use, but writes only when the last refresh
	// is at least Options.TokenRefresh old, so a busy token costs one write
	// per TokenRefresh, not one per request; a stale install's token is
	// never refreshed. The refresh and the deletion are housekeeping: when
	// that write fails, the answer read stands, and the next lookup or
	// SweepTokens does it again. Errors: UNAUTHENTICATED (unknown, logged-out, idle
	// expired token, disabled account, a replaced install's token after its
	// grace — the last two deleted on the spot), STALE_INSTALL (the token
	// belongs to an install the device replaced, within the grace).
	Authenticate(ctx context.Context, token string) (Principal, error)

	// SweepTokens deletes at most limit tokens that Authenticate would
	// refuse and delete (idle expired, past its absolute lifetime, or of a
	// replaced install past its grace), oldest first, and returns how many it deleted. The server
	// calls it periodically, so tokens nobody presents again do not stay
	// forever; a return of limit means more may be left. limit < 1 is
	// INVALID_ARGUMENT.
	SweepTokens(ctx context.Context, limit int) (int, error)

	// Logout revokes a token. Revoking an unknown token is not an error.
	Logout(ctx context.Context, token string) error

	// CreateConversation creates a conversation owned by the caller (groups;
	// direct conversations have no owner). Every initial member, the caller
	// included and first, gets a member_joined event (seqs 1..n, sender the
	// caller) and a membership period from seq 1. Errors: INVALID_ARGUMENT,
	// ALREADY_EXISTS (id taken), NOT_FOUND (a member does not exist).
	CreateConversation(ctx context.Context, p Principal, c NewConversation) (Conversation, error)

	// AddMember adds user to a group: a member_joined event (sender the
	// caller, User the new member) whose seq opens the new period. Check
	// order: lock (no conversation: NOT_MEMBER) → the caller has an open
	// period or is an admin (NOT_MEMBER) → group (direct: PERMISSION_DENIED)
	// → user exists (NOT_FOUND) → user not in already (else a no-op:
	// Changed false, Seq 0). Errors: INVALID_ARGUMENT, NOT_MEMBER,
	// PERMISSION_DENIED, NOT_FOUND.
	AddMember(ctx context.Context, p Principal, conv, user string) (MemberChange, error)

	// RemoveMember ends user's open period with a member_left event (sender
	// the caller, User the leaver); the period ends at that seq, so the
	// leaver sees their removal. Check order: lock (NOT_MEMBER) → the caller
	// has an open period or is an admin (NOT_MEMBER) → group (direct:
	// PERMISSION_DENIED) → the caller is the owner, an admin, or user
	// themself (PERMISSION_DENIED) → user is in (else a no-op: Changed
	// false, Seq 0). Errors: INVALID_ARGUMENT, NOT_MEMBER, PERMISSION_DENIED.
	RemoveMember(ctx context.Context, p Principal, conv, user string) (MemberChange, error)

	// Send appends a message. In one transaction, in this order: lock the
	// conversation row (none: NOT_MEMBER) → look up the request key
	// (conv, sender user, cmid): same fingerprint is a replay answered with
	// the original seq and mid and Dup true, another fingerprint is
	// IDEMPOTENCY_MISMATCH → look up tombstones (ORIGINAL_EXPIRED) →
	// require an open membership period (NOT_MEMBER) → insert and advance
	// the head → commit. Concurrent identical requests queue on the lock:
	// exactly one gets Dup false. A resend after the sender's removal is
	// still a replay (Dup true). A reply (r.ReplyTo) checks its target
	// after the open period: a message of this conversation inside the
	// caller's periods (NOT_FOUND), not recalled (ALREADY_RECALLED); a
	// reply to a reply is stored as a reply to that one's root. The event
	// carries the members it mentions (Mentioned, against the members with
	// an open period), with a mentions row each, in the same transaction.
	// Errors: INVALID_ARGUMENT, NOT_MEMBER, IDEMPOTENCY_MISMATCH,
	// ORIGINAL_EXPIRED, NOT_FOUND, ALREADY_RECALLED.
	Send(ctx context.Context, p Principal, r SendRequest) (Sent, error)

	// Sync returns the events after r.After the caller may see, ascending,
	// each message with its Derived state as the caller reads it (AsOf the
	// capped head: Decorate over the edits, reactions and replies inside
	// the caller's periods up to it); with r.Thread only the thread's root
	// and its replies (a root that is no message the caller may see:
	// NOT_FOUND).
	// at most r.Limit (capped at MaxPage), read over indexes so a page costs
	// O(page) however long the invisible ranges are. Recalled messages come
	// with an empty body and Recalled set. Head is capped at the caller's
	// last visible seq (Periods.Head), and MinSeq at Head+1, so a former
	// member learns nothing of later activity, a purge past their cap
	// included. NextAfter is the last returned seq,
	// or Head when the page is empty; it never skips a visible event.
	// HasMore is true when a visible event exists after NextAfter in the
	// same read. Trimmed is true when After < MinSeq-1. Check order:
	// INVALID_ARGUMENT → NOT_MEMBER (no conversation, or no period at all)
	// → EPOCH_CHANGED (r.Epoch given and different) → CURSOR_AHEAD (After
	// above Head).
	Sync(ctx context.Context, p Principal, r SyncRequest) (Page, error)

	// Ack moves the device's delivered cursor forward to seq and returns
	// it; a lower seq is a no-op answering the current cursor. Check order:
	// INVALID_ARGUMENT → STALE_INSTALL (the principal's install was
	// replaced) → NOT_MEMBER (no conversation or no period) → CURSOR_AHEAD
	// (above the caller's capped head).
	Ack(ctx context.Context, p Principal, conv string, seq int64) (int64, error)

	// Read moves the user's read cursor (shared by all devices) forward to
	// seq and returns it; a lower seq is a no-op answering the current
	// cursor. Errors as Ack.
	Read(ctx context.Context, p Principal, conv string, seq int64) (int64, error)

	// Recall appends a recall event for the caller's message r.Target.
	// Check order: lock → request key (replay: Dup true with the recall's
	// seq; other fingerprint: IDEMPOTENCY_MISMATCH) → tombstone
	// (ORIGINAL_EXPIRED) → open period (NOT_MEMBER) → target is a stored
	// message of this conversation (NOT_FOUND) → sender (NOT_SENDER) → not
	// yet recalled (ALREADY_RECALLED) → database clock within the recall
	// window of the target's time (RECALL_WINDOW_EXPIRED). The target's
	// edit events are recalled with it: served with an empty body and
	// Recalled set, so no version of the text is read again.
	Recall(ctx context.Context, p Principal, r RecallRequest) (Recalled, error)

	// Edit appends an edit event: a new version of the caller's message
	// r.Target, with the mentions it newly makes (Mentioned, against the
	// members with an open period, minus everyone an earlier version of
	// the message mentioned), and a mentions row per mentioned user in the
	// same transaction. Check order: lock (NOT_MEMBER) → request key
	// (replay: Dup; other fingerprint or kind: IDEMPOTENCY_MISMATCH) →
	// tombstone (ORIGINAL_EXPIRED) → open period (NOT_MEMBER) → the target
	// is a message of this conversation inside the caller's periods
	// (NOT_FOUND) → sender (NOT_SENDER) → not recalled (ALREADY_RECALLED)
	// → database clock within r.Window of the target's time, when r.Window
	// is set (EDIT_WINDOW_EXPIRED).
	Edit(ctx context.Context, p Principal, r EditRequest) (Edited, error)

	// React sets or removes the caller's reaction r.Emoji on message
	// r.Target: a reaction event, and in the same transaction the one
	// reactions row of (target, user, emoji), unique by index, updated to
	// the new state and the event's seq. A request for the state that
	// already holds writes nothing and answers the seq of the event that
	// set it (0 if none ever did) with Dup. Check order: lock (NOT_MEMBER)
	// → request key → tombstone → open period (NOT_MEMBER) → the target is
	// a message inside the caller's periods (NOT_FOUND) → not recalled
	// (ALREADY_RECALLED) → the state.
	React(ctx context.Context, p Principal, r ReactRequest) (Reacted, error)

	// Versions returns the versions of message seq the caller may see,
	// oldest first: the original, then every edit whose seq is inside the
	// caller's periods; none for a recalled message (recalled true). Check
	// order as Fetch, and NOT_FOUND for an event that is no message.
	Versions(ctx context.Context, p Principal, conv string, seq int64) (versions []Version, recalled bool, err error)

	// OpenDirect returns the one direct conversation of the caller and
	// user (id DirectID), creating it, with both as members from seq 1,
	// when it does not exist (created true). Two concurrent opens of one
	// pair make one conversation. Errors: INVALID_ARGUMENT (a malformed
	// id, the caller themself), NOT_FOUND (no such user, or disabled).
	OpenDirect(ctx context.Context, p Principal, user string) (c Conversation, created bool, err error)

	// Directory lists active (not disabled) users whose id or email starts
	// with q.Prefix, by id in byte order, paged as the Admin listings; with
	// q.Shared only users who share a conversation with the caller (both
	// with an open period), the caller included. Errors: INVALID_ARGUMENT.
	Directory(ctx context.Context, p Principal, q DirectoryQuery) (AdminPage[DirectoryEntry], error)

	// Search returns one page of the messages whose text matches r, as p
	// reads them (search.go): newest first (SearchCursor's order), each
	// hit the message as Sync decorates it for p (Body the version p
	// sees, Derived AsOf p's capped head of its conversation) with the
	// Highlights of that version. A message matches when the version p
	// sees matches: its seq and that version's seq are inside p's
	// periods, no newer version is, it is not recalled, and it is in
	// q.Conv (if set), sent by q.From (if set) before q.Before (if set)
	// and after the cursor in the order. The filter runs inside the
	// query, before the limit: a page never comes back short while
	// matches follow. Next is set when at least one more hit follows.
	// Check order: ParseSearch (INVALID_ARGUMENT) → q.Conv names a
	// conversation p has no period in (NOT_MEMBER) → the index of a
	// conversation searched is not built yet (ErrSearchBuilding,
	// UNAVAILABLE). A broken or missing index is an internal error
	// (UNAVAILABLE), never an empty page.
	Search(ctx context.Context, p Principal, r SearchRequest) (SearchPage, error)

	// RebuildSearch rebuilds the search index of conv ("": of every
	// conversation) from its events: each conversation in one
	// transaction that holds its lock, deleting its rows and writing one
	// per version of each message not recalled, then clearing its
	// not-built mark. progress (may be nil) is called after each
	// conversation. Errors: INVALID_ARGUMENT, NOT_FOUND (no such conv).
	RebuildSearch(ctx context.Context, conv string, progress SearchProgress) (SearchRebuild, error)

	// SearchPending lists the conversations whose index is not built (those
	// an upgrade found with messages, until RebuildSearch), by id: what a
	// server rebuilds at start.
	SearchPending(ctx context.Context) ([]string, error)

	// Files (file.go).

	// CreateUpload starts an upload of r.Size bytes by p: a file row in
	// state uploading with a new id (NewID), counted against p's quota at
	// once, in a transaction that locks p's user row, so concurrent
	// uploads cannot pass the quota together. Check order: CheckUpload
	// (INVALID_ARGUMENT) → r.Size above r.MaxSize (TOO_LARGE, ErrTooLarge)
	// → the sizes of p's files (uploading and ready) plus r.Size above
	// r.Quota (TOO_LARGE, ErrQuotaExceeded).
	CreateUpload(ctx context.Context, p Principal, r NewUpload) (File, error)

	// FinishUpload marks p's upload id ready with what the server measured
	// of its bytes. Finishing a ready file again with the same meta
	// returns it unchanged (a retried finish); with other meta it is
	// INVALID_ARGUMENT. Check order: CheckFileID, CheckFileMeta
	// (INVALID_ARGUMENT) → a file of p's with that id (NOT_FOUND).
	FinishUpload(ctx context.Context, p Principal, id string, meta FileMeta) (File, error)

	// File returns file id if p may read it: p's own file (in any state),
	// or a ready file linked to a message whose seq lies in p's periods
	// (the link's seq, checked inside the query; recall, purge and
	// rollback remove links). Anything else, a missing file included, is
	// the same NOT_FOUND (ErrNoSuchFile). Errors: INVALID_ARGUMENT.
	File(ctx context.Context, p Principal, id string) (File, error)

	// FileUsage is what p's files take against the quota: uploading and
	// ready files, not yet deleted.
	FileUsage(ctx context.Context, p Principal) (FileUsage, error)

	// StaleFiles lists files for the collector, oldest first: uploads not
	// finished created before q.UploadingBefore, and ready files that no
	// message links created before q.UnlinkedBefore; at most q.Limit
	// (1..1000). Errors: INVALID_ARGUMENT.
	StaleFiles(ctx context.Context, q StaleFiles) ([]File, error)

	// DeleteFile deletes file id's row if it is still what StaleFiles
	// found it to be (unfinished, or ready with no link, and created
	// before the same bounds), in a transaction: a send that linked it
	// meanwhile keeps it. deleted reports whether the row went; the
	// caller deletes the blob after. Errors: INVALID_ARGUMENT.
	DeleteFile(ctx context.Context, id string, q StaleFiles) (deleted bool, err error)

	// FilesExist reports which of ids have a file row, in any state (the
	// map holds true for those, and nothing for the others): the
	// collector's reconciliation asks it of each batch of blobs it walks,
	// and a blob whose file has no row is an orphan. Check order: 1 to
	// MaxFilesPage ids, each CheckFileID (INVALID_ARGUMENT).
	FilesExist(ctx context.Context, ids []string) (map[string]bool, error)

	// ReadyFiles lists ready files whose id comes after after ("" for the
	// first page) in the store's order of ids, in that order, at most
	// limit (1..MaxFilesPage): the collector walks every ready file with
	// it, page by page, to find the ones whose blob is lost. A file
	// finished or deleted during the walk may or may not be listed; every
	// other ready file is listed exactly once. Errors: INVALID_ARGUMENT
	// (limit; an after that is neither "" nor a valid file id).
	ReadyFiles(ctx context.Context, after string, limit int) ([]File, error)

	// Convs returns one page of the conversations the caller has a period
	// in, latest activity first: a member's activity is the
	// time of the conversation's latest event, a former member's the time
	// of their last visible event; ties go by conversation id. A page holds
	// at most r.Limit entries (capped at MaxConvsPage) and starts after the
	// entry r.Before names (a ConvsPage.Next; empty: the first page).
	// HasMore is set, and Next names the page's last entry, when entries
	// follow it. Paging is by position (activity, id), not by offset: a
	// walk with no change in between returns every conversation exactly
	// once; one whose activity moves while a walk is under way may be seen
	// twice or not at all by that walk (its pushes tell the client).
	// The costly parts (unread, the latest message, cursors) are computed
	// for the page's entries only (Last without its Derived state: the
	// text as first sent); unread stops counting at UnreadCap (then
	// Unread is UnreadCap and UnreadCapped is set). Head and MinSeq
	// are capped as in Sync. Errors:
	// INVALID_ARGUMENT (Limit < 1, a Before that is no cursor).
	Convs(ctx context.Context, p Principal, r ConvsRequest) (ConvsPage, error)

	// Fetch returns one event (a recalled message with an empty body and
	// Recalled set; a message with its Derived state as in Sync). Check order: INVALID_ARGUMENT (seq < 1) → NOT_MEMBER
	// (no conversation, or no period) → NOT_FOUND (above the caller's
	// capped head) → NOT_MEMBER (seq outside the caller's periods) →
	// NOT_FOUND (purged).
	Fetch(ctx context.Context, p Principal, conv string, seq int64) (Event, error)

	// Conversation returns a conversation's header, for operators. Errors:
	// INVALID_ARGUMENT, NOT_FOUND.
	Conversation(ctx context.Context, id string) (Conversation, error)

	// SetRetention sets a conversation's retention policy (operators).
	// Errors: INVALID_ARGUMENT, NOT_FOUND.
	SetRetention(ctx context.Context, conv string, r Retention) error

	// Purge applies the retention policy: it deletes the longest prefix of
	// the log that the policy no longer keeps (events older than MaxAge by
	// the database clock, and all but the last KeepLast seqs), raises
	// MinSeq, and writes a tombstone for every deleted request key, and
	// deletes the derived rows (reactions, mentions) of the deleted events
	// and of their targets, in one transaction, so a late resend gets ORIGINAL_EXPIRED. It also drops
	// tombstones older than the tombstone TTL. Errors: INVALID_ARGUMENT,
	// NOT_FOUND.
	Purge(ctx context.Context, conv string) (PurgeResult, error)

	// Rollback returns a conversation to a restore point (docs/design.md):
	// events after toSeq are removed without tombstones (recalls among them
	// are undone, derived rows are rebuilt from the events that remain:
	// a reaction row returns to the state of the latest reaction event at
	// or below toSeq), periods are cut back to what they were at toSeq, then
	// system membership events (empty sender) are appended that restore the
	// current membership — member_left for users who are out now, then
	// member_joined for users who are in now, each in user id order —
	// cursors are clamped to the new head, and the epoch goes up by one.
	// toSeq must be between MinSeq-1 and the head. Errors:
	// INVALID_ARGUMENT, NOT_FOUND.
	Rollback(ctx context.Context, conv string, toSeq int64) (RollbackResult, error)

	// Feeder is what the gateways read to push events.
	Feeder

	// Operations holds the audit log and the incoming webhooks (ops.go).
	Operations

	// Exports holds the export jobs and their snapshots (export.go).
	Exports

	// Admin holds the operators' listings and the retention worker's claim
	// (below).
	Admin

	// Push holds the Web Push key, subscriptions and levels (push.go).
	Push

	// Close releases the store's connections.
	Close() error

	// Accounts a person manages (account.go).

	// SetDisplayName sets the display name of user id (CheckDisplayName:
	// trimmed; empty clears it) and returns the account. Errors:
	// INVALID_ARGUMENT, NOT_FOUND.
	SetDisplayName(ctx context.Context, id, name string) (User, error)

	// ChangePassword is a user's own password change: it checks current
	// against the stored hash (outside any transaction), then sets the
	// hash of next and deletes every token of the user except the one
	// whose text is keep, in one transaction: every other device is logged
	// out, the caller stays signed in. Check order: CheckChangePassword
	// (INVALID_ARGUMENT), the user (NOT_FOUND), the current password
	// (ErrWrongPassword, INVALID_ARGUMENT, never UNAUTHENTICATED).
	ChangePassword(ctx context.Context, p Principal, keep, current, next string) error

	// Sessions lists the user's signed-in devices (DeviceSession), by
	// device id; Current marks p's device. Tokens past their lifetime and
	// tokens of replaced installs do not count.
	Sessions(ctx context.Context, p Principal) ([]DeviceSession, error)

	// RevokeDevice deletes every token of p's user on device (the device
	// then logs in again). Errors: INVALID_ARGUMENT (a malformed device
	// id), NOT_FOUND (the user has no token on that device).
	RevokeDevice(ctx context.Context, p Principal, device string) error

	// Presence (signal.go). A user's presence is online when one of
	// their unexpired leases (one per gateway) is online, away when all
	// are away, offline when there is none; the store also keeps, per
	// user, the state last announced and when the user was last seen.

	// PutPresence sets gateway's leases of the named users, each expiring
	// ttl after now (the database clock); a lease of state offline
	// removes the gateway's lease of that user. The users' last seen time
	// becomes now, and moves forward by at least a millisecond at every
	// put and every change, so that it orders a user's changes. It returns, for the users whose presence is no longer
	// the one last announced, their new presence (which becomes the one
	// announced): among the stores of a deployment exactly one call
	// reports each change, so the caller announces it. Ordered by user.
	// Errors: INVALID_ARGUMENT (CheckLeases).
	PutPresence(ctx context.Context, gateway string, leases []PresenceLease, ttl time.Duration) ([]Presence, error)

	// SweepPresence removes up to limit leases that have expired (a
	// gateway that died, or stopped renewing) and reports, like
	// PutPresence, the users whose presence changed by it (their last
	// seen time unchanged). Concurrent sweeps (every gateway runs one)
	// each remove different leases and never report one change twice.
	// Errors: INVALID_ARGUMENT (limit < 1).
	SweepPresence(ctx context.Context, limit int) ([]Presence, error)

	// Presence returns the presence of the named users that p may see:
	// p's own, and that of users who hold an open membership period in a
	// conversation where p holds one too; others, and unknown users, are
	// left out, as if they did not exist. State is read from the
	// unexpired leases; LastSeen is zero for a user never seen. Ordered
	// by user, each once. Errors: INVALID_ARGUMENT (CheckPresenceUsers).
	Presence(ctx context.Context, p Principal, users []string) ([]Presence, error)

	// Sharing returns those of others (user excluded) who hold an open
	// membership period in a conversation where user holds one too:
	// who hears of user's presence. Ordered, each once; malformed ids are
	// left out, none for none.
	Sharing(ctx context.Context, user string, others []string) ([]string, error)
}

// MemberChange is the result of AddMember and RemoveMember: the seq of the
// membership event, or Changed false for a no-op.
type MemberChange struct {
	Conv    string
	User    string
	Seq     int64
	Changed bool
}

// PurgeResult reports what a purge removed.
type PurgeResult struct {
	Conv       string
	Deleted    int64 // events deleted
	Tombstones int64 // request keys tombstoned
	MinSeq     int64 // the new lowest stored seq
}

// RollbackResult reports a rollback.
type RollbackResult struct {
	Conv    string
	Removed int64 // events removed after the restore point
	Head    int64 // the head after the appended membership events
	Epoch   int64 // the new epoch
}

// Options are the policies a store enforces. The zero value means the
// defaults (WithDefaults).
type Options struct {
	RecallWindow time.Duration // default DefaultRecallWindow
	TombstoneTTL time.Duration // default DefaultTombstoneTTL

	// Token lifetime (Store.Authenticate, Store.SweepTokens).
	TokenIdle         time.Duration // default DefaultTokenIdle
	TokenRefresh      time.Duration // default DefaultTokenRefresh, at most TokenIdle/2
	StaleInstallGrace time.Duration // default DefaultStaleInstallGrace
	TokenMax          time.Duration // default DefaultTokenMax: the absolute lifetime, however busy

	// Secrets seals the secrets the store keeps (webhook secrets, the
	// export link signing key) under the server's secret key; nil keeps
	// them in clear. See Sealer for what Open checks and converts.
	Secrets Sealer
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.RecallWindow <= 0 {
		o.RecallWindow = DefaultRecallWindow
	}
	if o.TombstoneTTL <= 0 {
		o.TombstoneTTL = DefaultTombstoneTTL
	}
	return o.tokenDefaults()
}

// Feeder is what a gateway reads to push committed events to the members
// who may see them. It acts for no principal: its results carry bodies and
// membership for the gateway to filter, never for a client to read as is.
type Feeder interface {
	// Feed returns conv's committed events with seq > after, ascending, at
	// most limit (capped at MaxPage), as a member sees them (a recalled
	// message with an empty body and Recalled set), together with every
	// membership period that overlaps them, so the caller can tell who may
	// see each event (Feed.Audience). Head, MinSeq and Epoch are read in
	// the same snapshot. Errors: INVALID_ARGUMENT, NOT_FOUND (no such
	// conversation).
	Feed(ctx context.Context, conv string, after int64, limit int) (Feed, error)

	// FeedEvents is Feed without the membership periods (Members nil),
	// for a reader that keeps the audience itself between reads: within
	// one epoch the periods change only at membership events of the log
	// (a member_joined opens its User's period at its seq, unless one is
	// open; a member_left ends it at its seq, which the leaver still
	// sees), so a Roster known at the seq before the events, followed
	// over them (Roster.Follow), gives exactly the periods Feed returns.
	// A Rollback changes the epoch, and a purge can skip the events of a
	// Roster's gap: the reader then reads Feed. Errors as Feed.
	FeedEvents(ctx context.Context, conv string, after int64, limit int) (Feed, error)

	// Heads returns the head and epoch of each named conversation that
	// exists, in no particular order; unknown ids are left out.
	Heads(ctx context.Context, convs []string) ([]Head, error)

	// Joined returns the head and epoch of every conversation in which user
	// has an open membership period: the conversations a gateway watches
	// for that user's sockets.
	Joined(ctx context.Context, user string) ([]Head, error)

	// OpenPeriods returns the open membership periods of the named users,
	// each with its conversation's head and epoch, in one read: what a
	// gateway re-learns for its subscribed users after its bus lost
	// notices (a join it never heard of). Ordered by user, then
	// conversation; malformed and unknown user ids are left out, none for
	// none.
	OpenPeriods(ctx context.Context, users []string) ([]OpenPeriod, error)

	// Ping checks that the store answers (readiness).
	Ping(ctx context.Context) error
}

// Head is a conversation's last seq and epoch.
type Head struct {
	Conv  string
	Seq   int64
	Epoch int64
}

// OpenPeriod is a user's open membership period (From is the seq of their
// join event) with the conversation's head and epoch.
type OpenPeriod struct {
	User string
	From int64
	Head
}

// Membership is one membership period of one user.
type Membership struct {
	User string
	Period
}

// Feed is the result of Feeder.Feed.
type Feed struct {
	Conv    string
	Events  []Event
	Members []Membership // every period overlapping the events' seqs
	Head    int64
	MinSeq  int64
	Epoch   int64
}

// Audience returns the users who may see seq, in the order of f.Members. A
// user's periods are disjoint, so each user appears at most once.
func (f Feed) Audience(seq int64) []string {
	var users []string
	for _, m := range f.Members {
		if m.Contains(seq) {
			users = append(users, m.User)
		}
	}
	return users
}

// Roster is the membership of a conversation as a reader of its log keeps
// it between Feeds: the periods in force after seq At of epoch Epoch (that
// cover At+1, as far as the events up to At tell), ordered by user (a user
// has at most one such period). It is learned from a Feed
// (RosterOf) and followed over the events of later reads (Follow), so a
// reader that pushes every event in order needs the periods of the store
// only when it has no Roster or cannot follow it.
type Roster struct {
	At    int64
	Epoch int64
	Open  []Membership // To is 0; never modified once in a Roster: Follow makes a new one
}

// RosterOf returns the Roster after f's last event, from f's Members (a
// period that ends at the last event is out; one that ends later is in,
// open: its end is an event still to come); ok is false when f has no
// events (f's Members are then none).
func RosterOf(f Feed) (r Roster, ok bool) {
	if len(f.Events) == 0 {
		return Roster{}, false
	}
	last := f.Events[len(f.Events)-1].Seq
	r = Roster{At: last, Epoch: f.Epoch}
	for _, m := range f.Members {
		if m.Contains(last) && m.To != last {
			// A period Feed reports ended after last was in force at
			// last+1: its end is a member_left still to come.
			r.Open = append(r.Open, Membership{User: m.User, Period: Period{From: m.From}})
		}
	}
	return r, true
}

// Follow returns the periods overlapping f's events (Feed.Members, in its
// order: by user, then from, except that a period ending after f's last
// event is open: the events do not tell its end) and the Roster after them, from r and the
// membership events of f (a FeedEvents read). ok is false when r cannot
// say: f is of another epoch, its events do not run on from r.At without
// a gap, or a membership event contradicts r (a leave of a user with no
// open period); the caller then reads Feed. Without membership events the
// periods are r.Open itself, shared, not copied.
func (r Roster) Follow(f Feed) (members []Membership, next Roster, ok bool) {
	if f.Epoch != r.Epoch || r.Epoch == 0 {
		return nil, Roster{}, false
	}
	if len(f.Events) == 0 {
		return nil, r, true
	}
	changed := false
	for i, ev := range f.Events {
		if ev.Seq != r.At+1+int64(i) {
			return nil, Roster{}, false
		}
		if ev.Kind == EventMemberJoined || ev.Kind == EventMemberLeft {
			changed = true
		}
	}
	last := f.Events[len(f.Events)-1].Seq
	if !changed {
		return r.Open, Roster{At: last, Epoch: r.Epoch, Open: r.Open}, true
	}
	open := make(map[string]int, len(r.Open)) // user → index in members of their open period
	members = make([]Membership, len(r.Open), len(r.Open)+4)
	copy(members, r.Open)
	for i, m := range members {
		open[m.User] = i
	}
	for _, ev := range f.Events {
		i, in := open[ev.User]
		switch {
		case ev.Kind == EventMemberJoined && !in:
			open[ev.User] = len(members)
			members = append(members, Membership{User: ev.User, Period: Period{From: ev.Seq}})
		case ev.Kind == EventMemberLeft && in:
			members[i].To = ev.Seq
			delete(open, ev.User)
		case ev.Kind == EventMemberLeft:
			return nil, Roster{}, false
		}
		// A join of a member is the creation's: their period opened at 1.
	}
	slices.SortFunc(members, func(a, b Membership) int {
		return cmp.Or(strings.Compare(a.User, b.User), cmp.Compare(a.From, b.From))
	})
	next = Roster{At: last, Epoch: r.Epoch}
	for _, m := range members {
		if m.Open() {
			next.Open = append(next.Open, m)
		}
	}
	return members, next, true
}

// CheckFeed validates the arguments of Feeder.Feed.
func CheckFeed(conv string, after int64, limit int) error {
	if err := CheckConvID(conv); err != nil {
		return err
	}
	if err := CheckSeq("after", after); err != nil {
		return err
	}
	if limit < 1 {
		return Errorf(CodeInvalidArgument, "limit must be at least 1")
	}
	return nil
}

// UserIDs returns the ids of Feeder.OpenPeriods that can name a user:
// malformed ones are left out like unknown ones.
func UserIDs(users []string) []string {
	ids := make([]string, 0, len(users))
	for _, id := range users {
		if ValidUserID(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// HeadIDs returns the ids of Feeder.Heads that can name a conversation:
// malformed ones are left out like unknown ones.
func HeadIDs(convs []string) []string {
	ids := make([]string, 0, len(convs))
	for _, id := range convs {
		if ValidConvID(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// Admin is what the operations API lists (GET /api/admin/users, convs,
// exports, hooks) and what the retention worker claims.
//
// Listings page by id in byte order (PostgreSQL compares with COLLATE "C",
// so both stores order alike) with an opaque cursor: a page holds at most
// q.Limit items (1..MaxAdminPage) after the item q.After names (a
// previous AdminPage.Next; empty: from the first). HasMore is set, and Next
// names the page's last item, when items follow it. Paging is keyset, not
// offset: a walk with no change in between returns every row exactly once,
// and a row created during a walk is seen iff its id sorts after the
// cursor. Each page is read in one snapshot. Errors: INVALID_ARGUMENT
// (Limit out of range, an After that is no cursor).
type Admin interface {
	// AdminUsers lists accounts with LastSeen, the latest last use of any
	// of the user's live tokens (zero when the user has none), and Files,
	// what their files take against the quota (as FileUsage counts it:
	// uploading and ready files), read in the page's snapshot.
	AdminUsers(ctx context.Context, q AdminQuery) (AdminPage[AdminUser], error)

	// AdminConvs lists conversations with their member count (open
	// membership periods), head and retention policy.
	AdminConvs(ctx context.Context, q AdminQuery) (AdminPage[AdminConv], error)

	// AdminExports lists the export jobs of every user.
	AdminExports(ctx context.Context, q AdminQuery) (AdminPage[AdminExport], error)

	// AdminHooks lists the webhooks with their secrets blanked.
	AdminHooks(ctx context.Context, q AdminQuery) (AdminPage[Hook], error)

	// ClaimRetention claims at most limit conversations that have a
	// retention policy (MaxAge or KeepLast set) and were not claimed yet
	// in the current retention round, marks them claimed for it, and
	// returns their ids in id order. Rounds are windows of length every on
	// the database clock (round n covers Unix milliseconds
	// [n·every, (n+1)·every)), so every store on one database — every
	// gateway — agrees on them: concurrent callers get disjoint sets, and
	// a conversation is claimed at most once per round, however many
	// workers ask. The claim commits on its own: the caller purges each
	// claimed conversation afterwards (Purge), and one it fails to purge
	// waits for the next round. Errors: INVALID_ARGUMENT (every under a
	// millisecond, limit out of 1..MaxAdminPage).
	ClaimRetention(ctx context.Context, every time.Duration, limit int) ([]string, error)
}

// Bounds of the admin listings.
const (
	DefaultAdminPage = 50
	MaxAdminPage     = 200
	// maxAdminCursorID bounds the id a cursor names: every id (user,
	// conversation, job, hook) is at most 64 bytes.
	maxAdminCursorID = 64
)

// AdminQuery pages an admin listing.
type AdminQuery struct {
	After string // an AdminPage.Next; empty: the first page
	Limit int    // 1..MaxAdminPage
}

// AdminPage is one page of an admin listing.
type AdminPage[T any] struct {
	Items   []T
	Next    string // the cursor of the page's last item when HasMore
	HasMore bool
}

// AdminUser is one account in AdminUsers.
type AdminUser struct {
	User
	LastSeen time.Time // latest last use of a live token; zero: none
	Files    FileUsage // the user's uploading and ready files
}

// AdminConv is one conversation in AdminConvs.
type AdminConv struct {
	Conversation
	Members int64 // open membership periods
}

// AdminExport is one export job in AdminExports.
type AdminExport struct {
	ExportJob
	// FinishedAt is when the job reached its current final state (done,
	// failed, revoked, expired); zero while queued or running.
	FinishedAt time.Time
}

// AdminCursor returns the opaque cursor that names the item with id.
func AdminCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id))
}

// CheckAdminQuery checks an AdminQuery and returns the id its cursor names
// ("" for the first page): the stores list the items with ids above it.
func CheckAdminQuery(q AdminQuery) (after string, err error) {
	if q.Limit < 1 || q.Limit > MaxAdminPage {
		return "", Errorf(CodeInvalidArgument, "limit must be 1–%d", MaxAdminPage)
	}
	if q.After == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(q.After)
	if err != nil || len(b) == 0 || len(b) > maxAdminCursorID {
		return "", Errorf(CodeInvalidArgument, "after is not a cursor of this listing")
	}
	for _, c := range b {
		if c <= 0x20 || c > 0x7e {
			return "", Errorf(CodeInvalidArgument, "after is not a cursor of this listing")
		}
	}
	return string(b), nil
}

// NewAdminPage builds a page from up to limit+1 items read in id order
// (the extra one only tells that more follow).
func NewAdminPage[T any](items []T, limit int, id func(T) string) AdminPage[T] {
	p := AdminPage[T]{Items: items}
	if len(items) > limit {
		p.Items, p.HasMore = items[:limit], true
		p.Next = AdminCursor(id(p.Items[limit-1]))
	}
	if p.Items == nil {
		p.Items = []T{}
	}
	return p
}

// CheckClaimRetention checks the arguments of Admin.ClaimRetention.
func CheckClaimRetention(every time.Duration, limit int) error {
	if every < time.Millisecond {
		return Errorf(CodeInvalidArgument, "the retention round must be at least 1ms")
	}
	if limit < 1 || limit > MaxAdminPage {
		return Errorf(CodeInvalidArgument, "limit must be 1–%d", MaxAdminPage)
	}
	return nil
}
