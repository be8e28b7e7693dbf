package parley

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"
)

// Exports (docs/design.md): export jobs and their durable snapshots. The store
// keeps the jobs, the snapshots and the shard records; the export package
// writes the files.
//
// A job's snapshot is recorded in the transaction that creates the job: per
// conversation of the scope in which the caller has a membership period, the
// head (the last committed seq) and the caller's periods cut at that head.
// Per conversation, seqs are assigned under the conversation row lock, so a
// committed head n means every stored seq up to n is committed: the snapshot
// reads the same after any crash, on PostgreSQL too. While a job is queued or
// running it pins its snapshot: a purge does not delete events at or above
// the lowest seq the job may export (PinnedCut), and a rollback below a
// job's head fails the job (ExportRolledBack). A job that is done no longer
// needs the log: its artifact holds the bytes.
//
// Lease owners are opaque strings (a worker's id); a call that names an
// owner whose lease has ended or was taken over answers ErrLeaseLost and
// changes nothing.
type Exports interface {
	// CreateExport creates a queued job for the caller, or replays the job
	// of the same key. One transaction, in this order: INVALID_ARGUMENT (key
	// or scope) → the caller's job with r.Key: same scope is a replay
	// (Replayed true, the job as it is now), another scope is
	// IDEMPOTENCY_MISMATCH → a "conv:<id>" scope whose conversation does not
	// exist or in which the caller never had a period: NOT_MEMBER → the
	// caller has a live artifact of the same scope that is still current
	// (below; unless r.NoReuse): that job, unchanged, with Replayed and
	// Reused set → the
	// caller has r.MaxActive or more queued or running jobs (when
	// r.MaxActive > 0): RATE_LIMITED → insert the job (with r.MaxKept,
	// which FinishExport applies) and its snapshot.
	// Keys are per user: two users with one key get two jobs.
	//
	// Reuse: a live artifact is a done job of the caller whose ExpiresAt
	// has not passed. It is current when a new snapshot of the scope would
	// export the same events: the conversations in which the caller has a
	// period are those of its snapshot (none newly visible), and in each of
	// them the epoch and min_seq are those recorded (no rollback, no purge)
	// and no seq above the recorded head lies in one of the caller's
	// periods (no new event the caller may see; events a former member
	// cannot see do not count, so reuse tells nobody of them). Only the
	// newest live artifact of the scope is considered: if an older one is
	// current, so is every later one. r.Key is not recorded for a reuse:
	// the same key later replays nothing, and reuses again only while the
	// artifact is still current. A reuse does not extend ExpiresAt.
	CreateExport(ctx context.Context, p Principal, r ExportRequest) (ExportJob, error)

	// ExportJob returns a job whatever its owner (callers compare User).
	// Errors: NOT_FOUND (ErrExportNotFound, for a malformed id too).
	ExportJob(ctx context.Context, id string) (ExportJob, error)

	// ExportJobs returns, in one read, the jobs among ids that exist, in
	// id order, whatever their owners; a missing or malformed id is left
	// out (the export janitor asks for every job that has files).
	ExportJobs(ctx context.Context, ids []string) ([]ExportJob, error)

	// ExportCounts returns how many jobs of every user are in each state,
	// in one read (the metric parley_export_jobs{state}); a state with no
	// job is absent.
	ExportCounts(ctx context.Context) (map[ExportState]int64, error)

	// ClaimExport leases one claimable job to owner until the database
	// clock plus lease: the oldest queued job whose NotBefore has passed,
	// or a running job whose lease has ended (its worker died); on
	// PostgreSQL with FOR UPDATE SKIP LOCKED, so two workers never claim
	// one job. The job becomes running with Attempts one higher. ok is
	// false when nothing is claimable.
	ClaimExport(ctx context.Context, owner string, lease time.Duration) (job ExportJob, ok bool, err error)

	// ExportSnapshot returns a job's snapshot in conversation id order:
	// each conversation's head, the caller's periods cut at the head, and
	// the number of message events the job exports from it. It reads the
	// same while the job pins its snapshot (a purge after it is done may
	// lower Messages). Errors: NOT_FOUND.
	ExportSnapshot(ctx context.Context, id string) ([]ExportConv, error)

	// ExportEvents returns the message events of conv that job id exports
	// with seq > after, ascending, at most limit (capped at MaxPage): seq
	// at most the snapshot head and inside one of the snapshot periods.
	// A message whose recall has a seq at or below the head comes with an
	// empty body and Recalled set; one recalled later comes as it was.
	// Every message carries Derived as the job's user read it at the
	// snapshot (Decorate with AsOf the head, over the edit, reaction and
	// reply events with seq at most the head inside the snapshot periods),
	// with its ReplyTo, and its Mentions unless recalled: a re-read gives
	// the same events.
	// Errors: INVALID_ARGUMENT, NOT_FOUND (no such job or conversation in
	// its snapshot).
	ExportEvents(ctx context.Context, id, conv string, after int64, limit int) ([]Event, error)

	// ExtendExport renews owner's lease on a running job until the
	// database clock plus lease and records the job's shard total.
	// Errors: ErrLeaseLost, NOT_FOUND.
	ExtendExport(ctx context.Context, owner, id string, total int, lease time.Duration) error

	// RecordShard stores the records of written shards of one job, at
	// most MaxShardBatch, in one transaction: a record replaces one of the
	// same index, and the job's Done grows by the number of indexes that
	// had no record, so Done stays the number of recorded shards without
	// recounting them (a worker records shards in batches; a job of a
	// million messages has 5,000). All or nothing: a batch with a
	// malformed record, records of two jobs or one index twice stores
	// nothing. Errors: INVALID_ARGUMENT (no record too), ErrLeaseLost,
	// NOT_FOUND.
	RecordShard(ctx context.Context, owner string, shards ...ExportShard) error

	// ExportShards returns a job's shard records by index. Errors:
	// INVALID_ARGUMENT, NOT_FOUND.
	ExportShards(ctx context.Context, id string) ([]ExportShard, error)

	// FinishExport marks owner's running job done with its artifact's
	// sha256 (hex) and size; it expires after keep (database clock). When
	// the job was created with MaxKept > 0, the same transaction expires
	// the user's other done jobs beyond MaxKept - 1, those finished first
	// going first, so the user keeps at most MaxKept live artifacts
	// (downloads of the expired ones answer 410; the janitor deletes their
	// files). A user's finishes are serialised, so two finishing together
	// still leave at most MaxKept.
	// Errors: INVALID_ARGUMENT, ErrLeaseLost, NOT_FOUND.
	FinishExport(ctx context.Context, owner, id, sha256 string, bytes int64, keep time.Duration) error

	// RecordExportFiles records the files archive of owner's running job
	// (its sha256 in hex and its size) before FinishExport marks the job
	// done; sha256 "" and bytes 0 clear it (a job whose lines attach no
	// file has none). An attempt that records it and then fails leaves it
	// for the next attempt to replace. Errors: INVALID_ARGUMENT,
	// ErrLeaseLost, NOT_FOUND.
	RecordExportFiles(ctx context.Context, owner, id, sha256 string, bytes int64) error

	// FailExport ends owner's attempt at a running job: with retryAfter > 0
	// the job is queued again, claimable after retryAfter (database clock),
	// with reason kept in Error; with retryAfter <= 0 it is failed for good.
	// Errors: ErrLeaseLost, NOT_FOUND.
	FailExport(ctx context.Context, owner, id, reason string, retryAfter time.Duration) error

	// RevokeExport revokes a job in any state but revoked and expired
	// (downloads answer 410 from then on; a worker running it loses its
	// lease). Revoking a revoked job is a no-op. Errors: INVALID_ARGUMENT,
	// NOT_FOUND.
	RevokeExport(ctx context.Context, id string) (ExportJob, error)

	// ExpireExports marks expired every done job whose ExpiresAt has passed
	// (database clock) and returns the ids it changed.
	ExpireExports(ctx context.Context) ([]string, error)

	// ExportSigningKey returns the deployment's export link signing key:
	// its id (ExportSigningKeyID) and ExportSigningKeySize random bytes,
	// created on the first call. Every caller on one database gets the same
	// key, concurrent first calls included (insert if absent, then read),
	// so a link one gateway signs verifies on every other. The key is a
	// secret: callers never log it.
	ExportSigningKey(ctx context.Context) (id string, key []byte, err error)
}

