package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/parleychat/parley"
)

// searchStore is what `parley search rebuild` needs of the store.
type searchStore interface {
	auditLog
	RebuildSearch(ctx context.Context, conv string, progress parley.SearchProgress) (parley.SearchRebuild, error)
}

// runSearch is `parley search rebuild [--conv ID]`: the search index
// rebuilt from the log, directly in the store (with the server running or
// not), audited as search.rebuild.
func runSearch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("search: want rebuild (see parley search --help)")
	}
	if wantsHelp(args) {
		return helpRequest{groupHelp["search"]}
	}
	sub, args := args[0], args[1:]
	if sub != "rebuild" {
		return usagef("search: unknown command %q (want rebuild)", sub)
	}
	var sf storeFlags
	var conv string
	fs := flag.NewFlagSet("search rebuild", flag.ContinueOnError)
	sf.register(fs)
	fs.StringVar(&conv, "conv", "", "rebuild this conversation's index only (empty: every conversation's)")
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("search rebuild: unexpected argument %q", fs.Arg(0))
	}
	if conv != "" {
		if err := parley.CheckConvID(conv); err != nil {
			return usagef("search rebuild --conv %q: %v", conv, err)
		}
	}
	store, _, err := sf.open(ctx, parley.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	return rebuildSearch(ctx, store, cliOperator(getenv), getenv, conv, stdout, stderr)
}

// rebuildSearch is the audited rebuild: progress lines on stderr (at most
// one a second, and the last), the total on stdout.
func rebuildSearch(ctx context.Context, store searchStore, op string, getenv func(string) string, conv string, stdout, stderr io.Writer) error {
	params := map[string]any{"scope": "all"}
	if conv != "" {
		params = map[string]any{"conv": conv}
	}
	if su := getenv("SUDO_USER"); su != "" {
		params["sudo_user"] = su
	}
	start := time.Now()
	pr := &rebuildProgress{every: time.Second, now: time.Now, print: func(r parley.SearchRebuild) {
		fmt.Fprintf(stderr, "search rebuild: %d/%d conversations, %d rows\n", r.Convs, r.Total, r.Rows)
	}}
	var res parley.SearchRebuild
	err := audited(ctx, store, op, "search.rebuild", conv, params, func() (err error) {
		res, err = store.RebuildSearch(ctx, conv, pr.report)
		return err
	})
	pr.flush()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuilt the search index of %d conversations (%d rows) in %s\n", res.Convs, res.Rows, time.Since(start).Round(time.Millisecond))
	return nil
}

// rebuildProgress passes a rebuild's progress on to print, at most once
// every every, and always the last report (flush).
type rebuildProgress struct {
	every   time.Duration
	now     func() time.Time
	print   func(parley.SearchRebuild)
	last    time.Time
	latest  parley.SearchRebuild
	pending bool // latest was not printed yet
}

func (p *rebuildProgress) report(r parley.SearchRebuild) {
	p.latest, p.pending = r, true
	if now := p.now(); now.Sub(p.last) >= p.every || r.Convs == r.Total {
		p.last = now
		p.flush()
	}
}

func (p *rebuildProgress) flush() {
	if p.pending {
		p.print(p.latest)
		p.pending = false
	}
}

// searchBuilder is what serve's rebuild at start needs of the store.
type searchBuilder interface {
	SearchPending(ctx context.Context) ([]string, error)
	RebuildSearch(ctx context.Context, conv string, progress parley.SearchProgress) (parley.SearchRebuild, error)
}

// searchLogEvery is how often serve logs the progress of its rebuild.
const searchLogEvery = 10 * time.Second

// buildPendingSearch rebuilds, one conversation after the other, the
// indexes pending lists: serve runs it in the background at start, so the
// server is ready at once and a search over a conversation not built yet
// answers UNAVAILABLE until its turn (the store says so). Gateways started
// together take the conversations in their own random order, so they
// rarely rebuild the same one twice (which is harmless: a rebuild is a
// whole replacement under the conversation's lock). A conversation whose
// rebuild fails stays pending: logged, and the next start or `parley search
// rebuild` builds it. It returns when done or when ctx ends.
func buildPendingSearch(ctx context.Context, store searchBuilder, log *slog.Logger) {
	convs, err := store.SearchPending(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("search index: cannot list the conversations not built; run parley search rebuild", "err", err)
		}
		return
	}
	if len(convs) == 0 {
		return
	}
	rand.Shuffle(len(convs), func(i, j int) { convs[i], convs[j] = convs[j], convs[i] })
	start := time.Now()
	log.Info("search index: building the conversations not built yet; searches over them answer UNAVAILABLE until then", "convs", len(convs))
	var done, failed int
	var rows int64
	last := start
	for _, conv := range convs {
		res, err := store.RebuildSearch(ctx, conv, nil)
		if ctx.Err() != nil {
			log.Info("search index: build stopped; the rest is built at the next start", "convs_done", done, "convs", len(convs))
			return
		}
		switch {
		case parley.ErrorCode(err) == parley.CodeNotFound:
			// deleted since it was listed: nothing to build
		case err != nil:
			failed++
			log.Warn("search index: a conversation failed to build; it stays pending", "conv", conv, "err", err)
		default:
			rows += res.Rows
		}
		done++
		if now := time.Now(); now.Sub(last) >= searchLogEvery {
			last = now
			log.Info("search index: building", "convs_done", done, "convs", len(convs), "rows", rows)
		}
	}
	if failed > 0 {
		log.Error("search index: built with failures; run parley search rebuild", "convs", len(convs), "failed", failed, "rows", rows, "took", time.Since(start).Round(time.Millisecond).String())
		return
	}
	log.Info("search index: built", "convs", len(convs), "rows", rows, "took", time.Since(start).Round(time.Millisecond).String())
}
