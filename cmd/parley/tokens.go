package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/parleychat/parley"
)

// tokenFlags are serve's token lifetime flags (docs/protocol.md, "Token
// lifetime").
type tokenFlags struct {
	idle  time.Duration
	max   time.Duration
	grace time.Duration
	sweep time.Duration
}

func (f *tokenFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.idle, "token-idle", parley.DefaultTokenIdle, "a device token unused this long stops working (UNAUTHENTICATED) and is deleted")
	fs.DurationVar(&f.max, "token-max", parley.DefaultTokenMax, "a device token this old stops working (UNAUTHENTICATED) however busy, and is deleted: the device logs in again")
	fs.DurationVar(&f.grace, "stale-install-grace", parley.DefaultStaleInstallGrace, "how long a replaced install's tokens answer STALE_INSTALL before they are deleted")
	fs.DurationVar(&f.sweep, "token-sweep", 10*time.Minute, "how often expired tokens are deleted")
}

func (f *tokenFlags) check() error {
	if f.idle < 2*time.Minute {
		return usagef("--token-idle %s: want at least 2m", f.idle)
	}
	if f.max < f.idle {
		return usagef("--token-max %s: want at least --token-idle (%s)", f.max, f.idle)
	}
	if f.grace <= 0 {
		return usagef("--stale-install-grace %s: want more than 0", f.grace)
	}
	if f.sweep < time.Second {
		return usagef("--token-sweep %s: want at least 1s", f.sweep)
	}
	return nil
}

// options returns the store options the flags set.
func (f *tokenFlags) options(o parley.Options) parley.Options {
	o.TokenIdle, o.TokenMax, o.StaleInstallGrace = f.idle, f.max, f.grace
	return o
}

// Bounds of one token sweep: at most sweepBatch rows per store call (one
// short transaction), at most sweepBatches calls per run, each call with a
// deadline. A backlog larger than a run is worked off over the next runs.
const (
	sweepBatch   = 1000
	sweepBatches = 10
	sweepTimeout = 30 * time.Second
)

// tokenSweeper is what the token sweep needs of the store.
type tokenSweeper interface {
	SweepTokens(ctx context.Context, limit int) (int, error)
}

// sweepTokens deletes expired tokens (parley.Store.SweepTokens) at once and
// then every `every` until ctx ends. Authenticate deletes an expired token
// it is shown; this catches the tokens nobody presents again. A failed
// call is logged and the run ends: the next run tries again.
func sweepTokens(ctx context.Context, store tokenSweeper, every time.Duration, batch, batches int, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		total := 0
		for range batches {
			cctx, cancel := context.WithTimeout(ctx, sweepTimeout)
			n, err := store.SweepTokens(cctx, batch)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("token sweep failed", "err", err)
				}
				break
			}
			total += n
			if n < batch {
				break
			}
		}
		if total > 0 {
			log.Info("expired tokens deleted", "tokens", total)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
