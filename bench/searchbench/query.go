package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

type queryFlags struct {
	reader *string
	out    io.Writer
	log    io.Writer
	n      int
	warmup int
	seed   uint64
	limit  int
	report string
	hits   string
	pages  int
	hitsW  io.Writer
	fresh  int
}

func (f *queryFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.n, "queries", 1000, "measured queries of each kind")
	fs.IntVar(&f.warmup, "warmup", 100, "queries of each kind run first and not measured")
	fs.Uint64Var(&f.seed, "seed", 2, "random seed of the queries drawn")
	fs.IntVar(&f.limit, "limit", 0, "hits per page (0: the default page)")
	fs.StringVar(&f.report, "report", "", "also write the figures to this file (JSON)")
	fs.StringVar(&f.hits, "hits", "", "also write each measured query's hits to this file, one line a query (to compare two stores or builds)")
	fs.IntVar(&f.pages, "pages", 1, "with --hits: pages of each query to write, the later ones read after the measurement")
	fs.IntVar(&f.fresh, "fresh", 0, "first send this many messages as the reader, one at a time over their conversations (what a store has written last, e.g. not yet merged into its index)")
}

// openHits opens the --hits file, if any, as f.hitsW.
func (f *queryFlags) openHits() (done func() error, err error) {
	if f.hits == "" {
		return func() error { return nil }, nil
	}
	file, err := os.Create(f.hits)
	if err != nil {
		return nil, err
	}
	f.hitsW = file
	return file.Close, nil
}

// sendFresh sends f.fresh messages of the corpus as the reader, one at a
// time, in turn to each conversation they are in.
func (f *queryFlags) sendFresh(ctx context.Context, store parley.Store, p parley.Principal) error {
	if f.fresh == 0 {
		return nil
	}
	var convs []string
	for r := (parley.ConvsRequest{Limit: 100}); ; {
		page, err := store.Convs(ctx, p, r)
		if err != nil {
			return fmt.Errorf("convs of %s: %w", p.User, err)
		}
		for _, c := range page.Convs {
			convs = append(convs, c.Conv)
		}
		if !page.HasMore {
			break
		}
		r.Before = page.Next
	}
	if len(convs) == 0 {
		return fmt.Errorf("%s is in no conversation", p.User)
	}
	c := newCorpus(f.seed + 100)
	stamp := time.Now().UnixNano()
	for i := range f.fresh {
		req := parley.SendRequest{Conv: convs[i%len(convs)], CMID: fmt.Sprintf("fresh-%d-%d", stamp, i), Body: c.body()}
		if _, err := store.Send(ctx, p, req); err != nil {
			return fmt.Errorf("send as %s: %w", p.User, err)
		}
	}
	fmt.Fprintf(f.log, "query: sent %d messages as %s first\n", f.fresh, p.User)
	return nil
}

// recordHits writes one line to the --hits file: the query, then the
// conv/seq of each hit of its first f.pages pages, following Next.
func (f *queryFlags) recordHits(ctx context.Context, store parley.Store, p parley.Principal, w string, page parley.SearchPage) error {
	line := w
	for n := 1; ; n++ {
		for _, h := range page.Hits {
			line += fmt.Sprintf(" %s/%d", h.Event.Conv, h.Event.Seq)
		}
		if page.Next == "" || n == f.pages {
			break
		}
		line += " |"
		var err error
		if page, err = store.Search(ctx, p, parley.SearchRequest{Query: w, Limit: f.limit, Cursor: page.Next}); err != nil {
			return fmt.Errorf("search %q as %s, page %d: %w", w, p.User, n+1, err)
		}
	}
	_, err := fmt.Fprintln(f.hitsW, line)
	return err
}

// bucket is a set of query words of one frequency band.
type bucket struct {
	kind, name string
	words      []string
}

// buckets are the query words: English words by rank (the most common
// hundred, "the" among them; the next 1,900; the rest, made-up tail words
// included) and two-character Chinese words (the 40 most common, the
// rest). Each measured query picks a bucket of its kind in turn, then a
// word of it at random: every band weighs the same in the percentiles.
func buckets() []bucket {
	c := newCorpus(1)
	var zh []string
	for _, w := range chinese {
		if utf8.RuneCountInString(w) == 2 {
			zh = append(zh, w)
		}
	}
	return []bucket{
		{"word", "rank 1–100", c.words[:100]},
		{"word", "rank 101–2000", c.words[100:2000]},
		{"word", "rank 2001+", c.words[2000:]},
		{"zh2", "40 most common", zh[:40]},
		{"zh2", "the others", zh[40:]},
	}
}

