package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Run runs the behaviour suite against b: one subtest per behaviour of the
// parley.Store contract (store.go, docs/design.md), each on its own fresh
// database and in parallel with the others. The names of the subtests are the
// check names of the contract's behaviours, so
//
//	go test ./sqlite/ -run 'TestContract/recall_rejections'
//
// runs one check.
//
// Every rejected request is checked to have changed nothing (snapshot and
// unchanged), and every code is compared exactly with parley.ErrorCode.
func Run(t *testing.T, b Backend) {
	t.Helper()
	RunMatching(t, b, "")
}

// RunMatching runs the checks whose names begin with prefix: a backend
// runs a part of the suite again under another setting of its own.
func RunMatching(t *testing.T, b Backend, prefix string) {
	t.Helper()
	for _, bt := range behaviours {
		if !strings.HasPrefix(bt.name, prefix) {
			continue
		}
		t.Run(bt.name, func(t *testing.T) {
			t.Parallel()
			bt.run(t, newEnv(t, b, bt.opts))
		})
	}
}

// behaviour is one named check of the suite.
type behaviour struct {
	name string
	opts parley.Options
	run  func(t *testing.T, e *env)
}

// behaviours lists the checks in the order of the contract matrix; the
// names are stable (scripts and the CI summary refer to them).
var behaviours = []behaviour{
	// Sending and replays (event.go).
	{name: "normal_history", run: testNormalHistory},
	{name: "lost_reply_retry", run: testLostReplyRetry},
	{name: "non_member_rejected", run: testNonMemberRejected},
	{name: "unknown_conv_same_error", run: testUnknownConvSameError},
	{name: "idempotency_mismatch", run: testIdempotencyMismatch},
	{name: "concurrent_replay_one_row", run: testConcurrentReplayOneRow},
	{name: "resend_after_removal", run: testResendAfterRemoval},
	{name: "bounds", run: testBounds},
	{name: "recall_rejections", run: testRecallRejections},
	{name: "recall_idempotent", run: testRecallIdempotent},
	{name: "recall_window_db_clock", opts: parley.Options{RecallWindow: time.Hour}, run: testRecallWindowDBClock},
	{name: "paging_under_writes", run: testPagingUnderWrites},
	{name: "fetch_rules", run: testFetchRules},
	{name: "sent_at_read_back", run: testSentAtReadBack},

	// Edits, reactions, replies, mentions (derived.go).
	{name: "edit_basics", run: testEditBasics},
	{name: "edit_rejections", run: testEditRejections},
	{name: "edit_idempotent", run: testEditIdempotent},
	{name: "edit_window", run: testEditWindow},
	{name: "derived_bounds", run: testDerivedBounds},
	{name: "edit_former_member", run: testEditFormerMember},
	{name: "derived_period_gap", run: testDerivedPeriodGap},
	{name: "versions_recall", run: testVersionsRecall},
	{name: "react_set_remove", run: testReactSetRemove},
	{name: "react_rejections", run: testReactRejections},
	{name: "react_concurrent_one_event", run: testReactConcurrentOneEvent},
	{name: "reply_rules", run: testReplyRules},
	{name: "thread_sync", run: testThreadSync},
	{name: "batch_replies_mentions", run: testBatchRepliesMentions},
	{name: "mentions_open_members", run: testMentionsOpenMembers},
	{name: "mentions_unread", run: testMentionsUnread},
	{name: "derived_purge", run: testDerivedPurge},
	{name: "derived_rollback", run: testDerivedRollback},
	{name: "feed_derived_fields", run: testFeedDerivedFields},

	// Full-text search (search.go).
	{name: "search_corpus", run: testSearchCorpus},
	{name: "search_rejections", run: testSearchRejections},
	{name: "search_edit", run: testSearchEdit},
	{name: "search_recall", run: testSearchRecall},
	{name: "search_former_member", run: testSearchFormerMember},
	{name: "search_purge", run: testSearchPurge},
	{name: "search_rollback", run: testSearchRollback},
	{name: "search_paging", run: testSearchPaging},
	{name: "search_pending", run: testSearchPending},
	{name: "search_many_convs", run: testSearchManyConvs},
	{name: "search_batch", run: testSearchBatch},

	// Uploaded files and attachments (file.go).
	{name: "file_create", run: testFileCreate},
	{name: "file_quota_concurrent", run: testFileQuotaConcurrent},
	{name: "file_usage", run: testFileUsage},
	{name: "file_finish", run: testFileFinish},
	{name: "file_access", run: testFileAccess},
	{name: "file_access_recall", run: testFileAccessRecall},
	{name: "file_access_purge", run: testFileAccessPurge},
	{name: "file_access_rollback", run: testFileAccessRollback},
	{name: "attach_rejections", run: testAttachRejections},
	{name: "attach_reads", run: testAttachReads},
	{name: "attach_concurrent", run: testAttachConcurrent},
	{name: "attach_batch", run: testAttachBatch},
	{name: "attach_export", run: testAttachExport},
	{name: "file_stale", run: testFileStale},
	{name: "file_delete", run: testFileDelete},
	{name: "files_exist", run: testFilesExist},
	{name: "ready_files", run: testReadyFiles},

	// Direct conversations and the directory (direct.go).
	{name: "direct_open", run: testDirectOpen},
	{name: "direct_open_concurrent", run: testDirectOpenConcurrent},
	{name: "directory_listing", run: testDirectoryListing},
	{name: "directory_shared", run: testDirectoryShared},

	// Presence leases, sweep and reads (presence.go).
	{name: "presence_leases", run: testPresenceLeases},
	{name: "presence_sweep", run: testPresenceSweep},
	{name: "presence_read", run: testPresenceRead},

	// Group commit (batch.go).
	{name: "batch_outcomes_independent", run: testBatchOutcomesIndependent},
	{name: "batch_seqs_in_arrival_order", run: testBatchSeqsInArrivalOrder},
	{name: "concurrent_sends_one_conversation", run: testConcurrentSendsOneConversation},
	{name: "batch_across_conversations", run: testBatchAcrossConversations},
	{name: "concurrent_sends_many_conversations", run: testConcurrentSendsManyConversations},

	// Retention and rollback (conversation.go).
	{name: "retention_purge", run: testRetentionPurge},
	{name: "control_no_tombstone", run: testControlNoTombstone},
	{name: "tombstone_ttl", opts: parley.Options{TombstoneTTL: tombstoneTTL}, run: testTombstoneTTL},
	{name: "trimmed", run: testTrimmed},
	{name: "epoch_changed", run: testEpochChanged},
	{name: "rollback_rules", run: testRollbackRules},

	// Membership and conversations (conversation.go).
	{name: "membership_periods", run: testMembershipPeriods},
	{name: "former_member_caps", run: testFormerMemberCaps},
	{name: "member_rules", run: testMemberRules},
	{name: "create_conversation", run: testCreateConversation},
	{name: "convs_order", run: testConvsOrder},
	{name: "convs_paging", run: testConvsPaging},
	{name: "convs_paging_stable", run: testConvsPagingStable},
	{name: "convs_page_bounds", run: testConvsPageBounds},

	// Cursors (conversation.go).
	{name: "cursor_ahead", run: testCursorAhead},
	{name: "ack_read_monotonic", run: testAckReadMonotonic},
	{name: "unread_multi_device", run: testUnreadMultiDevice},

	// Users, devices and tokens (user.go).
	{name: "stale_install", run: testStaleInstall},
	{name: "identity_resolver", run: testIdentityResolver},
	{name: "login_replaced", run: testLoginReplaced},
	{name: "known_install", run: testKnownInstall},
	{name: "disabled_user", run: testDisabledUser},
	{name: "set_password", run: testSetPassword},
	{name: "logout", run: testLogout},
	{name: "identity_outage_is_unavailable", run: testIdentityOutageIsUnavailable},
	{name: "token_idle_lifetime", opts: parley.Options{TokenIdle: 3 * time.Hour, TokenRefresh: time.Hour}, run: testTokenIdleLifetime},
	{name: "token_sweep_bounded", opts: parley.Options{TokenIdle: 3 * time.Hour, StaleInstallGrace: time.Hour}, run: testTokenSweepBounded},
	{name: "token_lifetime_upgrade", run: testTokenLifetimeUpgrade},
	// Accounts a person manages (account.go).
	{name: "display_name", run: testDisplayName},
	{name: "change_password", run: testChangePassword},
	{name: "sessions", run: testSessions},
	{name: "token_max_lifetime", opts: parley.Options{TokenMax: 5 * time.Hour, TokenIdle: 3 * time.Hour, TokenRefresh: time.Hour}, run: testTokenMaxLifetime},

	{name: "stale_install_grace", opts: parley.Options{TokenIdle: 10 * time.Hour, StaleInstallGrace: 2 * time.Hour}, run: testStaleInstallGrace},

	// What the gateways read (feed.go).
	{name: "feed_events_and_audience", run: testFeedEventsAndAudience},
	{name: "feed_recalled_and_paging", run: testFeedRecalledAndPaging},
	{name: "feed_events_follow_roster", run: testFeedEventsFollowRoster},
	{name: "heads_and_joined", run: testHeadsAndJoined},

	// Failures of the store itself (event.go).
	{name: "cancelled_is_unavailable", run: testCancelledIsUnavailable},

	// Operations (ops.go).
	{name: "audit_append_and_page", run: testAuditAppendAndPage},
	{name: "audit_finish", run: testAuditFinish},
	{name: "hook_create_rules", run: testHookCreateRules},
	{name: "hook_delete", run: testHookDelete},
	{name: "hook_create_rules_sealed", opts: sealedOpts, run: testHookCreateRules},

	// Secrets at rest (secret.go).
	{name: "secrets_sealed", opts: sealedOpts, run: testSecretsSealed},
	{name: "secrets_wrong_key_refused", opts: sealedOpts, run: testSecretsWrongKeyRefused},
	{name: "secrets_sealed_at_open", run: testSecretsSealedAtOpen},
	{name: "secrets_rotation", opts: sealedOpts, run: testSecretsRotation},

	// Web Push (push.go).
	{name: "push_key", run: testPushKey},
	{name: "push_key_sealed", opts: sealedOpts, run: testPushKeySealed},
	{name: "push_subscription_save", run: testPushSubscriptionSave},
	{name: "push_subscription_delete", run: testPushSubscriptionDelete},
	{name: "push_settings", run: testPushSettings},
	{name: "push_targets", run: testPushTargets},

	// Admin listings and the retention claim (admin.go).
	{name: "admin_listings", run: testAdminListings},
	{name: "retention_claim_rounds", run: testRetentionClaimRounds},

	// Exports (export.go).
	{name: "export_create_replay", run: testExportCreateReplay},
	{name: "export_scope_not_member", run: testExportScopeNotMember},
	{name: "export_active_limit", run: testExportActiveLimit},
	{name: "export_snapshot_visibility", run: testExportSnapshotVisibility},
	{name: "export_snapshot_stable", run: testExportSnapshotStable},
	{name: "export_claim_lease", run: testExportClaimLease},
	{name: "export_shards_progress", run: testExportShardsProgress},
	{name: "export_shard_batch", run: testExportShardBatch},
	{name: "export_finish_fail_retry", run: testExportFinishFailRetry},
	{name: "export_revoke_expire", run: testExportRevokeExpire},
	{name: "export_purge_pinned", run: testExportPurgePinned},
	{name: "export_rollback_fails_pinned", run: testExportRollbackFailsPinned},
	{name: "export_concurrent_claims", run: testExportConcurrentClaims},
	{name: "export_jobs_by_ids", run: testExportJobsByIDs},
	{name: "export_counts", run: testExportCounts},
	{name: "export_signing_key", run: testExportSigningKey},
	{name: "export_signing_key_sealed", opts: sealedOpts, run: testExportSigningKey},
	{name: "export_derived", run: testExportDerived},
	{name: "export_reuse", run: testExportReuse},
	{name: "export_reuse_ends", run: testExportReuseEnds},
	{name: "export_reuse_concurrent", run: testExportReuseConcurrent},
	{name: "export_max_kept", run: testExportMaxKept},
}

