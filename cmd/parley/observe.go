package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/export"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/sqlite"
)

// adminServer is the --admin-addr listener: /metrics and /debug/pprof/*,
// for operators only. Neither the profiler nor (with --admin-addr set) the
// metrics are served on the public listener.
type adminServer struct {
	srv  *http.Server
	done chan struct{}
}

// startAdmin binds addr (port 0 picks one) and serves the admin mux; an
// empty addr serves nothing (nil, nil). A taken port fails here, before
// the server starts.
func startAdmin(addr string, m *metrics.Metrics, stdout io.Writer, log *slog.Logger) (*adminServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin-addr: %w", err)
	}
	a := &adminServer{
		srv: &http.Server{
			Handler:           adminMux(m),
			ReadHeaderTimeout: ReadHeaderTimeout,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	fmt.Fprintf(stdout, "admin listening on http://%s\n", ln.Addr())
	log.Info("admin listener: /metrics and /debug/pprof/", "addr", ln.Addr().String())
	return a, nil
}

// adminMux is a private mux: net/http/pprof's handlers are registered here
// by hand, never on the public handler.
func adminMux(m *metrics.Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// Close stops the admin listener (nil: nothing to stop).
func (a *adminServer) Close() {
	if a == nil {
		return
	}
	a.srv.Close()
	<-a.done
}

// instrument returns store measured by m (every call's duration and
// failures) and exports its connection pool.
func instrument(m *metrics.Metrics, store parley.Store) parley.Store {
	switch db := store.(type) {
	case *postgres.DB:
		m.Pool(func() metrics.PoolStats {
			s := db.Stat()
			return metrics.PoolStats{
				InUse: int64(s.AcquiredConns()), Idle: int64(s.IdleConns()), Max: int64(s.MaxConns()),
				Waits: s.EmptyAcquireCount(), WaitTime: s.EmptyAcquireWaitTime(),
			}
		})
	case *sqlite.DB:
		m.Pool(func() metrics.PoolStats {
			w, r := db.Stats()
			return metrics.PoolStats{
				InUse: int64(w.InUse + r.InUse), Idle: int64(w.Idle + r.Idle),
				Max:   int64(w.MaxOpenConnections + r.MaxOpenConnections),
				Waits: w.WaitCount + r.WaitCount, WaitTime: w.WaitDuration + r.WaitDuration,
			}
		})
	}
	return m.Store(store)
}

// registerExportMetrics exposes the export jobs this process runs now,
// and the jobs of the whole deployment by state, read from the store at
// scrape time (one grouped count, bounded by exportCountTimeout; while the
// store does not answer the gauge is left out of the scrape).
func registerExportMetrics(m *metrics.Metrics, w *export.Worker, store exportCounter) {
	m.GaugeFunc(metrics.NameExportRunning, "Export jobs this process is running now.", func() float64 { return float64(w.Running()) })
	states := []string{string(parley.ExportQueued), string(parley.ExportRunning), string(parley.ExportDone),
		string(parley.ExportFailed), string(parley.ExportRevoked), string(parley.ExportExpired)}
	m.LabeledGaugeFunc(metrics.NameExportJobs, "Export jobs of every user by state (read from the store at scrape time).", "state", states,
		func() (map[string]float64, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), exportCountTimeout)
			defer cancel()
			counts, err := store.ExportCounts(ctx)
			if err != nil {
				return nil, false
			}
			out := make(map[string]float64, len(counts))
			for s, n := range counts {
				out[string(s)] = float64(n)
			}
			return out, true
		})
}

// exportCounter is the store read behind parley_export_jobs
// (parley.Exports.ExportCounts).
type exportCounter interface {
	ExportCounts(ctx context.Context) (map[parley.ExportState]int64, error)
}

// exportCountTimeout bounds the store read behind parley_export_jobs, so a
// slow store cannot hold a scrape.
const exportCountTimeout = 2 * time.Second