// sample is one measured query.
type sample struct {
	ms   float64
	hits int
}

// Stats are the figures of a set of queries.
type Stats struct {
	Kind, Bucket  string
	Queries       int
	P50, P95, P99 float64 // ms
	Max, Mean     float64 // ms
	MeanHits      float64 // hits on the first page
	EmptyPages    int
	FullPages     int // pages with a next cursor: more hits follow
}

func stats(kind, name string, s []sample) Stats {
	ms := make([]float64, len(s))
	st := Stats{Kind: kind, Bucket: name, Queries: len(s)}
	var sum, hits float64
	for i, x := range s {
		ms[i] = x.ms
		sum += x.ms
		hits += float64(x.hits)
		if x.hits == 0 {
			st.EmptyPages++
		}
	}
	slices.Sort(ms)
	pct := func(p float64) float64 {
		if len(ms) == 0 {
			return 0
		}
		return ms[min(len(ms)-1, int(p*float64(len(ms))))]
	}
	st.P50, st.P95, st.P99 = pct(0.50), pct(0.95), pct(0.99)
	if len(ms) > 0 {
		st.Max, st.Mean, st.MeanHits = ms[len(ms)-1], sum/float64(len(ms)), hits/float64(len(ms))
	}
	return st
}

// query runs the queries, the kinds interleaved (so a change in the
// machine's load weighs on both alike), each the first page of a search
// over every conversation of the reader, and prints the percentiles per
// kind and per bucket.
func (f *queryFlags) query(ctx context.Context, store parley.Store) error {
	p := parley.Principal{User: *f.reader, DeviceID: "searchbench", InstallID: "searchbench"}
	if err := f.sendFresh(ctx, store, p); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(f.seed, 11))
	bs := buckets()
	byKind := map[string][]int{}
	var kinds []string
	for i, b := range bs {
		if byKind[b.kind] == nil {
			kinds = append(kinds, b.kind)
		}
		byKind[b.kind] = append(byKind[b.kind], i)
	}
	closeHits, err := f.openHits()
	if err != nil {
		return err
	}
	defer closeHits()
	samples := make([][]sample, len(bs))
	full := make([]int, len(bs))
	for i := range f.warmup + f.n {
		for _, k := range kinds {
			bi := byKind[k][i%len(byKind[k])]
			w := bs[bi].words[r.IntN(len(bs[bi].words))]
			t0 := time.Now()
			page, err := store.Search(ctx, p, parley.SearchRequest{Query: w, Limit: f.limit})
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("search %q as %s: %w", w, p.User, err)
			}
			if i < f.warmup {
				continue
			}
			samples[bi] = append(samples[bi], sample{ms: float64(d.Microseconds()) / 1000, hits: len(page.Hits)})
			if page.Next != "" {
				full[bi]++
			}
			if f.hitsW != nil {
				if err := f.recordHits(ctx, store, p, w, page); err != nil {
					return err
				}
			}
		}
		if (i+1)%500 == 0 {
			fmt.Fprintf(f.log, "query: %d/%d rounds\n", i+1, f.warmup+f.n)
		}
	}
	var out []Stats
	for _, k := range kinds {
		var all []sample
		var fullAll int
		for _, bi := range byKind[k] {
			all = append(all, samples[bi]...)
			fullAll += full[bi]
		}
		st := stats(k, "all", all)
		st.FullPages = fullAll
		out = append(out, st)
		for _, bi := range byKind[k] {
			st := stats(k, bs[bi].name, samples[bi])
			st.FullPages = full[bi]
			out = append(out, st)
		}
	}
	fmt.Fprintf(f.out, "%-5s %-15s %7s %8s %8s %8s %8s %9s %6s %6s\n", "kind", "bucket", "queries", "p50 ms", "p95 ms", "p99 ms", "max ms", "mean hits", "empty", "full")
	for _, s := range out {
		fmt.Fprintf(f.out, "%-5s %-15s %7d %8.2f %8.2f %8.2f %8.2f %9.1f %6d %6d\n", s.Kind, s.Bucket, s.Queries, s.P50, s.P95, s.P99, s.Max, s.MeanHits, s.EmptyPages, s.FullPages)
	}
	if f.report != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(f.report, append(b, '\n'), 0o644)
	}
	return nil
}