// password is every test user's password. Hashing is argon2id and slow on
// purpose, so tests create users with a password only when they log in.
const password = "correct horse battery staple"

// clockSlack is how far the database clock may be from the test's clock
// (same host) plus the time a call takes.
const clockSlack = 5 * time.Second

// env is one fresh database and the helpers the checks share.
type env struct {
	db DB
	st parley.Store
}

func newEnv(t *testing.T, b Backend, opts parley.Options) *env {
	t.Helper()
	db := b.New(t, opts)
	if db == nil {
		t.Fatal("Backend.New returned nil")
	}
	return &env{db: db, st: db.Store()}
}

// ctx is the context of every store call: the test's, cancelled when the
// test ends.
func ctx(t *testing.T) context.Context { return t.Context() }

// wantCode reports whether err carries the code want ("" for no error) and
// records a failure when it does not.
func wantCode(t *testing.T, err error, want parley.Code) bool {
	t.Helper()
	if got := parley.ErrorCode(err); got != want {
		if want == "" {
			t.Errorf("got error %v (code %s), want success", err, got)
		} else {
			t.Errorf("got code %q (err %v), want %q", got, err, want)
		}
		return false
	}
	return true
}

// ok stops the test when err is not nil.
func ok(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v (code %s)", what, err, parley.ErrorCode(err))
	}
}