// The store-kept export link signing key.
const (
	ExportSigningKeyID   = "store"
	ExportSigningKeySize = 32
)

// ExportState is the state of an export job.
type ExportState string

const (
	ExportQueued  ExportState = "queued"
	ExportRunning ExportState = "running"
	ExportDone    ExportState = "done"
	ExportFailed  ExportState = "failed"
	ExportRevoked ExportState = "revoked"
	ExportExpired ExportState = "expired"
)

// Pinning reports whether a job in state s pins its snapshot.
func (s ExportState) Pinning() bool { return s == ExportQueued || s == ExportRunning }

// Export bounds and defaults.
const (
	ExportShardSize       = 200 // message events per shard
	MaxShardBatch         = 256 // shard records per RecordShard call
	DefaultExportKeep     = 7 * 24 * time.Hour
	DefaultExportActive   = 2  // queued or running jobs per user
	DefaultExportKept     = 10 // live artifacts per user
	MaxExportReason       = 512
	ExportScopeAll        = "all"
	ExportScopeConvPrefix = "conv:"
)

// ExportRequest is the input of Store.CreateExport.
type ExportRequest struct {
	Key       string // the Idempotency-Key, 1–64 characters
	Scope     string // "all" or "conv:<id>"
	MaxActive int    // per-user limit of queued and running jobs; <= 0: none
	MaxKept   int    // per-user limit of live artifacts once this job is done; <= 0: none
	// NoReuse makes a new job even when a live artifact of the scope is
	// current: for tools and tests that compare two runs of one snapshot.
	// POST /exports never sets it.
	NoReuse bool
}

