package nats_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/bustest"
	"github.com/parleychat/parley/nats"
)

// natsURL is the server of PARLEY_TEST_NATS; tests skip without it.
func natsURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("PARLEY_TEST_NATS")
	if u == "" {
		t.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222): NATS tests skipped")
	}
	return u
}

type backend struct{ url string }

// New returns two buses with a subject prefix of their own, so parallel
// tests and earlier runs do not hear each other.
func (be backend) New(t testing.TB) (a, b parley.Bus) {
	prefix := "t" + parley.NewID()[:12]
	return newBus(t, be.url, nats.Options{Prefix: prefix}), newBus(t, be.url, nats.Options{Prefix: prefix})
}

func (backend) SingleNode() bool { return false }
func (backend) Selective() bool  { return true }
func (backend) MaxCarried() int  { return bustest.NoBound } // the suite stays far below MaxMessage

func newBus(t testing.TB, url string, o nats.Options) *nats.Bus {
	t.Helper()
	b, err := nats.NewBus(url, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBusContract(t *testing.T) {
	bustest.Run(t, backend{natsURL(t)})
}

func TestNewBusRejects(t *testing.T) {
	for _, c := range []struct {
		name, url string
		o         nats.Options
	}{
		{"http url", "http://127.0.0.1:4222", nats.Options{}},
		{"one bad of two", "nats://127.0.0.1:4222,127.0.0.1:4223", nats.Options{}},
		{"prefix with a dot", "nats://127.0.0.1:4222", nats.Options{Prefix: "a.b"}},
		{"prefix with a wildcard", "nats://127.0.0.1:4222", nats.Options{Prefix: "a*"}},
		{"url prefix with a dot", "nats://127.0.0.1:4222?prefix=a.b", nats.Options{}},
		{"empty url prefix", "nats://127.0.0.1:4222?prefix=", nats.Options{}},
		{"two url prefixes", "nats://127.0.0.1:4222?prefix=a&prefix=b", nats.Options{}},
		{"url and options disagree", "nats://127.0.0.1:4222?prefix=a", nats.Options{Prefix: "b"}},
		{"unknown parameter", "nats://127.0.0.1:4222?shards=8", nats.Options{}},
		{"bad query", "nats://127.0.0.1:4222?prefix=%zz", nats.Options{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := nats.NewBus(c.url, c.o); err == nil {
				t.Errorf("NewBus(%q, %+v) succeeded, want an error", c.url, c.o)
			}
		})
	}
}

// Run with an ended context returns at once, without a server.
func TestRunEndedContext(t *testing.T) {
	b := newBus(t, "nats://127.0.0.1:1", nats.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Run(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

// NewBus takes the prefix from the URL (the form --bus uses), alone or
// agreeing with the options.
func TestNewBusURLPrefix(t *testing.T) {
	for _, c := range []struct {
		url string
		o   nats.Options
	}{
		{"nats://127.0.0.1:4222?prefix=chat-2", nats.Options{}},
		{"nats://127.0.0.1:4222,nats://127.0.0.1:4223?prefix=chat-2", nats.Options{}},
		{"nats://127.0.0.1:4222?prefix=chat-2", nats.Options{Prefix: "chat-2"}},
	} {
		if _, err := nats.NewBus(c.url, c.o); err != nil {
			t.Errorf("NewBus(%q, %+v): %v", c.url, c.o, err)
		}
	}
}

// Two deployments on one NATS server with different prefixes do not hear
// each other: each gateway hears its own deployment's notices (event,
// read-cursor and account notices of the same conversation and user) and
// none of the other's.
func TestPrefixesIsolated(t *testing.T) {
	url := natsURL(t)
	tag := parley.NewID()[:8]
	pa, pb := "a"+tag, "b"+tag
	a1 := newBus(t, url+"?prefix="+pa, nats.Options{})
	a2 := newBus(t, url+"?prefix="+pa, nats.Options{})
	b1 := newBus(t, url+"?prefix="+pb, nats.Options{})
	in := parley.Interest{Watch: []string{"probe", "shared"}, Serve: []string{"alice"}}
	hs := map[*nats.Bus]*handler{}
	for _, b := range []*nats.Bus{a1, a2, b1} {
		b.Interest(in)
		hs[b] = newHandler()
		run(t, b, hs[b])
	}
	heard(t, a1, hs[a2], "probe")
	heard(t, b1, hs[b1], "probe")

	// Deployment A publishes seqs 1–100, B 1001–1100, of the same
	// conversation and user.
	publish := func(b *nats.Bus, from int64) {
		for i := range int64(100) {
			seq := from + i
			b.Publish(parley.Notice{Conv: "shared", Seq: seq}, parley.Notice{Conv: "shared", Seq: seq, User: "alice", Device: "phone"})
		}
		b.Publish(parley.AccountNotice("alice"))
	}
	publish(a1, 1)
	publish(b1, 1001)
	for _, c := range []struct {
		name     string
		h        *handler
		from, to int64
	}{{"a2", hs[a2], 1, 100}, {"a1", hs[a1], 1, 100}, {"b1", hs[b1], 1001, 1100}} {
		eventually(t, 15*time.Second, c.name+" hears its deployment", func() bool {
			n, _ := c.h.state("shared")
			return n >= 200
		})
		time.Sleep(100 * time.Millisecond) // let anything misrouted arrive
		c.h.mu.Lock()
		for _, seq := range c.h.seqs["shared"] {
			if seq < c.from || seq > c.to {
				t.Errorf("%s heard seq %d of the other deployment", c.name, seq)
			}
		}
		if n := len(c.h.seqs[""]); n != 1 {
			t.Errorf("%s heard %d account notices, want its deployment's one", c.name, n)
		}
		c.h.mu.Unlock()
	}
}

// With SkipOwn, a gateway's own notices are not delivered back to it (the
// gateway pushed them already); the other gateways hear them all.
func TestSkipOwn(t *testing.T) {
	url := natsURL(t)
	prefix := "s" + parley.NewID()[:8]
	a := newBus(t, url, nats.Options{Prefix: prefix, SkipOwn: true})
	b := newBus(t, url, nats.Options{Prefix: prefix})
	ha, hb := newHandler(), newHandler()
	in := parley.Interest{Watch: []string{"probe", "froma", "fromb"}}
	a.Interest(in)
	b.Interest(in)
	run(t, a, ha)
	run(t, b, hb)
	heard(t, b, ha, "probe")
	heard(t, a, hb, "probe")

	for i := range int64(50) {
		a.Publish(parley.Notice{Conv: "froma", Seq: i + 1})
	}
	eventually(t, 15*time.Second, "b hears a's 50 notices", func() bool {
		n, _ := hb.state("froma")
		return n == 50
	})
	// The server queued a's messages for a's own subscriptions, had it
	// any, before b heard them: they would arrive before this.
	b.Publish(parley.Notice{Conv: "fromb", Seq: 1})
	eventually(t, 15*time.Second, "a hears b's notice", func() bool {
		n, _ := ha.state("fromb")
		return n == 1
	})
	time.Sleep(100 * time.Millisecond)
	if n, lost := ha.state("froma"); n != 0 || lost != 0 {
		t.Errorf("a heard %d of its own notices (Lost %d times)", n, lost)
	}
}
