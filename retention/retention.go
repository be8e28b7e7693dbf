// Package retention applies each conversation's retention policy by
// itself: a Worker runs one round per interval, claims the conversations
// with a policy that no gateway has purged in this round
// (parley.Admin.ClaimRetention), and purges each (parley.Store.Purge, which
// deletes events and writes their tombstones in one transaction).
//
// Every purge is audited as the system: an entry with operator
// SystemOperator and action "conv.purge" is written as pending before the
// purge and finished with its outcome after it, as the operations API does
// for an operator's purge; when the entry cannot be written, the purge is
// not done.
//
// Several gateways on one database may each run a Worker: rounds are
// windows of the interval on the database clock, and the claim gives each
// conversation to exactly one of them per round. (PostgreSQL also
// serialises two purges of one conversation on its row lock; SQLite has one
// writer.) Gateways that share a database should run the same interval.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/parleychat/parley"
)

// SystemOperator is the audit operator of purges the worker runs.
const SystemOperator = "system:retention"

// DefaultEvery is the default interval of rounds (serve --retention-every).
const DefaultEvery = 10 * time.Minute

// claimBatch is how many conversations one claim takes: small enough that
// a gateway that stops mid-round strands few until the next round, large
// enough that a round costs few claims.
const claimBatch = 50

// Store is what the worker needs of parley.Store.
type Store interface {
	ClaimRetention(ctx context.Context, every time.Duration, limit int) ([]string, error)
	Purge(ctx context.Context, conv string) (parley.PurgeResult, error)
	AppendAudit(ctx context.Context, e parley.AuditEntry) (parley.AuditEntry, error)
	FinishAudit(ctx context.Context, id int64, outcome string) error
}

// Options configure a Worker.
type Options struct {
	Store Store
	// Every is the length of a round; Run returns at once when it is not
	// positive (retention off).
	Every time.Duration
	// Timeout bounds each store call (0: 10s).
	Timeout time.Duration
	Log     *slog.Logger
	// OnPurge, when set, sees every purge the worker ran and its error
	// (metrics).
	OnPurge func(parley.PurgeResult, error)
}

// Worker runs retention rounds.
type Worker struct {
	o Options
}

// New returns a worker.
func New(o Options) *Worker {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Worker{o: o}
}

// Run runs rounds until ctx ends. It looks twice per interval (every
// Every/2), so each window of the database clock gets a look from every
// gateway even when a tick lands near a window's edge; the claim keeps it
// to one purge per conversation and round. A round that fails is logged;
// the next tick tries again.
func (w *Worker) Run(ctx context.Context) {
	if w.o.Every <= 0 {
		return
	}
	t := time.NewTicker(max(w.o.Every/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := w.Round(ctx); err != nil && ctx.Err() == nil {
				w.o.Log.Warn("retention round incomplete; the next round retries", "err", err)
			}
		}
	}
}

// Round claims and purges conversations until no claim is left in the
// current round, and returns how many it purged. It goes on past a
// conversation whose purge failed and returns the errors joined; a claim
// that fails ends the round.
func (w *Worker) Round(ctx context.Context) (int, error) {
	var errs []error
	n := 0
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
		ids, err := w.o.Store.ClaimRetention(cctx, w.o.Every, claimBatch)
		cancel()
		if err != nil {
			return n, errors.Join(append(errs, fmt.Errorf("claim: %w", err))...)
		}
		if len(ids) == 0 {
			break
		}
		for _, id := range ids {
			if err := w.purge(ctx, id); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// purge purges one conversation between its pending and finished audit
// entries.
func (w *Worker) purge(ctx context.Context, conv string) error {
	params, _ := json.Marshal(map[string]string{"id": conv, "round": w.o.Every.String()})
	e := parley.AuditEntry{Operator: SystemOperator, Action: "conv.purge", Target: conv, Params: string(params), Outcome: parley.AuditPending}
	actx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	pending, err := w.o.Store.AppendAudit(actx, e)
	cancel()
	if err != nil {
		return fmt.Errorf("purge %s: audit before: %w", conv, err)
	}
	pctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	res, err := w.o.Store.Purge(pctx, conv)
	cancel()
	if w.o.OnPurge != nil {
		w.o.OnPurge(res, err)
	}
	outcome := "ok"
	if err != nil {
		outcome = string(parley.ErrorCode(err))
	}
	// The record is finished even when ctx ended with the purge.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.o.Timeout)
	ferr := w.o.Store.FinishAudit(fctx, pending.ID, outcome)
	cancel()
	if ferr != nil {
		w.o.Log.Error("audit entry left pending", "id", pending.ID, "action", e.Action, "target", conv, "outcome", outcome, "err", ferr)
	}
	if err != nil {
		return fmt.Errorf("purge %s: %w", conv, err)
	}
	if res.Deleted > 0 {
		w.o.Log.Info("retention purge", "conv", conv, "deleted", res.Deleted, "tombstones", res.Tombstones, "min_seq", res.MinSeq)
	}
	return nil
}
