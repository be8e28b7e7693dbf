package storetest

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// The store benchmarks. Each backend package wires them to top-level
// benchmarks of the same names (BenchmarkSend in sqlite and postgres), so
// both stores are measured by the same code; docs/benchmarks.md records the
// figures with the commands.

// Senders is the number of concurrent senders of BenchSend and
// BenchSendHotConversation (and of the pgbench comparison).
const Senders = 16

// BenchSend measures Store.Send with Senders concurrent senders spread over
// 64 conversations.
func BenchSend(b *testing.B, be Backend) { benchSend(b, be, 64) }

// BenchSendHotConversation measures Store.Send with Senders concurrent
// senders on one conversation: every send queues on the same row lock.
func BenchSendHotConversation(b *testing.B, be Backend) { benchSend(b, be, 1) }

func benchSend(b *testing.B, be Backend, convs int) {
	ctx := context.Background()
	db := be.New(b, parley.Options{})
	ana, _ := SeedSenders(b, db.Store(), convs)
	var n atomic.Int64
	b.SetParallelism(max(1, (Senders+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := db.Store().Send(ctx, ana, parley.SendRequest{
				Conv: BenchConv(int(i) % convs), CMID: fmt.Sprintf("bench-%d-%d", b.N, i), Body: "a benchmark message of ordinary length",
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sends/s")
}

// BenchConv names the i-th benchmark conversation.
func BenchConv(i int) string { return fmt.Sprintf("bench-%d", i) }

// SeedSenders creates users ana and ben, logs both in, and creates convs
// group conversations of the two named by BenchConv. It returns ana and ben.
func SeedSenders(tb testing.TB, s parley.Store, convs int) (ana, ben parley.Principal) {
	tb.Helper()
	ctx := context.Background()
	var ps [2]parley.Principal
	for i, u := range []string{"ana", "ben"} {
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: u, Password: "bench-" + u}); err != nil {
			tb.Fatal(err)
		}
		sess, err := s.Login(ctx, parley.LoginRequest{Login: u, Password: "bench-" + u, DeviceID: "d1", InstallID: "i1"})
		if err != nil {
			tb.Fatal(err)
		}
		ps[i] = sess.Principal
	}
	for i := range convs {
		if _, err := s.CreateConversation(ctx, ps[0], parley.NewConversation{ID: BenchConv(i), Members: []string{"ben"}}); err != nil {
			tb.Fatal(err)
		}
	}
	return ps[0], ps[1]
}

// BenchSync measures sync pages of MaxPage events from a conversation of
// 10,000 events, walking it from start to end and over again.
func BenchSync(b *testing.B, be Backend) {
	ctx := context.Background()
	db := be.New(b, parley.Options{})
	ana, _ := SeedSenders(b, db.Store(), 1)
	_, head := Fill(b, db, ana, BenchConv(0), 10000)
	var after, events int64
	for b.Loop() {
		page, err := db.Store().Sync(ctx, ana, parley.SyncRequest{Conv: BenchConv(0), After: after, Limit: parley.MaxPage})
		if err != nil {
			b.Fatal(err)
		}
		if len(page.Events) != parley.MaxPage && page.HasMore {
			b.Fatalf("short page of %d with more to come", len(page.Events))
		}
		events += int64(len(page.Events))
		after = page.NextAfter
		if after >= head {
			after = 0
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchConvs measures one first page of Convs (DefaultConvs entries) for a
// user in 500 conversations of 2,000 messages each (by the other member),
// 502 of them unread in every one.
func BenchConvs(b *testing.B, be Backend) {
	ctx := context.Background()
	db := be.New(b, parley.Options{})
	const convs = 500
	ana, ben := SeedSenders(b, db.Store(), convs)
	for i := range convs {
		Fill(b, db, ben, BenchConv(i), 2000)
		if _, err := db.Store().Read(ctx, ana, BenchConv(i), 1500); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		page, err := db.Store().Convs(ctx, ana, parley.ConvsRequest{Limit: parley.DefaultConvs})
		if err != nil {
			b.Fatal(err)
		}
		if list := page.Convs; len(list) != parley.DefaultConvs || !page.HasMore || list[0].Unread != 502 {
			b.Fatalf("got %d conversations (more: %v), first unread %d", len(list), page.HasMore, list[0].Unread)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
}

// BenchFeed measures what the fan-out reads per batch of a 1,000-member
// group (8 messages after what it pushed): Feed, which reads every
// membership period overlapping them, against FeedEvents, which reads the
// events alone (the worker keeps the audience itself).
func BenchFeed(b *testing.B, be Backend) {
	ctx := context.Background()
	db := be.New(b, parley.Options{})
	s := db.Store()
	const members, batch = 1000, 8
	ids := make([]string, members)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%04d", i)
		// No password: no argon2id hashing, an account that cannot log in.
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: ids[i]}); err != nil {
			b.Fatal(err)
		}
	}
	owner := parley.Principal{User: ids[0], DeviceID: "d1"}
	if _, err := s.CreateConversation(ctx, owner, parley.NewConversation{ID: "c-feed", Kind: parley.KindGroup, Title: "feed", Members: ids}); err != nil {
		b.Fatal(err)
	}
	var head int64
	for i := range batch {
		sent, err := s.Send(ctx, owner, parley.SendRequest{Conv: "c-feed", CMID: fmt.Sprint("k", i), Body: "a benchmark message of ordinary length"})
		if err != nil {
			b.Fatal(err)
		}
		head = sent.Seq
	}
	for _, m := range []struct {
		name string
		read func(context.Context, string, int64, int) (parley.Feed, error)
	}{{"periods", s.Feed}, {"events", s.FeedEvents}} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				f, err := m.read(ctx, "c-feed", head-batch, parley.MaxPage)
				if err != nil || len(f.Events) != batch {
					b.Fatalf("%d events, %v", len(f.Events), err)
				}
			}
		})
	}
}
