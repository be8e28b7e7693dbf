package bustest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/bustest"
	"github.com/parleychat/parley/inmem"
)

// The notices the suite publishes are valid, so every backend must carry
// them.
func TestNoticesValid(t *testing.T) {
	events := 0
	for _, n := range bustest.Notices("tag", 1000) {
		if !parley.ValidConvID(n.Conv) {
			t.Errorf("invalid conv in %+v", n)
		}
		if n.User != "" && !parley.ValidUserID(n.User) {
			t.Errorf("invalid user in %+v", n)
		}
		if n.User == "" && n.Device != "" {
			t.Errorf("a device without a user: %+v", n)
		}
		if ev := n.Event; ev != nil {
			events++
			if ev.Conv != n.Conv || ev.Seq != n.Seq || n.Epoch < 1 || n.Read() || len(ev.Body) > parley.MaxNoticeBody {
				t.Errorf("a carried event that does not fit its notice: %+v, %+v", n, *ev)
			}
			if !n.Same(n.WithEvent(*ev, n.Epoch)) {
				t.Errorf("Same does not hold for a copy of %+v", n)
			}
		}
	}
	if events == 0 {
		t.Error("no notice carries an event")
	}
}

// The suite fails buses that break the contract: each broken bus below is
// run through the suite in a child process, which must fail the named
// behaviour.
func TestSuiteCatchesBrokenBuses(t *testing.T) {
	if name := os.Getenv("BUSTEST_BROKEN"); name != "" {
		bustest.Run(t, broken(name))
		return
	}
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	for _, c := range []struct{ broken, failing string }{
		{"reorders", "delivers_in_order"},
		{"loses", "delivers_in_order"},
		{"unbatched", "batched"},
		{"blocks", "publish_never_blocks"},
		{"leaks", "stops_on_cancel"},
		{"unselective", "interest_routing"},
		{"strips", "carries_events"},
	} {
		t.Run(c.broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesBrokenBuses$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "BUSTEST_BROKEN="+c.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a bus that %s:\n%s", c.broken, out)
			}
			if want := "--- FAIL: TestSuiteCatchesBrokenBuses/" + c.failing + " "; !strings.Contains(string(out), want) {
				t.Errorf("the suite failed a bus that %s, but not in %s:\n%s", c.broken, c.failing, out)
			}
		})
	}
}

type broken string

func (b broken) SingleNode() bool { return true }

// An "unselective" bus says it is Selective but delivers every notice.
func (b broken) Selective() bool { return b == "unselective" }

// A "strips" bus says it carries events but delivers ids only.
func (b broken) MaxCarried() int { return bustest.NoBound }

func (b broken) New(t testing.TB) (parley.Bus, parley.Bus) {
	bus := &brokenBus{how: string(b), Bus: inmem.NewBus(), in: make(chan parley.Notice)}
	return bus, bus
}

type brokenBus struct {
	how string
	*inmem.Bus
	in chan parley.Notice // "blocks": Publish hands over to Run
	n  int
	mu sync.Mutex
}

func (b *brokenBus) Publish(ns ...parley.Notice) {
	switch b.how {
	case "reorders":
		for i := len(ns) - 1; i >= 0; i-- {
			b.Bus.Publish(ns[i])
		}
	case "loses":
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, n := range ns {
			if b.n++; b.n%100 != 0 {
				b.Bus.Publish(n)
			}
		}
	case "blocks":
		for _, n := range ns {
			b.in <- n
		}
	case "strips":
		for _, n := range ns {
			n.Event, n.Epoch = nil, 0
			b.Bus.Publish(n)
		}
	default:
		b.Bus.Publish(ns...)
	}
}

func (b *brokenBus) Run(ctx context.Context, h parley.BusHandler) error {
	switch b.how {
	case "unbatched":
		return b.Bus.Run(ctx, oneByOne{h})
	case "blocks":
		go func() {
			for n := range b.in {
				b.Bus.Publish(n)
			}
		}()
	case "leaks":
		go func() { select {} }()
	}
	return b.Bus.Run(ctx, h)
}

type oneByOne struct{ parley.BusHandler }

func (h oneByOne) Notify(ns []parley.Notice) {
	for i := range ns {
		h.BusHandler.Notify(ns[i : i+1])
	}
}
