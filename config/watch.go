package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatcherOptions configure a Watcher. Zero values take the defaults named.
type WatcherOptions struct {
	Log *slog.Logger // default slog.Default()
	// OnReload is called after every reload attempt that read a changed
	// file: true when the new configuration is in force, false when the
	// last good one was kept (a syntax error, an unreadable or missing
	// file). It runs on Run's goroutine and should return quickly (count a
	// metric). nil: none.
	OnReload func(ok bool)
	// Debounce is how long the file must stay quiet before it is read, so
	// one save (truncate, write, write, rename) is one reload. Default
	// 100ms.
	Debounce time.Duration
}

// Watcher holds the configuration in force and reloads it when its file
// changes.
//
// It watches the file's directory, not the file: editors and Kubernetes
// ConfigMaps replace a file by renaming another over it (or by swapping the
// "..data" symlink), which a watch on the file itself would not survive. An
// event in the directory on the file's name, or on a name starting with
// "..", starts a debounce; when it expires the file is read and, if its
// content changed since the last read, parsed. A good parse is swapped in
// atomically; a bad one leaves the last good configuration in force. (A
// path that is a symlink into some other directory is not followed there:
// only the ConfigMap layout, links within the file's own directory, is.)
//
// A file rewritten in place can be read half-written. An empty file fails
// the parse (see Parse), but a half file that is valid YAML is taken until
// the rest arrives a moment later; write to a temporary file and rename it
// over the configuration to avoid that.
type Watcher struct {
	path     string
	log      *slog.Logger
	onReload func(bool)
	debounce time.Duration
	cur      atomic.Pointer[Config]

	// last is the hash of the content read last (good or not), so that an
	// event that changed nothing (a chmod, a touch, a sibling's rename)
	// reloads nothing. Only Run touches it after NewWatcher.
	last    [sha256.Size]byte
	hasLast bool
}

// NewWatcher loads the file at path. A file that cannot be read or parsed is
// an error: the server refuses to start on a broken file rather than run on
// defaults it was not meant to. Warnings are logged. With path "" it holds
// Default() and Run only waits for its context.
func NewWatcher(path string, opts WatcherOptions) (*Watcher, error) {
	w := &Watcher{path: path, log: opts.Log, onReload: opts.OnReload, debounce: opts.Debounce}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.debounce <= 0 {
		w.debounce = 100 * time.Millisecond
	}
	if path == "" {
		w.cur.Store(Default())
		return w, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, warns, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w (fix the file, or start without --config)", path, err)
	}
	w.last, w.hasLast = sha256.Sum256(data), true
	w.logWarnings(warns)
	w.cur.Store(c)
	return w, nil
}

// Current returns the configuration in force. It is cheap (one atomic
// load): call it per request and do not keep the result across requests.
func (w *Watcher) Current() *Config { return w.cur.Load() }

// Run reloads the configuration whenever its file changes, until ctx ends;
// then it closes its directory watch and returns nil. It fails only when the
// watch cannot be set up. Call it at most once.
func (w *Watcher) Run(ctx context.Context) error {
	if w.path == "" {
		<-ctx.Done()
		return nil
	}
	dir, name := filepath.Split(w.path)
	if dir == "" {
		dir = "."
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch %s: %w", w.path, err)
	}
	// Close also stops and waits for fsnotify's reader goroutine.
	defer fw.Close()
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("config: watch %s: %w", dir, err)
	}

	// The file may have changed between NewWatcher and the watch: look once.
	w.reload()

	timer := time.NewTimer(w.debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			if relevant(ev, name) {
				timer.Reset(w.debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.log.Error("config: watching the file", "path", w.path, "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: one of them may have been ours.
				timer.Reset(w.debounce)
			}
		case <-timer.C:
			w.reload()
		}
	}
}

// relevant reports whether ev may have changed the file called name: an
// event on the name itself, or on a "..name" entry (a ConfigMap's "..data"
// symlink and its timestamped directories).
func relevant(ev fsnotify.Event, name string) bool {
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Rename) && !ev.Has(fsnotify.Remove) {
		return false
	}
	base := filepath.Base(ev.Name)
	return base == name || strings.HasPrefix(base, "..")
}

// reload reads and parses the file if its content changed, and reports.
func (w *Watcher) reload() {
	data, err := os.ReadFile(w.path)
	if err != nil {
		// Next time the file is there, read it even if it is unchanged.
		w.hasLast = false
		w.failed(err)
		return
	}
	sum := sha256.Sum256(data)
	if w.hasLast && sum == w.last {
		return
	}
	w.last, w.hasLast = sum, true
	c, warns, err := Parse(data)
	if err != nil {
		w.failed(err)
		return
	}
	w.cur.Store(c)
	w.logWarnings(warns)
	w.log.Info("config: reloaded", "path", w.path, "warnings", len(warns))
	if w.onReload != nil {
		w.onReload(true)
	}
}

func (w *Watcher) failed(err error) {
	w.log.Error("config: reload failed, keeping the last good configuration", "path", w.path, "err", err)
	if w.onReload != nil {
		w.onReload(false)
	}
}

func (w *Watcher) logWarnings(warns []string) {
	for _, s := range warns {
		w.log.Warn("config: value resolved to its safe side", "path", w.path, "warning", s)
	}
}
