package metrics

import (
	"context"
	"time"

	"github.com/parleychat/parley"
)

// StoreOps are the Store methods Store measures, the values of the "op"
// label of parley_store_duration_seconds and parley_store_errors_total
// (every one present from the start). Close is not measured.
var StoreOps = []string{
	"Ack",
	"AddMember",
	"AdminConvs",
	"AdminExports",
	"AdminHooks",
	"AdminUsers",
	"AppendAudit",
	"Audit",
	"Authenticate",
	"ClaimExport",
	"ClaimRetention",
	"ConvMembers",
	"Conversation",
	"Convs",
	"CreateConversation",
	"CreateExport",
	"CreateHook",
	"CreateUser",
	"DeleteHook",
	"ExpireExports",
	"ExportCounts",
	"ExportEvents",
	"ExportJob",
	"ExportJobs",
	"ExportShards",
	"ExportSigningKey",
	"ExportSnapshot",
	"ExtendExport",
	"FailExport",
	"Feed",
	"FeedEvents",
	"Fetch",
	"FinishAudit",
	"FinishExport",
	"Heads",
	"Hook",
	"Hooks",
	"Joined",
	"Login",
	"Logout",
	"OpenPeriods",
	"Ping",
	"Purge",
	"Read",
	"Recall",
	"RecordShard",
	"RemoveMember",
	"RevokeExport",
	"Rollback",
	"Send",
	"SetPassword",
	"SetRetention",
	"SetUserDisabled",
	"SweepTokens",
	"Sync",
	"User",
}

// Store returns s measured: the duration of every call, and its failures
// (StoreCall), by method. Results and errors pass through unchanged; on a
// nil *Metrics it returns s itself.
//
// The wrapper embeds s, so a method added to parley.Store later compiles
// and passes through unmeasured until it is added here; a test fails
// meanwhile (TestStoreMeasuresEveryMethod).
func (m *Metrics) Store(s parley.Store) parley.Store {
	if m == nil {
		return s
	}
	return &store{Store: s, m: m}
}

type store struct {
	parley.Store
	m *Metrics
}

func (s *store) observe(op string, start time.Time, err *error) {
	s.m.StoreCall(op, time.Since(start), *err)
}

func (s *store) Ack(ctx context.Context, a1 parley.Principal, a2 string, a3 int64) (_ int64, err error) {
	defer s.observe("Ack", time.Now(), &err)
	return s.Store.Ack(ctx, a1, a2, a3)
}

func (s *store) AddMember(ctx context.Context, a1 parley.Principal, a2 string, a3 string) (_ parley.MemberChange, err error) {
	defer s.observe("AddMember", time.Now(), &err)
	return s.Store.AddMember(ctx, a1, a2, a3)
}

func (s *store) AppendAudit(ctx context.Context, a1 parley.AuditEntry) (_ parley.AuditEntry, err error) {
	defer s.observe("AppendAudit", time.Now(), &err)
	return s.Store.AppendAudit(ctx, a1)
}

func (s *store) Audit(ctx context.Context, a1 parley.AuditQuery) (_ []parley.AuditEntry, err error) {
	defer s.observe("Audit", time.Now(), &err)
	return s.Store.Audit(ctx, a1)
}

func (s *store) Authenticate(ctx context.Context, a1 string) (_ parley.Principal, err error) {
	defer s.observe("Authenticate", time.Now(), &err)
	return s.Store.Authenticate(ctx, a1)
}

func (s *store) ClaimExport(ctx context.Context, a1 string, a2 time.Duration) (_ parley.ExportJob, _ bool, err error) {
	defer s.observe("ClaimExport", time.Now(), &err)
	return s.Store.ClaimExport(ctx, a1, a2)
}

func (s *store) Conversation(ctx context.Context, a1 string) (_ parley.Conversation, err error) {
	defer s.observe("Conversation", time.Now(), &err)
	return s.Store.Conversation(ctx, a1)
}

