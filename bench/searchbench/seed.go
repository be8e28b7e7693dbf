package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
)

type seedFlags struct {
	reader      *string
	out         io.Writer
	users       int
	convs       int
	memberConvs int
	messages    int
	batch       int
	workers     int
	seed        uint64
}

func (f *seedFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.users, "users", 1000, "senders (u0000 …)")
	fs.IntVar(&f.convs, "convs", 1000, "group conversations (c0000 …), each of 3–8 senders")
	fs.IntVar(&f.memberConvs, "member-convs", 50, "conversations the reader is a member of, from their start")
	fs.IntVar(&f.messages, "messages", 1_000_000, "messages, spread at random over the conversations")
	fs.IntVar(&f.batch, "batch", 500, "sends per SendBatch call (one transaction)")
	fs.IntVar(&f.workers, "workers", 2, "SendBatch calls at once")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed: the same seed writes the same history")
}

// convName names the i-th conversation.
func convName(i int) string { return fmt.Sprintf("c%04d", i) }

// run writes the history. It refuses a store that already has the
// reader: a benchmark database is seeded once, from empty.
func (f *seedFlags) run(ctx context.Context, store parley.Store) error {
	batcher, ok := store.(parley.SendBatcher)
	if !ok {
		return fmt.Errorf("the store does not batch sends")
	}
	if f.memberConvs > f.convs || f.users < 8 || f.convs < 1 || f.batch < 1 || f.workers < 1 {
		return fmt.Errorf("want --users ≥ 8, --convs ≥ 1, --member-convs ≤ --convs, --batch ≥ 1, --workers ≥ 1")
	}
	reader := *f.reader
	if _, err := store.User(ctx, reader); err == nil {
		return fmt.Errorf("user %s exists: seed an empty database", reader)
	}
	start := time.Now()
	r := rand.New(rand.NewPCG(f.seed, 7))
	members, readerIn, err := f.conversations(ctx, store, r, reader)
	if err != nil {
		return err
	}
	fmt.Fprintf(f.out, "seed: %d users, %d conversations (the reader %s in %d) in %s\n", f.users+1, f.convs, reader, readerIn, time.Since(start).Round(time.Millisecond))
	return f.messagesOf(ctx, batcher, r, members, start)
}

// conversations creates the users and the conversations: each of 3–8 of
// the users, the reader in every (convs/memberConvs)th one.
func (f *seedFlags) conversations(ctx context.Context, store parley.Store, r *rand.Rand, reader string) (members [][]string, readerIn int, err error) {
	users := make([]string, f.users)
	for i := range users {
		users[i] = fmt.Sprintf("u%04d", i)
	}
	for _, u := range append([]string{reader}, users...) {
		if _, err := store.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			return nil, 0, fmt.Errorf("create user %s: %w", u, err)
		}
	}
	members = make([][]string, f.convs)
	every := f.convs / max(f.memberConvs, 1)
	for i := range f.convs {
		n := 3 + r.IntN(6)
		seen := map[string]bool{}
		for len(members[i]) < n {
			u := users[r.IntN(len(users))]
			if !seen[u] {
				seen[u] = true
				members[i] = append(members[i], u)
			}
		}
		all := members[i]
		if readerIn < f.memberConvs && i%every == 0 {
			all = append(append([]string{}, all...), reader)
			readerIn++
		}
		owner := parley.Principal{User: members[i][0]}
		_, err := store.CreateConversation(ctx, owner, parley.NewConversation{ID: convName(i), Kind: parley.KindGroup, Title: "conversation " + convName(i), Members: all})
		if err != nil {
			return nil, 0, fmt.Errorf("create %s: %w", convName(i), err)
		}
	}
	return members, readerIn, nil
}

// messagesOf sends f.messages messages in batches by f.workers workers,
// reporting progress every 5 seconds.
func (f *seedFlags) messagesOf(ctx context.Context, batcher parley.SendBatcher, r *rand.Rand, members [][]string, start time.Time) error {
	// One producer draws the messages (the corpus is not safe for
	// concurrent use); workers commit the batches.
	batches := make(chan []parley.BatchSend, f.workers)
	c := newCorpus(f.seed)
	go func() {
		defer close(batches)
		for first := 0; first < f.messages; first += f.batch {
			n := min(f.batch, f.messages-first)
			items := make([]parley.BatchSend, n)
			for k := range items {
				conv := r.IntN(f.convs)
				sender := members[conv][r.IntN(len(members[conv]))]
				items[k] = parley.BatchSend{
					P:   parley.Principal{User: sender, DeviceID: "seed"},
					Req: parley.SendRequest{Conv: convName(conv), CMID: fmt.Sprintf("seed-%d", first+k), Body: c.body()},
				}
			}
			select {
			case batches <- items:
			case <-ctx.Done():
				return
			}
		}
	}()
	var sent atomic.Int64
	var failure error
	var once sync.Once
	fail := func(err error) { once.Do(func() { failure = err }) }
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range f.workers {
		wg.Go(func() {
			for items := range batches {
				if cctx.Err() != nil {
					continue // drain
				}
				for _, res := range batcher.SendBatch(cctx, items) {
					if res.Err != nil {
						fail(fmt.Errorf("send: %w", res.Err))
						cancel()
						break
					}
				}
				sent.Add(int64(len(items)))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	sendStart := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			n := sent.Load()
			fmt.Fprintf(f.out, "seed: %d/%d messages, %.0f/s\n", n, f.messages, float64(n)/time.Since(sendStart).Seconds())
			continue
		case <-done:
		}
		break
	}
	if failure == nil && ctx.Err() != nil {
		failure = ctx.Err()
	}
	if failure != nil {
		return failure
	}
	took := time.Since(sendStart)
	fmt.Fprintf(f.out, "seed: %d messages in %s (%.0f/s); done in %s\n", sent.Load(), took.Round(time.Millisecond), float64(sent.Load())/took.Seconds(), time.Since(start).Round(time.Millisecond))
	return nil
}
