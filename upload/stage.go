package upload

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/tus/tusd/v2/pkg/handler"
)

// Sweep removes the staged uploads that no client can continue: those
// untouched (no byte written) for Options.Expiry, and those whose file
// row is gone (the collector deleted it, or it was cancelled) or is ready
// (a finish that stopped before it removed them). It returns how many
// uploads it removed. The rows are not its business: the collector
// deletes unfinished uploads after its own grace period.
func (h *Handler) Sweep(ctx context.Context, now time.Time) (int, error) {
	entries, err := os.ReadDir(h.o.Dir)
	if err != nil {
		return 0, err
	}
	seen := map[string]time.Time{} // upload id → its staging's latest write
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		id, _, _ := strings.Cut(e.Name(), ".") // ID, ID.info, ID.sha256(.tmp)
		if info.ModTime().After(seen[id]) {
			seen[id] = info.ModTime()
		}
	}
	removed := 0
	for id, touched := range seen {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if now.Sub(touched) < h.o.Expiry && h.rowLive(ctx, id) {
			continue
		}
		unlock, ok := h.locks.tryLock(id)
		if !ok {
			continue // in use: not stale
		}
		h.removeStaged(id)
		unlock()
		removed++
	}
	return removed, nil
}

// rowLive reports whether staged upload id still has an unfinished row.
// Anything it cannot tell (no owner staged, the store failing) counts as
// live: only the expiry removes those.
func (h *Handler) rowLive(ctx context.Context, id string) bool {
	b, err := os.ReadFile(h.infoPath(id))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) // bytes without an info file: tusd cannot serve them
	}
	var info handler.FileInfo
	if json.Unmarshal(b, &info) != nil || info.MetaData["owner"] == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, h.o.StoreTimeout())
	defer cancel()
	f, err := h.o.Service.Upload(ctx, parley.Principal{User: info.MetaData["owner"]}, id)
	if parley.ErrorCode(err) == parley.CodeNotFound || err == nil && f.State == parley.FileReady {
		return false
	}
	return true
}

// Run sweeps every interval until ctx ends.
func (h *Handler) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n, err := h.Sweep(ctx, now); err != nil && ctx.Err() == nil {
				h.o.Log.Warn("upload: sweeping the staging directory failed", "err", err)
			} else if n > 0 {
				h.o.Log.Info("upload: removed stale staged uploads", "uploads", n)
			}
		}
	}
}