func (s *store) Convs(ctx context.Context, a1 parley.Principal, a2 parley.ConvsRequest) (_ parley.ConvsPage, err error) {
	defer s.observe("Convs", time.Now(), &err)
	return s.Store.Convs(ctx, a1, a2)
}

func (s *store) CreateConversation(ctx context.Context, a1 parley.Principal, a2 parley.NewConversation) (_ parley.Conversation, err error) {
	defer s.observe("CreateConversation", time.Now(), &err)
	return s.Store.CreateConversation(ctx, a1, a2)
}

func (s *store) CreateExport(ctx context.Context, a1 parley.Principal, a2 parley.ExportRequest) (_ parley.ExportJob, err error) {
	defer s.observe("CreateExport", time.Now(), &err)
	return s.Store.CreateExport(ctx, a1, a2)
}

func (s *store) CreateHook(ctx context.Context, a1 parley.NewHook) (_ parley.Hook, err error) {
	defer s.observe("CreateHook", time.Now(), &err)
	return s.Store.CreateHook(ctx, a1)
}

func (s *store) CreateUser(ctx context.Context, a1 parley.NewUser) (_ parley.User, err error) {
	defer s.observe("CreateUser", time.Now(), &err)
	return s.Store.CreateUser(ctx, a1)
}

func (s *store) DeleteHook(ctx context.Context, a1 string) (err error) {
	defer s.observe("DeleteHook", time.Now(), &err)
	return s.Store.DeleteHook(ctx, a1)
}

func (s *store) ExpireExports(ctx context.Context) (_ []string, err error) {
	defer s.observe("ExpireExports", time.Now(), &err)
	return s.Store.ExpireExports(ctx)
}

func (s *store) ExportEvents(ctx context.Context, a1 string, a2 string, a3 int64, a4 int) (_ []parley.Event, err error) {
	defer s.observe("ExportEvents", time.Now(), &err)
	return s.Store.ExportEvents(ctx, a1, a2, a3, a4)
}

func (s *store) ExportJob(ctx context.Context, a1 string) (_ parley.ExportJob, err error) {
	defer s.observe("ExportJob", time.Now(), &err)
	return s.Store.ExportJob(ctx, a1)
}

func (s *store) ExportJobs(ctx context.Context, a1 []string) (_ []parley.ExportJob, err error) {
	defer s.observe("ExportJobs", time.Now(), &err)
	return s.Store.ExportJobs(ctx, a1)
}

func (s *store) ExportShards(ctx context.Context, a1 string) (_ []parley.ExportShard, err error) {
	defer s.observe("ExportShards", time.Now(), &err)
	return s.Store.ExportShards(ctx, a1)
}

func (s *store) ExportSigningKey(ctx context.Context) (_ string, _ []byte, err error) {
	defer s.observe("ExportSigningKey", time.Now(), &err)
	return s.Store.ExportSigningKey(ctx)
}

func (s *store) ExportSnapshot(ctx context.Context, a1 string) (_ []parley.ExportConv, err error) {
	defer s.observe("ExportSnapshot", time.Now(), &err)
	return s.Store.ExportSnapshot(ctx, a1)
}

func (s *store) ExtendExport(ctx context.Context, a1 string, a2 string, a3 int, a4 time.Duration) (err error) {
	defer s.observe("ExtendExport", time.Now(), &err)
	return s.Store.ExtendExport(ctx, a1, a2, a3, a4)
}

func (s *store) FailExport(ctx context.Context, a1 string, a2 string, a3 string, a4 time.Duration) (err error) {
	defer s.observe("FailExport", time.Now(), &err)
	return s.Store.FailExport(ctx, a1, a2, a3, a4)
}

func (s *store) Feed(ctx context.Context, a1 string, a2 int64, a3 int) (_ parley.Feed, err error) {
	defer s.observe("Feed", time.Now(), &err)
	return s.Store.Feed(ctx, a1, a2, a3)
}

