// Package app is Parley's application layer: one method per use case
// (send, recall, read, ack, search, membership changes, webhooks, exports,
// operations), each doing the whole of "write, then announce" in one
// place — check, call the store, build the notice, publish it after the
// commit, pass the lab fault point, count the metric. The transports
// (package gateway for WebSocket frames, package httpapi for HTTP routes)
// decode a request, call one method here under the request's deadline, and
// encode its answer; Explain turns any error into what a client may see,
// for both.
//
// Adding a write means one method here plus one frame decoder (wire) and
// one route (httpapi/routes.go) or frame case (gateway): see
// docs/architecture.md#the-path-of-a-send.
package app

import (
	"context"
	"log/slog"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
)

// Transports, as the metrics label them.
const (
	WebSocket = "ws"
	HTTP      = "http"
	Webhook   = "hook"
)

// Store is what the application layer needs of parley.Store: the writes
// and the reads the transports answer. Every parley.Store satisfies it.
type Store interface {
	Send(ctx context.Context, p parley.Principal, r parley.SendRequest) (parley.Sent, error)
	Recall(ctx context.Context, p parley.Principal, r parley.RecallRequest) (parley.Recalled, error)
	Edit(ctx context.Context, p parley.Principal, r parley.EditRequest) (parley.Edited, error)
	React(ctx context.Context, p parley.Principal, r parley.ReactRequest) (parley.Reacted, error)
	Versions(ctx context.Context, p parley.Principal, conv string, seq int64) ([]parley.Version, bool, error)
	Read(ctx context.Context, p parley.Principal, conv string, seq int64) (int64, error)
	Ack(ctx context.Context, p parley.Principal, conv string, seq int64) (int64, error)
	Sync(ctx context.Context, p parley.Principal, r parley.SyncRequest) (parley.Page, error)
	Fetch(ctx context.Context, p parley.Principal, conv string, seq int64) (parley.Event, error)
	Convs(ctx context.Context, p parley.Principal, r parley.ConvsRequest) (parley.ConvsPage, error)
	Search(ctx context.Context, p parley.Principal, r parley.SearchRequest) (parley.SearchPage, error)

	CreateConversation(ctx context.Context, p parley.Principal, c parley.NewConversation) (parley.Conversation, error)
	AddMember(ctx context.Context, p parley.Principal, conv, user string) (parley.MemberChange, error)
	RemoveMember(ctx context.Context, p parley.Principal, conv, user string) (parley.MemberChange, error)
	OpenDirect(ctx context.Context, p parley.Principal, user string) (parley.Conversation, bool, error)
	Directory(ctx context.Context, p parley.Principal, q parley.DirectoryQuery) (parley.AdminPage[parley.DirectoryEntry], error)
	Presence(ctx context.Context, p parley.Principal, users []string) ([]parley.Presence, error)

	Login(ctx context.Context, r parley.LoginRequest) (parley.Session, error)
	Logout(ctx context.Context, token string) error
	User(ctx context.Context, login string) (parley.User, error)
	CreateUser(ctx context.Context, u parley.NewUser) (parley.User, error)
	SetUserDisabled(ctx context.Context, id string, disabled bool) error

	SetDisplayName(ctx context.Context, id, name string) (parley.User, error)
	ChangePassword(ctx context.Context, p parley.Principal, keep, current, next string) error
	Sessions(ctx context.Context, p parley.Principal) ([]parley.DeviceSession, error)
	RevokeDevice(ctx context.Context, p parley.Principal, device string) error

	Conversation(ctx context.Context, id string) (parley.Conversation, error)
	SetRetention(ctx context.Context, conv string, r parley.Retention) error
	Purge(ctx context.Context, conv string) (parley.PurgeResult, error)
	Rollback(ctx context.Context, conv string, toSeq int64) (parley.RollbackResult, error)

	Hook(ctx context.Context, id string) (parley.Hook, error)
	CreateHook(ctx context.Context, h parley.NewHook) (parley.Hook, error)
	DeleteHook(ctx context.Context, id string) error

	CreateExport(ctx context.Context, p parley.Principal, r parley.ExportRequest) (parley.ExportJob, error)
	ExportJob(ctx context.Context, id string) (parley.ExportJob, error)
	RevokeExport(ctx context.Context, id string) (parley.ExportJob, error)

	CreateUpload(ctx context.Context, p parley.Principal, r parley.NewUpload) (parley.File, error)
	FinishUpload(ctx context.Context, p parley.Principal, id string, meta parley.FileMeta) (parley.File, error)
	File(ctx context.Context, p parley.Principal, id string) (parley.File, error)
	FileUsage(ctx context.Context, p parley.Principal) (parley.FileUsage, error)
	StaleFiles(ctx context.Context, q parley.StaleFiles) ([]parley.File, error)
	DeleteFile(ctx context.Context, id string, q parley.StaleFiles) (bool, error)
	FilesExist(ctx context.Context, ids []string) (map[string]bool, error)
	ReadyFiles(ctx context.Context, after string, limit int) ([]parley.File, error)

	PushKey(ctx context.Context) ([]byte, error)
	SavePushSubscription(ctx context.Context, p parley.Principal, s parley.NewPushSubscription) (parley.PushSubscription, bool, error)
	DeletePushSubscription(ctx context.Context, p parley.Principal, id string) error
	PushSettings(ctx context.Context, p parley.Principal) ([]parley.PushSetting, error)
	SetPushLevel(ctx context.Context, p parley.Principal, conv string, level parley.PushLevel) (parley.PushSetting, error)
}