// user creates an account that can log in. Email may be empty.
func (e *env) user(t *testing.T, id, email string, role parley.Role) parley.User {
	t.Helper()
	u, err := e.st.CreateUser(ctx(t), parley.NewUser{ID: id, Email: email, Password: password, Role: role})
	ok(t, err, "create user "+id)
	return u
}

// bystander creates an account without a password: it can be a member and
// be seen, and costs no password hash.
func (e *env) bystander(t *testing.T, id string) {
	t.Helper()
	_, err := e.st.CreateUser(ctx(t), parley.NewUser{ID: id})
	ok(t, err, "create user "+id)
}

// login logs a device in.
func (e *env) login(t *testing.T, login, device, install string) parley.Session {
	t.Helper()
	s, err := e.st.Login(ctx(t), parley.LoginRequest{Login: login, Password: password, DeviceID: device, InstallID: install})
	ok(t, err, "login "+login)
	if s.Token == "" {
		t.Fatalf("login %s: empty token", login)
	}
	return s
}

// member creates a user with a password and logs in device d1 (install
// i1); it returns the principal.
func (e *env) member(t *testing.T, id string) parley.Principal {
	t.Helper()
	e.user(t, id, "", "")
	p := e.login(t, id, "d1", "i1").Principal
	if p.User != id || p.DeviceID != "d1" || p.InstallID != "i1" {
		t.Fatalf("login %s: principal %+v", id, p)
	}
	return p
}