func (s *store) FeedEvents(ctx context.Context, a1 string, a2 int64, a3 int) (_ parley.Feed, err error) {
	defer s.observe("FeedEvents", time.Now(), &err)
	return s.Store.FeedEvents(ctx, a1, a2, a3)
}

func (s *store) Fetch(ctx context.Context, a1 parley.Principal, a2 string, a3 int64) (_ parley.Event, err error) {
	defer s.observe("Fetch", time.Now(), &err)
	return s.Store.Fetch(ctx, a1, a2, a3)
}

func (s *store) FinishAudit(ctx context.Context, a1 int64, a2 string) (err error) {
	defer s.observe("FinishAudit", time.Now(), &err)
	return s.Store.FinishAudit(ctx, a1, a2)
}

func (s *store) FinishExport(ctx context.Context, a1 string, a2 string, a3 string, a4 int64, a5 time.Duration) (err error) {
	defer s.observe("FinishExport", time.Now(), &err)
	return s.Store.FinishExport(ctx, a1, a2, a3, a4, a5)
}

func (s *store) Heads(ctx context.Context, a1 []string) (_ []parley.Head, err error) {
	defer s.observe("Heads", time.Now(), &err)
	return s.Store.Heads(ctx, a1)
}

func (s *store) Hook(ctx context.Context, a1 string) (_ parley.Hook, err error) {
	defer s.observe("Hook", time.Now(), &err)
	return s.Store.Hook(ctx, a1)
}

func (s *store) Hooks(ctx context.Context) (_ []parley.Hook, err error) {
	defer s.observe("Hooks", time.Now(), &err)
	return s.Store.Hooks(ctx)
}

func (s *store) Joined(ctx context.Context, a1 string) (_ []parley.Head, err error) {
	defer s.observe("Joined", time.Now(), &err)
	return s.Store.Joined(ctx, a1)
}

func (s *store) Login(ctx context.Context, a1 parley.LoginRequest) (_ parley.Session, err error) {
	defer s.observe("Login", time.Now(), &err)
	return s.Store.Login(ctx, a1)
}

func (s *store) Logout(ctx context.Context, a1 string) (err error) {
	defer s.observe("Logout", time.Now(), &err)
	return s.Store.Logout(ctx, a1)
}

func (s *store) OpenPeriods(ctx context.Context, a1 []string) (_ []parley.OpenPeriod, err error) {
	defer s.observe("OpenPeriods", time.Now(), &err)
	return s.Store.OpenPeriods(ctx, a1)
}

func (s *store) Ping(ctx context.Context) (err error) {
	defer s.observe("Ping", time.Now(), &err)
	return s.Store.Ping(ctx)
}

func (s *store) Purge(ctx context.Context, a1 string) (_ parley.PurgeResult, err error) {
	defer s.observe("Purge", time.Now(), &err)
	return s.Store.Purge(ctx, a1)
}

func (s *store) Read(ctx context.Context, a1 parley.Principal, a2 string, a3 int64) (_ int64, err error) {
	defer s.observe("Read", time.Now(), &err)
	return s.Store.Read(ctx, a1, a2, a3)
}

func (s *store) Recall(ctx context.Context, a1 parley.Principal, a2 parley.RecallRequest) (_ parley.Recalled, err error) {
	defer s.observe("Recall", time.Now(), &err)
	return s.Store.Recall(ctx, a1, a2)
}

func (s *store) RecordShard(ctx context.Context, a1 string, a2 ...parley.ExportShard) (err error) {
	defer s.observe("RecordShard", time.Now(), &err)
	return s.Store.RecordShard(ctx, a1, a2...)
}

func (s *store) RemoveMember(ctx context.Context, a1 parley.Principal, a2 string, a3 string) (_ parley.MemberChange, err error) {
	defer s.observe("RemoveMember", time.Now(), &err)
	return s.Store.RemoveMember(ctx, a1, a2, a3)
}

