package parley

import "context"

// SendBatcher is group commit: a store that implements it commits several
// sends in one transaction. Both stores do; their Send goes through a
// sendqueue.Queue, which batches concurrent calls, and the contract suite
// calls SendBatch directly so that a batch's content is known.
//
// SendBatch runs items in their order, every item of the call, of whatever
// conversations, in one transaction (PostgreSQL locks each distinct
// conversation row once, all of them before the first item and in id
// order, so that two batches never deadlock; SQLite has one writer). Each
// item keeps its own checks in the order of Store.Send — request key
// (replay or IDEMPOTENCY_MISMATCH), tombstone (ORIGINAL_EXPIRED), open
// period (NOT_MEMBER) — and its own outcome in the result of the same
// index: a replay, a rejection or a malformed item never changes what the
// others get, and an item sees the items before it (the same key twice in
// one batch: the second is a replay or a mismatch). New items of a
// conversation get consecutive seqs in item order, and their Sent carries
// At as Store.Send's does. The results come back after the commit. A
// failure that is not an item's own outcome (a lost connection, a fault
// point, a failed commit) fails every item of the call with an error of
// unknown outcome, and nothing of the call is committed.
type SendBatcher interface {
	SendBatch(ctx context.Context, items []BatchSend) []BatchResult
}

// BatchSend is one send of a batch.
type BatchSend struct {
	P   Principal
	Req SendRequest
}

// BatchResult is the outcome of one BatchSend: what Store.Send would have
// returned for it.
type BatchResult struct {
	Sent Sent
	Err  error
}
