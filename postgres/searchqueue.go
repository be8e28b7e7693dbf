package postgres

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The search queue (migration 0019): a new message's index row is queued
// in its send's transaction, a heap row of search_queue with no index,
// and the store's mover moves queued rows into search_docs after the
// commit, in batches. Writing the indexed row in the send had doubled the
// send's write-ahead log (its GIN pending-list entries, primary key and
// walk index). A search matches the queued rows too (searchQueuedSQL),
// so every committed message is found at once.
//
// A batch is one statement (moveSQL): its rows deleted from the queue and
// inserted into search_docs in one transaction, so a row is in exactly one
// of the two in every snapshot, a mover that stops (a crash, Close) leaves
// its rows queued for the next, and no row is indexed twice (the primary
// key, and ON CONFLICT DO NOTHING should a row ever be there already).
// One move runs at a time (an advisory lock): the movers of several
// servers share one queue. Writers that delete index
// rows (recall, purge, rollback, rebuild) delete the queued ones first: a
// row a mover holds is waited for, and their next statement, on a fresh
// READ COMMITTED snapshot, finds it in search_docs.

// Defaults of the mover.
const (
	// moveAt is how many rows this server queues before its mover moves
	// them without waiting for the tick: the queue, which a search reads
	// whole, stays around this size.
	moveAt = 512
	// moveEvery is the longest a row this server queued waits for the
	// mover, and the tick at which it looks.
	moveEvery = 100 * time.Millisecond
	// sweepEvery is how often the mover looks at the queue though this
	// server queued nothing: rows left by a server that stopped, or queued
	// by one that does not move them.
	sweepEvery = 5 * time.Second
	// moveBatch is the most rows one statement moves.
	moveBatch = 2048
	// vacuumAfter is how many rows the mover moves before it vacuums the
	// queue: each moved row leaves a dead one that a search's scan of the
	// queue reads until a vacuum removes it (autovacuum looks once a
	// minute, by when a busy server has left hundreds of thousands).
	vacuumAfter = 4096
)

// moveLock is the advisory lock key a move holds ("parley.q" in ASCII):
// one mover at a time moves the queue, however many servers share it.
const moveLock int64 = 0x7061726c65792e71

// moveSQL moves at most $1 queued rows into search_docs and returns how
// many it took from the queue: none when another server's mover holds
// moveLock (it is moving them). The rows are not locked before they are
// deleted (FOR UPDATE would write a log record per row): a row that a
// recall or purge deletes meanwhile is skipped by the delete.
const moveSQL = `WITH m AS (
	DELETE FROM search_queue
	WHERE ctid = ANY (ARRAY(SELECT ctid FROM search_queue LIMIT $1))
		AND (SELECT pg_try_advisory_xact_lock($2))
	RETURNING conv_id, seq, sender_user, at, tsv),
i AS (
	INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
	SELECT conv_id, seq, seq, sender_user, at, tsv FROM m
	ON CONFLICT DO NOTHING)
SELECT count(*) FROM m`

// searchMover moves the search queue into search_docs in the background
// (DB.moveLoop), started by Open and stopped by Close.
type searchMover struct {
	queued atomic.Int64  // rows this server queued since the mover last looked
	full   chan struct{} // signalled when queued reaches at
	at     int64
	every  time.Duration
	sync   bool // tests: every write that queues moves at once, before it returns

	mu       sync.Mutex // one move at a time in this server (the loop, tests' sync moves)
	moved    int64      // rows moved since the last vacuum
	stop     context.CancelFunc
	done     chan struct{}
	log      *slog.Logger
	failures int // moves failed in a row
}

// startMover starts db's mover.
func (db *DB) startMover() {
	m := &db.mover
	m.full = make(chan struct{}, 1)
	m.at, m.every, m.log = moveAt, moveEvery, slog.Default()
	ctx, stop := context.WithCancel(context.Background())
	m.stop, m.done = stop, make(chan struct{})
	go db.moveLoop(ctx)
}

// stopMover stops db's mover and waits for it. Rows it did not move stay
// queued for the next.
func (db *DB) stopMover() {
	if db.mover.stop != nil {
		db.mover.stop()
		<-db.mover.done
	}
}

// queuedRows tells the mover that a committed write queued n rows.
func (db *DB) queuedRows(ctx context.Context, n int) {
	m := &db.mover
	if n == 0 {
		return
	}
	if m.sync {
		_ = db.moveQueue(ctx) // a failure leaves the rows queued, where searches find them
		return
	}
	if m.queued.Add(int64(n)) >= m.at {
		select {
		case m.full <- struct{}{}:
		default:
		}
	}
}

// moveLoop moves the queue when this server queued m.at rows, else at the
// next tick when it queued any, and every sweepEvery regardless.
func (db *DB) moveLoop(ctx context.Context) {
	m := &db.mover
	defer close(m.done)
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	var swept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.full:
		case now := <-tick.C:
			if m.queued.Load() == 0 && now.Sub(swept) < sweepEvery {
				continue
			}
		}
		swept = time.Now()
		m.queued.Store(0) // before the move: rows queued during it count for the next
		if err := db.moveQueue(ctx); err != nil && ctx.Err() == nil {
			m.queued.Add(1) // look again at the next tick
			if m.failures++; m.failures == 1 || m.failures%100 == 0 {
				m.log.Warn("postgres: search queue: move failed; rows stay queued and searchable", "err", err, "failures", m.failures)
			}
			continue
		}
		m.failures = 0
	}
}

// moveQueue moves every queued row into search_docs, a batch per
// statement, and vacuums the queue after every vacuumAfter rows moved.
func (db *DB) moveQueue(ctx context.Context) error {
	m := &db.mover
	m.mu.Lock()
	defer m.mu.Unlock()
	// A statement once started is finished, not cancelled by a stop (the
	// stop waits for it, bounded by moveTimeout); the next one is not
	// started after the stop.
	run := func(f func(context.Context) error) error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
		defer cancel()
		return f(sctx)
	}
	for ctx.Err() == nil {
		var n int64
		if err := run(func(sctx context.Context) error {
			return db.pool.QueryRow(sctx, moveSQL, moveBatch, moveLock).Scan(&n)
		}); err != nil {
			return err
		}
		if m.moved += n; m.moved >= vacuumAfter {
			if err := run(func(sctx context.Context) error {
				_, err := db.pool.Exec(sctx, `VACUUM search_queue`)
				return err
			}); err != nil {
				return err
			}
			m.moved = 0
		}
		if n < moveBatch {
			return nil
		}
	}
	return ctx.Err()
}

// moveTimeout bounds one statement of a move: what a stop waits for.
const moveTimeout = 30 * time.Second