// ExportJob is an export job.
type ExportJob struct {
	ID     string
	User   string
	Key    string
	Scope  string
	State  ExportState
	Error  string // why the job failed (or why its last attempt failed)
	Done   int    // shards recorded
	Total  int    // shards planned; 0 until a worker planned the job
	SHA256 string // hex sha256 of the artifact when done
	Bytes  int64  // artifact size when done
	// FilesSHA256 and FilesBytes describe the job's files archive (the
	// bytes of the files its lines attach), recorded with
	// RecordExportFiles; "" and 0 when it has none.
	FilesSHA256 string
	FilesBytes  int64
	Attempts    int  // claims so far
	Replayed    bool // CreateExport: answered from an earlier request
	Reused      bool // CreateExport: a live, current artifact of another key (Replayed is set too)
	CreatedAt   time.Time
	ExpiresAt   time.Time // zero until done
	LeaseOwner  string
	LeaseUntil  time.Time
	NotBefore   time.Time // a queued job is claimable from then on
}

// ExportConv is one conversation of a job's snapshot.
type ExportConv struct {
	Conv     string
	Head     int64   // last seq the job exports from
	Periods  Periods // the caller's periods, cut at Head, ascending
	Messages int64   // message events the job exports from this conversation
}

// ExportShard is the record of one written shard: shards are numbered from
// 0 in export order; a shard never spans two conversations and holds the
// ExportShardSize (or, last in its conversation, fewer) events after After.
type ExportShard struct {
	Job    string
	Index  int
	Conv   string
	After  int64  // the shard holds events with seq > After
	Last   int64  // seq of its last event
	Count  int    // events in it
	SHA256 string // hex sha256 of its bytes
}

// ErrLeaseLost answers a worker whose lease on a job ended, was taken over,
// or whose job was revoked: it must stop working on the job.
var ErrLeaseLost = &Error{Code: CodeUnavailable, Msg: "export: the lease on this job is lost"}

// ErrExportNotFound answers a job id that names no job of the caller: a
// foreign job and a missing one get the same answer.
var ErrExportNotFound = &Error{Code: CodeNotFound, Msg: "export job not found"}

// ExportRolledBack is the Error of a job a rollback failed.
func ExportRolledBack(conv string, toSeq int64) string {
	return "conversation " + conv + " was rolled back to seq " + strconv.FormatInt(toSeq, 10) + " after this export's snapshot; create a new export"
}

// ValidateExport checks a CreateExport request and returns the scope's
// conversation ("" for all).
func ValidateExport(r ExportRequest) (conv string, err error) {
	if err := CheckExportKey(r.Key); err != nil {
		return "", err
	}
	switch {
	case r.Scope == ExportScopeAll:
		return "", nil
	case strings.HasPrefix(r.Scope, ExportScopeConvPrefix):
		conv = strings.TrimPrefix(r.Scope, ExportScopeConvPrefix)
		if !ValidConvID(conv) {
			return "", Errorf(CodeInvalidArgument, "scope conv:<id> names no valid conversation id")
		}
		return conv, nil
	default:
		return "", Errorf(CodeInvalidArgument, `scope must be "all" or "conv:<id>"`)
	}
}

// CheckExportKey checks an export's Idempotency-Key: 1–64 characters of
// valid UTF-8 without NUL, like a cmid.
func CheckExportKey(key string) error {
	if key == "" {
		return Errorf(CodeInvalidArgument, "Idempotency-Key is required")
	}
	if err := CheckCMID(key); err != nil {
		return Errorf(CodeInvalidArgument, "Idempotency-Key must be 1–64 characters of valid UTF-8 without NUL")
	}
	return nil
}

// CheckExportID checks the shape of a job id: a malformed id names no job,
// so it is ErrExportNotFound like an unknown one.
func CheckExportID(id string) error {
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
	}) {
		return ErrExportNotFound
	}
	return nil
}

// CheckExportReplay answers a CreateExport whose key the caller used before.
func CheckExportReplay(storedScope, scope string) error {
	if storedScope != scope {
		return Errorf(CodeIdempotencyMismatch, "this Idempotency-Key was already used for scope %q; the original job is unchanged", storedScope)
	}
	return nil
}