func (s *store) RevokeExport(ctx context.Context, a1 string) (_ parley.ExportJob, err error) {
	defer s.observe("RevokeExport", time.Now(), &err)
	return s.Store.RevokeExport(ctx, a1)
}

func (s *store) Rollback(ctx context.Context, a1 string, a2 int64) (_ parley.RollbackResult, err error) {
	defer s.observe("Rollback", time.Now(), &err)
	return s.Store.Rollback(ctx, a1, a2)
}

func (s *store) Send(ctx context.Context, a1 parley.Principal, a2 parley.SendRequest) (_ parley.Sent, err error) {
	defer s.observe("Send", time.Now(), &err)
	return s.Store.Send(ctx, a1, a2)
}

func (s *store) SetRetention(ctx context.Context, a1 string, a2 parley.Retention) (err error) {
	defer s.observe("SetRetention", time.Now(), &err)
	return s.Store.SetRetention(ctx, a1, a2)
}

func (s *store) SetUserDisabled(ctx context.Context, a1 string, a2 bool) (err error) {
	defer s.observe("SetUserDisabled", time.Now(), &err)
	return s.Store.SetUserDisabled(ctx, a1, a2)
}

func (s *store) SweepTokens(ctx context.Context, a1 int) (_ int, err error) {
	defer s.observe("SweepTokens", time.Now(), &err)
	return s.Store.SweepTokens(ctx, a1)
}

func (s *store) Sync(ctx context.Context, a1 parley.Principal, a2 parley.SyncRequest) (_ parley.Page, err error) {
	defer s.observe("Sync", time.Now(), &err)
	return s.Store.Sync(ctx, a1, a2)
}

func (s *store) User(ctx context.Context, a1 string) (_ parley.User, err error) {
	defer s.observe("User", time.Now(), &err)
	return s.Store.User(ctx, a1)
}

func (s *store) AdminConvs(ctx context.Context, a1 parley.AdminQuery) (_ parley.AdminPage[parley.AdminConv], err error) {
	defer s.observe("AdminConvs", time.Now(), &err)
	return s.Store.AdminConvs(ctx, a1)
}

func (s *store) AdminExports(ctx context.Context, a1 parley.AdminQuery) (_ parley.AdminPage[parley.AdminExport], err error) {
	defer s.observe("AdminExports", time.Now(), &err)
	return s.Store.AdminExports(ctx, a1)
}

func (s *store) AdminHooks(ctx context.Context, a1 parley.AdminQuery) (_ parley.AdminPage[parley.Hook], err error) {
	defer s.observe("AdminHooks", time.Now(), &err)
	return s.Store.AdminHooks(ctx, a1)
}

func (s *store) AdminUsers(ctx context.Context, a1 parley.AdminQuery) (_ parley.AdminPage[parley.AdminUser], err error) {
	defer s.observe("AdminUsers", time.Now(), &err)
	return s.Store.AdminUsers(ctx, a1)
}

func (s *store) ClaimRetention(ctx context.Context, a1 time.Duration, a2 int) (_ []string, err error) {
	defer s.observe("ClaimRetention", time.Now(), &err)
	return s.Store.ClaimRetention(ctx, a1, a2)
}

func (s *store) ConvMembers(ctx context.Context, a1 string) (_ []string, err error) {
	defer s.observe("ConvMembers", time.Now(), &err)
	return s.Store.ConvMembers(ctx, a1)
}

func (s *store) SetPassword(ctx context.Context, a1 string, a2 string) (err error) {
	defer s.observe("SetPassword", time.Now(), &err)
	return s.Store.SetPassword(ctx, a1, a2)
}

func (s *store) ExportCounts(ctx context.Context) (_ map[parley.ExportState]int64, err error) {
	defer s.observe("ExportCounts", time.Now(), &err)
	return s.Store.ExportCounts(ctx)
}
