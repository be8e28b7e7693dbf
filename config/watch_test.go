package config_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/config"
)

// reloads counts OnReload calls.
type reloads struct{ ok, failed atomic.Int32 }

func (r *reloads) record(ok bool) {
	if ok {
		r.ok.Add(1)
	} else {
		r.failed.Add(1)
	}
}

// startWatcher creates a Watcher on path and runs it until the test ends.
func startWatcher(t *testing.T, path string) (*config.Watcher, *reloads) {
	t.Helper()
	r := &reloads{}
	w, err := config.NewWatcher(path, config.WatcherOptions{
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReload: r.record,
		Debounce: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return w, r
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func limitFile(n int) string {
	return fmt.Sprintf("rate_limits:\n  send: {limit: %d, window: 1m}\n", n)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replace writes content the way editors and deploy tools do: a temporary
// file renamed over path.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func sendLimitOf(w *config.Watcher) int { return w.Current().RateLimit("send").Limit }

// TestWatcherReload proves a changed file is reloaded whether it is
// replaced by rename or written in place, that a broken or missing file
// keeps the last good configuration and is reported as a failed reload,
// and that fixing it reloads again.
func TestWatcherReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parley.yaml")
	write(t, path, limitFile(5))
	w, r := startWatcher(t, path)
	if got := sendLimitOf(w); got != 5 {
		t.Fatalf("send limit %d after NewWatcher, want 5", got)
	}

	replace(t, path, limitFile(7))
	eventually(t, "the renamed file (limit 7) is in force", func() bool { return sendLimitOf(w) == 7 })

	// Counts are compared with what came before: an in-place write can be
	// seen half done (an empty file) and reported as one more failure.
	failed := r.failed.Load()
	write(t, path, "rate_limits: {send: {limit: 1}\n") // a syntax error
	eventually(t, "the broken file is reported", func() bool { return r.failed.Load() > failed })
	if got := sendLimitOf(w); got != 7 {
		t.Fatalf("send limit %d after a broken file, want the last good 7", got)
	}

	oks := r.ok.Load()
	write(t, path, limitFile(9)) // in place
	eventually(t, "the fixed file (limit 9) is in force", func() bool { return sendLimitOf(w) == 9 })
	if got := r.ok.Load(); got <= oks {
		t.Errorf("OnReload(true) calls %d, want more than %d", got, oks)
	}

	failed = r.failed.Load()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the missing file is reported", func() bool { return r.failed.Load() > failed })
	if got := sendLimitOf(w); got != 9 {
		t.Fatalf("send limit %d after the file was removed, want the last good 9", got)
	}
	replace(t, path, limitFile(11))
	eventually(t, "the restored file (limit 11) is in force", func() bool { return sendLimitOf(w) == 11 })

	// Going back to the content in force after a failed read is a change:
	// it reloads, so a "last reload ok" signal recovers.
	failed = r.failed.Load()
	write(t, path, "[")
	eventually(t, "the broken file is reported", func() bool { return r.failed.Load() > failed })
	oks = r.ok.Load()
	write(t, path, limitFile(11))
	eventually(t, "the good content is reloaded", func() bool { return r.ok.Load() > oks })
}

// TestWatcherConfigMap proves a Kubernetes ConfigMap update, which swaps the
// "..data" symlink the file points through, is reloaded.
func TestWatcherConfigMap(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks")
	}
	dir := t.TempDir()
	version := func(name string, limit int) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "parley.yaml"), limitFile(limit))
	}
	symlink := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	version("..2025_01_01", 5)
	symlink("..2025_01_01", "..data")
	symlink(filepath.Join("..data", "parley.yaml"), "parley.yaml")

	w, _ := startWatcher(t, filepath.Join(dir, "parley.yaml"))
	if got := sendLimitOf(w); got != 5 {
		t.Fatalf("send limit %d, want 5", got)
	}
	// What the kubelet does: a new directory, a new symlink renamed over
	// ..data, the old directory removed.
	version("..2025_01_02", 7)
	symlink("..2025_01_02", "..data_tmp")
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2025_01_01")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new ConfigMap version (limit 7) is in force", func() bool { return sendLimitOf(w) == 7 })
}

// TestWatcherIgnoresOtherFiles proves events on other files of the
// directory do not count as reloads.
func TestWatcherIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "parley.yaml")
	write(t, path, limitFile(5))
	w, r := startWatcher(t, path)
	write(t, filepath.Join(dir, "other.yaml"), "[")
	// A change to the file itself afterwards is the barrier: once it is in
	// force, the earlier event on the other file has been handled.
	replace(t, path, limitFile(6))
	eventually(t, "limit 6 is in force", func() bool { return sendLimitOf(w) == 6 })
	if got := r.failed.Load(); got != 0 {
		t.Errorf("failed reloads %d, want 0", got)
	}
}

// TestNewWatcher proves the server refuses to start on a missing or broken
// file, and that no path means the defaults and a Run that only waits.
func TestNewWatcher(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	write(t, broken, "timezone: [")
	for _, path := range []string{filepath.Join(dir, "missing.yaml"), broken} {
		if _, err := config.NewWatcher(path, config.WatcherOptions{}); err == nil {
			t.Errorf("NewWatcher(%s): no error", path)
		}
	}

	w, _ := startWatcher(t, "")
	if got := w.Current().Effective(); jsonOf(t, got) != jsonOf(t, config.Default().Effective()) {
		t.Errorf("NewWatcher(\"\").Current() = %v, want Default()", got)
	}
}