// Metrics is what the application layer counts; *metrics.Metrics
// implements it (nil-safe).
type Metrics interface {
	// Send counts one send by transport and outcome (parley.SendOutcome).
	Send(transport, outcome string)
	// Search counts one search by transport and outcome ("ok" or the
	// error's code).
	Search(transport, outcome string)
}

// Revoker ends what a credential change made invalid, on this gateway at
// once and on every other through the bus. Every method must be safe to
// call from any goroutine and must not block on the network for long.
type Revoker interface {
	// RevokeToken ends the sockets that use token and forgets its cached
	// lookups (after a logout).
	RevokeToken(token string)
	// RevokeUser forgets the cached lookups of user's tokens and makes
	// every gateway re-check the user's sockets (a disable, a login that
	// replaced an install, a logout).
	RevokeUser(user string)
}

// Options configure a Service. Store is required; the rest may be nil.
type Options struct {
	Store Store
	// Publish announces a committed change to this gateway's fan-out and
	// to every other gateway (gateway.Hub.Publish). It is called after the
	// commit, never with a transaction open, and must not block.
	Publish func(parley.Notice)
	// Revoke ends sockets and cached lookups a credential change made
	// invalid.
	Revoke Revoker
	// KickExports wakes the export workers after a job is created (they
	// otherwise find it on their next poll).
	KickExports func()
	// Config returns the policy in force (hot-reloaded), read once per
	// request for the edit window, the @all limit and the directory
	// policy; nil means the documented defaults (config.Default).
	Config func() *config.Config
	// Blobs holds the bytes of uploaded files (blobdir.Dir, s3.Store);
	// nil: the file use cases answer UNAVAILABLE.
	Blobs parley.BlobStore
	// OnFileReady is called after an upload became ready (its row
	// committed), with the file, and again when an image's thumbnail is
	// asked for and missing; it must not block (the thumbnail jobs
	// enqueue it). Nil: nothing is called.
	OnFileReady func(parley.File)
	// OnSent is called after each send that committed a new message (not a
	// replay), with its conversation and seq: the push worker queues it. It
	// must not block. Nil: nothing is called.
	OnSent  func(conv string, seq int64)
	Metrics Metrics
	Log     *slog.Logger
}

// Service runs Parley's use cases. It holds no state of its own (the
// VAPID key it reads once aside): many
// requests may call one Service at once.
type Service struct {
	store     Store
	publish   func(parley.Notice)
	revoke    Revoker
	kick      func()
	config    func() *config.Config
	blobs     parley.BlobStore
	fileReady func(parley.File)
	onSent    func(conv string, seq int64)
	vapid     pushKey
	metrics   Metrics
	log       *slog.Logger
}

// New returns a Service over o.Store.
func New(o Options) *Service {
	s := &Service{store: o.Store, publish: o.Publish, revoke: o.Revoke, kick: o.KickExports, config: o.Config, blobs: o.Blobs,
		fileReady: o.OnFileReady, onSent: o.OnSent, metrics: o.Metrics, log: o.Log}
	if s.publish == nil {
		s.publish = func(parley.Notice) {}
	}
	if s.revoke == nil {
		s.revoke = noRevoker{}
	}
	if s.onSent == nil {
		s.onSent = func(string, int64) {}
	}
	if s.kick == nil {
		s.kick = func() {}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.config == nil {
		def := config.Default()
		s.config = func() *config.Config { return def }
	}
	return s
}

type noRevoker struct{}

func (noRevoker) RevokeToken(string) {}
func (noRevoker) RevokeUser(string)  {}

// countSend counts a send's outcome; a panic in the metrics never reaches
// the request.
func (s *Service) countSend(transport string, sent parley.Sent, err error) {
	if s.metrics == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("metric failed; request unaffected", "panic", v)
		}
	}()
	s.metrics.Send(transport, parley.SendOutcome(sent, err))
}