// CheckExportActive answers a CreateExport whose caller already has active
// queued or running jobs.
func CheckExportActive(active, max int) error {
	if max > 0 && active >= max {
		return Errorf(CodeRateLimited, "you have %d export jobs in progress (the limit is %d); wait for one to finish", active, max)
	}
	return nil
}

// ExportShardTotal plans a job's shards from its snapshot: per conversation in
// snapshot order, ceil(Messages/ExportShardSize) shards.
func ExportShardTotal(convs []ExportConv) int {
	n := 0
	for _, c := range convs {
		n += int((c.Messages + ExportShardSize - 1) / ExportShardSize)
	}
	return n
}

// PinnedCut lowers a purge's cut (the last seq it deletes) below pinnedFrom,
// the lowest seq a queued or running export of the conversation may export
// (0: none pins it), so a purge never changes an export's bytes.
func PinnedCut(cut, pinnedFrom int64) int64 {
	if pinnedFrom > 0 && cut >= pinnedFrom {
		return pinnedFrom - 1
	}
	return cut
}

// CheckExportStep validates the arguments of the worker calls.
func CheckExportStep(owner, id string) error {
	if owner == "" {
		return Errorf(CodeInvalidArgument, "owner is required")
	}
	return CheckExportID(id)
}

// CheckExportEvents validates the arguments of ExportEvents (a malformed
// job id is ErrExportNotFound).
func CheckExportEvents(id, conv string, after int64, limit int) error {
	if err := CheckExportID(id); err != nil {
		return err
	}
	return CheckFeed(conv, after, limit)
}

// CheckExportClaim validates the owner of ClaimExport.
func CheckExportClaim(owner string) error {
	if owner == "" {
		return Errorf(CodeInvalidArgument, "owner is required")
	}
	return nil
}

// CheckExportExtend validates the arguments of ExtendExport.
func CheckExportExtend(owner, id string, total int) error {
	if err := CheckExportStep(owner, id); err != nil {
		return err
	}
	if total < 0 {
		return Errorf(CodeInvalidArgument, "total must not be negative")
	}
	return nil
}

// CheckExportFinish validates the arguments of FinishExport: the artifact
// needs a lower-case hex sha256 and a size.
func CheckExportFinish(owner, id, sha256 string, bytes int64) error {
	if err := CheckExportStep(owner, id); err != nil {
		return err
	}
	if !validSHA256(sha256) || bytes < 0 {
		return Errorf(CodeInvalidArgument, "an artifact needs a lower-case hex sha256 and a size")
	}
	return nil
}

// CheckExportFiles validates the arguments of RecordExportFiles: a
// sha256 and a size, or "" and 0.
func CheckExportFiles(owner, id, sha256 string, bytes int64) error {
	if err := CheckExportStep(owner, id); err != nil {
		return err
	}
	if sha256 == "" && bytes == 0 {
		return nil
	}
	if !validSHA256(sha256) || bytes <= 0 {
		return Errorf(CodeInvalidArgument, "a files archive needs a lower-case hex sha256 and a size, or neither")
	}
	return nil
}

// validSHA256 reports whether s is a sha256 in lower-case hex.
func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CheckExportShard validates a shard record.
func CheckExportShard(s ExportShard) error {
	if err := CheckExportID(s.Job); err != nil {
		return err
	}
	if err := CheckConvID(s.Conv); err != nil {
		return err
	}
	if s.Index < 0 || s.Index > math.MaxInt32 || s.Count < 1 || s.Count > ExportShardSize || s.After < 0 || s.Last <= s.After || !validSHA256(s.SHA256) {
		return Errorf(CodeInvalidArgument, "malformed shard record")
	}
	return nil
}

// CheckExportShards validates the arguments of RecordShard: an owner, one
// to MaxShardBatch well-formed records of one job, each index once. It
// returns the job.
func CheckExportShards(owner string, shards []ExportShard) (job string, err error) {
	if len(shards) == 0 || len(shards) > MaxShardBatch {
		return "", Errorf(CodeInvalidArgument, "record 1 to %d shards at a time", MaxShardBatch)
	}
	job = shards[0].Job
	if err := CheckExportStep(owner, job); err != nil {
		return "", err
	}
	seen := make(map[int]bool, len(shards))
	for _, s := range shards {
		if err := CheckExportShard(s); err != nil {
			return "", err
		}
		if s.Job != job {
			return "", Errorf(CodeInvalidArgument, "shard records of one job at a time")
		}
		if seen[s.Index] {
			return "", Errorf(CodeInvalidArgument, "shard %d is recorded twice in one call", s.Index)
		}
		seen[s.Index] = true
	}
	return job, nil
}

// ExportReason caps a failure reason at MaxExportReason characters.
func ExportReason(reason string) string { return truncate(reason, MaxExportReason) }
