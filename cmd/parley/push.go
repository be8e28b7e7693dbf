package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/webpush"
)

// pushFlags tune the Web Push worker (webpush.Worker).
type pushFlags struct {
	delay time.Duration
}

func (f *pushFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.delay, "push-delay", webpush.DefaultDelay, "how long after a message is committed its Web Push notifications are decided: devices that acknowledged it by then are not pushed")
}

// newPusher makes the push worker of this gateway, with its counts on
// /metrics. key reads the VAPID key (app.Service.VAPIDKey).
func newPusher(f pushFlags, store webpush.Targets, key func(context.Context) (*webpush.Key, error), cfg func() *config.Config,
	log *slog.Logger, m *metrics.Metrics) *webpush.Worker {
	w := webpush.NewWorker(webpush.WorkerOptions{
		Store: store, Key: key, Delay: f.delay, Log: log,
		Allow:   func() []string { return cfg().PushAllowEndpoints() },
		Subject: func() string { return cfg().PushSubject() },
		Timeout: cfg().StoreTimeout(),
	})
	m.GaugeFunc(metrics.NamePushQueued, "Sent messages waiting for their Web Push notifications (the push delay).", func() float64 { return float64(w.Counts().Queued) })
	m.LabeledCounterFunc(metrics.NamePushes, "Web Push notifications by outcome: sent (the push service accepted it), failed (refused address, a 4xx, attempts spent), removed (the push service said the subscription is gone: 404 or 410), retried (attempts after the first), dropped (messages whose notifications were dropped: the queue was full).",
		"outcome", pushOutcomes, func() (map[string]float64, bool) {
			c := w.Counts()
			return map[string]float64{"sent": float64(c.Sent), "failed": float64(c.Failed), "removed": float64(c.Removed),
				"retried": float64(c.Retried), "dropped": float64(c.Dropped)}, true
		})
	return w
}

var pushOutcomes = []string{"sent", "failed", "removed", "retried", "dropped"}

// Every store is what the push worker reads and writes.
var _ webpush.Targets = parley.Store(nil)