// group creates a group owned by owner with the other members (who must
// exist). The owner gets seq 1, the others 2..n in order.
func (e *env) group(t *testing.T, owner parley.Principal, id string, members ...string) parley.Conversation {
	t.Helper()
	c, err := e.st.CreateConversation(ctx(t), owner, parley.NewConversation{ID: id, Kind: parley.KindGroup, Title: "title of " + id, Members: members})
	ok(t, err, "create conversation "+id)
	if c.ID != id || c.Head != int64(1+len(members)) {
		t.Fatalf("create conversation %s: got %+v, want id %s and head %d", id, c, id, 1+len(members))
	}
	return c
}

// send sends a message that must be accepted as new.
func (e *env) send(t *testing.T, p parley.Principal, conv, cmid, body string) parley.Sent {
	t.Helper()
	s, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: conv, CMID: cmid, Body: body})
	ok(t, err, fmt.Sprintf("send %s/%s by %s", conv, cmid, p.User))
	if s.Dup {
		t.Fatalf("send %s/%s by %s: Dup true for a new request", conv, cmid, p.User)
	}
	return s
}

// recall recalls a message; the recall must be new.
func (e *env) recall(t *testing.T, p parley.Principal, conv string, target int64, cmid string) parley.Recalled {
	t.Helper()
	r, err := e.st.Recall(ctx(t), p, parley.RecallRequest{Conv: conv, Target: target, CMID: cmid})
	ok(t, err, fmt.Sprintf("recall %s/%d by %s", conv, target, p.User))
	if r.Dup {
		t.Fatalf("recall %s/%d by %s: Dup true for a new request", conv, target, p.User)
	}
	return r
}

