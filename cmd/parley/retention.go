package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/retention"
)

// retentionFlags are serve's retention worker flags (docs/protocol.md,
// "Retention worker").
type retentionFlags struct {
	every time.Duration
}

func (f *retentionFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.every, "retention-every", retention.DefaultEvery, "how often each conversation's retention policy is applied (purge, audited as system:retention); 0 turns the worker off; gateways on one database should agree")
}

func (f *retentionFlags) check() error {
	if f.every != 0 && f.every < 100*time.Millisecond {
		return usagef("--retention-every %s: want 0 (off) or at least 100ms", f.every)
	}
	return nil
}

// run runs the retention worker until ctx ends (at once when it is off).
// Each successful purge is counted in parley_retention_purges_total.
func (f *retentionFlags) run(ctx context.Context, store retention.Store, timeout func() time.Duration, log *slog.Logger, m *metrics.Metrics) {
	if f.every <= 0 {
		log.Info("retention worker off (--retention-every 0)")
		return
	}
	retention.New(retention.Options{
		Store: store, Every: f.every, Timeout: timeout(), Log: log,
		OnPurge: func(res parley.PurgeResult, err error) {
			if err == nil {
				m.RetentionPurge(int(res.Deleted))
			}
		},
	}).Run(ctx)
}