// sync reads one page.
func (e *env) sync(t *testing.T, p parley.Principal, conv string, after int64, limit int) parley.Page {
	t.Helper()
	pg, err := e.st.Sync(ctx(t), p, parley.SyncRequest{Conv: conv, After: after, Limit: limit})
	ok(t, err, fmt.Sprintf("sync %s after %d by %s", conv, after, p.User))
	if len(pg.Events) > min(limit, parley.MaxPage) {
		t.Fatalf("sync %s: %d events for limit %d", conv, len(pg.Events), limit)
	}
	return pg
}

// syncAll reads everything after `after` the way a client does: page by
// page, storing NextAfter only after the whole page.
func (e *env) syncAll(t *testing.T, p parley.Principal, conv string, after int64) []parley.Event {
	t.Helper()
	var out []parley.Event
	for range 10000 {
		pg := e.sync(t, p, conv, after, parley.MaxPage)
		out = append(out, pg.Events...)
		if pg.NextAfter < after {
			t.Fatalf("sync %s after %d: NextAfter %d went back", conv, after, pg.NextAfter)
		}
		if !pg.HasMore {
			return out
		}
		if pg.NextAfter == after {
			t.Fatalf("sync %s after %d: HasMore without progress", conv, after)
		}
		after = pg.NextAfter
	}
	t.Fatalf("sync %s: no end after 10000 pages", conv)
	return nil
}

// fetch returns one event that must be readable.
func (e *env) fetch(t *testing.T, p parley.Principal, conv string, seq int64) parley.Event {
	t.Helper()
	ev, err := e.st.Fetch(ctx(t), p, conv, seq)
	ok(t, err, fmt.Sprintf("fetch %s/%d by %s", conv, seq, p.User))
	if ev.Seq != seq || ev.Conv != conv {
		t.Fatalf("fetch %s/%d: got event %s/%d", conv, seq, ev.Conv, ev.Seq)
	}
	return ev
}

// conv returns a conversation's header.
func (e *env) conv(t *testing.T, id string) parley.Conversation {
	t.Helper()
	c, err := e.st.Conversation(ctx(t), id)
	ok(t, err, "conversation "+id)
	return c
}

// summary returns p's Convs entry for conv, failing when it is missing.
func (e *env) summary(t *testing.T, p parley.Principal, conv string) parley.ConvSummary {
	t.Helper()
	list := allConvs(t, e.st, p)
	for _, s := range list {
		if s.Conv == conv {
			return s
		}
	}
	t.Fatalf("convs of %s: %s missing from %v", p.User, conv, convIDs(list))
	return parley.ConvSummary{}
}

// allConvs walks every page of p's conversation list.
func allConvs(t *testing.T, st parley.Store, p parley.Principal) []parley.ConvSummary {
	t.Helper()
	var all []parley.ConvSummary
	r := parley.ConvsRequest{Limit: parley.MaxConvsPage}
	for {
		page, err := st.Convs(ctx(t), p, r)
		ok(t, err, "convs of "+p.User)
		all = append(all, page.Convs...)
		if !page.HasMore {
			return all
		}
		if page.Next == "" || page.Next == r.Before {
			t.Fatalf("convs of %s: has_more with next %q after %q", p.User, page.Next, r.Before)
		}
		r.Before = page.Next
	}
}

func convIDs(list []parley.ConvSummary) []string {
	ids := make([]string, len(list))
	for i, s := range list {
		ids[i] = s.Conv
	}
	return ids
}

// rows counts the stored events of conv.
func (e *env) rows(t *testing.T, conv string) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ?", conv)
}

// keyRows counts the stored events of one request key.
func (e *env) keyRows(t *testing.T, conv, sender, cmid string) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND sender_user = ? AND cmid = ?", conv, sender, cmid)
}

// bodyIs reports whether the stored row of seq has exactly body.
func (e *env) bodyIs(t *testing.T, conv string, seq int64, body string) bool {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND seq = ? AND body = ?", conv, seq, body) == 1
}

// fill appends n messages by p to conv quickly (Fill).
func (e *env) fill(t *testing.T, p parley.Principal, conv string, n int) (first, last int64) {
	t.Helper()
	return Fill(t, e.db, p, conv, n)
}

// Fill appends n messages by p to conv quickly: the first through Send (so
// sender, device and time are real), the other n-1 by copying that row with
// raw SQL and advancing next_seq, as the store would have. It returns the
// first and last seq. Sending a thousand messages one commit at a time would
// cost seconds on a database that flushes every commit.
func Fill(tb testing.TB, db DB, p parley.Principal, conv string, n int) (first, last int64) {
	tb.Helper()
	s, err := db.Store().Send(context.Background(), p, parley.SendRequest{Conv: conv, CMID: "fill-" + parley.NewID(), Body: "fill 0"})
	if err != nil {
		tb.Fatalf("fill %s: %v", conv, err)
	}
	if n > 1 {
		db.Exec(tb, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, body, created_at)
SELECT e.conv_id, e.seq + n.i, e.mid || '-' || CAST(n.i AS TEXT), e.kind, e.sender_user, e.sender_device, 'fill ' || CAST(n.i AS TEXT), e.created_at
FROM events e, n WHERE e.conv_id = ? AND e.seq = ?`, n-1, conv, s.Seq)
		db.Exec(tb, "UPDATE conversations SET next_seq = next_seq + ? WHERE id = ?", n-1, conv)
	}
	last = s.Seq + int64(n) - 1
	if c, err := db.Store().Conversation(context.Background(), conv); err != nil || c.Head != last {
		tb.Fatalf("fill %s: head %d (%v), want %d", conv, c.Head, err, last)
	}
	return s.Seq, last
}

// snapshot is everything a rejected request must leave as it was.
type snapshot struct {
	Exists      int64 // rows in conversations with this id
	Head        int64
	MinSeq      int64
	Epoch       int64
	Rows        int64 // stored events
	MaxSeq      int64 // highest stored seq
	BodyChars   int64 // sum of body lengths: catches an overwritten body
	Recalled    int64 // messages with recall_seq set
	Tombstones  int64
	Periods     int64
	OpenPeriods int64
	PeriodEnds  int64 // sum of closed periods' to_seq
	Delivered   int64 // sum of delivered cursors
	Read        int64 // sum of read cursors
	Users       int64 // accounts in the database
}

func (e *env) snapshot(t *testing.T, conv string) snapshot {
	t.Helper()
	q := func(query string) int64 { t.Helper(); return e.db.Int(t, query, conv) }
	s := snapshot{
		Exists:      q("SELECT count(*) FROM conversations WHERE id = ?"),
		Head:        q("SELECT max(next_seq) - 1 FROM conversations WHERE id = ?"),
		MinSeq:      q("SELECT max(min_seq) FROM conversations WHERE id = ?"),
		Epoch:       q("SELECT max(epoch) FROM conversations WHERE id = ?"),
		Rows:        q("SELECT count(*) FROM events WHERE conv_id = ?"),
		MaxSeq:      q("SELECT max(seq) FROM events WHERE conv_id = ?"),
		BodyChars:   q("SELECT CAST(sum(length(body)) AS BIGINT) FROM events WHERE conv_id = ?"),
		Recalled:    q("SELECT count(*) FROM events WHERE conv_id = ? AND recall_seq IS NOT NULL"),
		Tombstones:  q("SELECT count(*) FROM tombstones WHERE conv_id = ?"),
		Periods:     q("SELECT count(*) FROM periods WHERE conv_id = ?"),
		OpenPeriods: q("SELECT count(*) FROM periods WHERE conv_id = ? AND to_seq IS NULL"),
		PeriodEnds:  q("SELECT CAST(sum(to_seq) AS BIGINT) FROM periods WHERE conv_id = ?"),
		Delivered:   q("SELECT CAST(sum(seq) AS BIGINT) FROM delivered_cursors WHERE conv_id = ?"),
		Read:        q("SELECT CAST(sum(seq) AS BIGINT) FROM read_cursors WHERE conv_id = ?"),
		Users:       e.db.Int(t, "SELECT count(*) FROM users"),
	}
	if s.Exists == 1 {
		// The header the store reports must agree with the row.
		c := e.conv(t, conv)
		if c.Head != s.Head || c.MinSeq != s.MinSeq || c.Epoch != s.Epoch {
			t.Fatalf("Conversation(%s) = head %d, min_seq %d, epoch %d; the row says %d, %d, %d",
				conv, c.Head, c.MinSeq, c.Epoch, s.Head, s.MinSeq, s.Epoch)
		}
	}
	return s
}

// unchanged records a failure when conv's storage differs from before.
func (e *env) unchanged(t *testing.T, conv string, before snapshot) {
	t.Helper()
	if after := e.snapshot(t, conv); after != before {
		t.Errorf("a rejected request changed storage of %s:\nbefore %+v\nafter  %+v", conv, before, after)
	}
}

// describe renders an event in one line for comparisons:
//
//	3 message ana/d1 "hello"
//	4 message ana/d1 recalled
//	5 recall ana/d1 -> 4
//	6 edit ana/d1 -> 3 "new text"
//	7 reaction ben/d1 -> 3 👍 on
//	8 message ben/d1 "a reply" re 3
//	6 member_left ana: ben
func describe(ev parley.Event) string {
	switch ev.Kind {
	case parley.EventMessage:
		s := fmt.Sprintf("%d message %s/%s %q", ev.Seq, ev.Sender, ev.Device, ev.Body)
		if ev.Recalled {
			s = fmt.Sprintf("%d message %s/%s recalled %q", ev.Seq, ev.Sender, ev.Device, ev.Body)
		}
		if ev.ReplyTo != 0 {
			s += fmt.Sprintf(" re %d", ev.ReplyTo)
		}
		return s
	case parley.EventEdit:
		s := fmt.Sprintf("%d edit %s/%s -> %d %q", ev.Seq, ev.Sender, ev.Device, ev.Target, ev.Body)
		if ev.Recalled {
			s += " recalled"
		}
		return s
	case parley.EventReaction:
		state := "off"
		if ev.On {
			state = "on"
		}
		return fmt.Sprintf("%d reaction %s/%s -> %d %s %s", ev.Seq, ev.Sender, ev.Device, ev.Target, ev.Emoji, state)
	case parley.EventRecall:
		return fmt.Sprintf("%d recall %s/%s -> %d", ev.Seq, ev.Sender, ev.Device, ev.Target)
	case parley.EventMemberJoined, parley.EventMemberLeft:
		s := fmt.Sprintf("%d %s %s: %s", ev.Seq, ev.Kind, ev.Sender, ev.User)
		if ev.Device != "" || ev.Body != "" {
			s += fmt.Sprintf(" (device %q, body %q)", ev.Device, ev.Body)
		}
		return s
	}
	return fmt.Sprintf("%d %s %s/%s %q", ev.Seq, ev.Kind, ev.Sender, ev.Device, ev.Body)
}

func describeAll(evs []parley.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = describe(ev)
	}
	return out
}

// wantEvents compares events with their descriptions.
func wantEvents(t *testing.T, what string, got []parley.Event, want ...string) {
	t.Helper()
	if g := describeAll(got); !slices.Equal(g, want) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, strings.Join(g, " | "), strings.Join(want, " | "))
	}
}

// seqs returns the seqs of events.
func seqs(evs []parley.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

// span returns the seqs from..to.
func span(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// wantPage checks the cursor fields of a page.
func wantPage(t *testing.T, what string, pg parley.Page, seqsWant []int64, nextAfter int64, hasMore bool, head int64) {
	t.Helper()
	if got := seqs(pg.Events); !slices.Equal(got, seqsWant) {
		t.Errorf("%s: seqs %v, want %v", what, got, seqsWant)
	}
	if pg.NextAfter != nextAfter || pg.HasMore != hasMore || pg.Head != head {
		t.Errorf("%s: NextAfter %d, HasMore %v, Head %d; want %d, %v, %d", what, pg.NextAfter, pg.HasMore, pg.Head, nextAfter, hasMore, head)
	}
}

// within reports whether at lies in [from-clockSlack, to+clockSlack].
func within(at, from, to time.Time) bool {
	return !at.Before(from.Add(-clockSlack)) && !at.After(to.Add(clockSlack))
}
