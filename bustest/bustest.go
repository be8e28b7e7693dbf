// Package bustest is the one behaviour suite of parley.Bus. Every bus
// implementation runs it (as storetest is run for every store):
//
//	func TestBusContract(t *testing.T) { bustest.Run(t, backend{}) }
//
// Each behaviour is a named subtest with a fresh deployment of its own. The
// suite checks what a healthy deployment does: under no failure, notices
// arrive, all of them, in publish order, and Lost is never called. What a
// bus does under failure (a dropped connection, an overflow) is specific to
// each backend and tested next to it.
package bustest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Backend makes deployments for the suite.
type Backend interface {
	// New returns two buses of one fresh deployment, as two gateways
	// would hold them: what either publishes reaches both, and no other
	// deployment's bus hears it. A single-node backend returns the same
	// bus twice. Neither is running yet: the suite calls Run. The backend
	// releases them at t.Cleanup.
	New(t testing.TB) (a, b parley.Bus)
	// SingleNode reports that New returns one bus twice, so a deployment
	// has no second instance to test against (cross_instance is skipped).
	SingleNode() bool
}

// Run runs every behaviour against be.
func Run(t *testing.T, be Backend) {
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) { b.test(t, be) })
	}
}

var behaviours = []struct {
	name string
	test func(*testing.T, Backend)
}{
	{"delivers_in_order", testDeliversInOrder},
	{"cross_instance", testCrossInstance},
	{"publish_never_blocks", testPublishNeverBlocks},
	{"batched", testBatched},
	{"stops_on_cancel", testStopsOnCancel},
}

// Generous limits: the suite runs under -race on busy CI machines.
const (
	deliverWithin = 20 * time.Second
	stopWithin    = 10 * time.Second
)

// A notice published on a single node reaches its own handler; the
// notices of one publisher arrive in publish order with every field
// intact, however Publish was called.
func testDeliversInOrder(t *testing.T, be Backend) {
	a, _ := be.New(t)
	ra := newRecorder(t)
	start(t, a, ra)
	waitReady(t, a, ra)

	want := Notices("order", 1000)
	publishInGroups(a, want)
	ra.waitFor(t, "own handler", "order", want)
	if n := ra.lostCount(); n != 0 {
		t.Errorf("Lost called %d times on a healthy bus", n)
	}
}

// Two instances of one deployment hear each other (and themselves), each
// publisher's notices in its order.
func testCrossInstance(t *testing.T, be Backend) {
	if be.SingleNode() {
		t.Skip("single-node backend: one bus serves the whole deployment")
	}
	a, b := be.New(t)
	if a == b {
		t.Fatal("New returned the same bus twice, but SingleNode is false")
	}
	ra, rb := newRecorder(t), newRecorder(t)
	start(t, a, ra)
	start(t, b, rb)
	waitReady(t, a, ra, rb)
	waitReady(t, b, ra, rb)

	fromA, fromB := Notices("froma", 500), Notices("fromb", 500)
	for i := range fromA {
		a.Publish(fromA[i])
		b.Publish(fromB[i])
	}
	for _, c := range []struct {
		name string
		r    *recorder
		tag  string
		want []parley.Notice
	}{
		{"b hears a", rb, "froma", fromA},
		{"a hears b", ra, "fromb", fromB},
		{"a hears itself", ra, "froma", fromA},
		{"b hears itself", rb, "fromb", fromB},
	} {
		c.r.waitFor(t, c.name, c.tag, c.want)
	}
	if n := ra.lostCount() + rb.lostCount(); n != 0 {
		t.Errorf("Lost called %d times on a healthy bus", n)
	}
}

// Publish returns at once before Run, and while the handler is stuck.
func testPublishNeverBlocks(t *testing.T, be Backend) {
	a, _ := be.New(t)
	const n = 20000
	ns := Notices("burst", n)
	within(t, "publishing before Run", 5*time.Second, func() {
		for _, x := range ns {
			a.Publish(x)
		}
	})

	ra := newRecorder(t)
	ra.stuck = make(chan struct{})
	start(t, a, ra)
	t.Cleanup(func() { close(ra.stuck) }) // runs before start's cleanup
	// Probe until the handler is inside Notify and cannot return.
	probe(t, a, func() bool { return ra.entered.Load() })
	within(t, "publishing to a stuck handler", 5*time.Second, func() {
		for _, x := range ns {
			a.Publish(x)
		}
	})
}

// A burst of single publishes reaches the handler in fewer Notify calls
// than notices.
func testBatched(t *testing.T, be Backend) {
	a, _ := be.New(t)
	ra := newRecorder(t)
	start(t, a, ra)
	waitReady(t, a, ra)

	const n = 1000
	want := Notices("batch", n)
	for _, x := range want {
		a.Publish(x)
	}
	ra.waitFor(t, "burst", "batch", want)
	calls := ra.callsWith("batch")
	t.Logf("%d notices in %d Notify calls", n, calls)
	if calls >= n {
		t.Errorf("%d notices arrived in %d Notify calls, want fewer calls than notices", n, calls)
	}
}

// Run returns ctx.Err() soon after ctx ends, and leaves no goroutine
// behind.
func testStopsOnCancel(t *testing.T, be Backend) {
	before := settledGoroutines()
	a, b := be.New(t)
	buses := []parley.Bus{a}
	if b != a {
		buses = append(buses, b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := make([]*recorder, len(buses))
	done := make(chan error, len(buses))
	for i, bus := range buses {
		recs[i] = newRecorder(t)
		go func() { done <- bus.Run(ctx, recs[i]) }()
	}
	waitReady(t, a, recs...)
	a.Publish(Notices("late", 100)...) // in flight while stopping

	cancel()
	deadline := time.After(stopWithin)
	for range buses {
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-deadline:
			t.Fatalf("Run did not return within %v of cancel", stopWithin)
		}
	}

	// Some goroutines (a closed connection's reader) end just after.
	var now int
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if now = runtime.NumGoroutine(); now <= before {
			break
		}
	}
	if now > before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines before Run, %d after it returned; stacks:\n%s", before, now, buf)
	}

	// A context that has already ended: Run returns at once.
	dead, cancelDead := context.WithCancel(context.Background())
	cancelDead()
	within(t, "Run with an ended context", stopWithin, func() {
		if err := a.Run(dead, newRecorder(t)); !errors.Is(err, context.Canceled) {
			t.Errorf("Run with an ended context returned %v, want context.Canceled", err)
		}
	})
}

// settledGoroutines counts goroutines once those of earlier tests that
// were on their way out have gone.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 100 {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// Notices returns n notices of conversations tagged tag: event notices
// (some naming a member) and read-cursor notices, with ids at the edges of what is valid (64-character
// conversation ids, 32-character user ids, device ids with spaces,
// newlines, percent signs and non-ASCII text).
func Notices(tag string, n int) []parley.Notice {
	convs := []string{
		tag,
		tag + ".A:b-c_d.9",
		tag + "." + strings.Repeat("z", 64-len(tag)-1),
	}
	users := []string{"alice", "b0b.x-y_z", "u" + strings.Repeat("9", 31)}
	devices := []string{
		"phone", "laptop 2", "tab\there", "new\nline\r\n", "100% sure", "%41",
		"телефон", "日本のデバイス", "🙂", "-", " ", strings.Repeat("d", 64),
		strings.Repeat("é", 64), "\x01\x7f",
	}
	ns := make([]parley.Notice, n)
	for i := range ns {
		x := parley.Notice{Conv: convs[i%len(convs)], Seq: int64(i + 1)}
		switch i % 4 {
		case 1:
			x.User, x.Device = users[i%len(users)], devices[i%len(devices)]
		case 2:
			x.User, x.Device = users[i%len(users)], devices[(i/4)%len(devices)]
		case 3:
			if i%8 == 3 {
				x.User = users[i%len(users)] // an event notice naming a member
			} else {
				x.Seq = 1<<62 + int64(i)
			}
		}
		ns[i] = x
	}
	return ns
}

// tagOf is the tag of a conversation id made by Notices.
func tagOf(conv string) string {
	tag, _, _ := strings.Cut(conv, ".")
	return tag
}

// publishInGroups publishes ns with one Publish call per group, of sizes
// 1, 2, 3, ... 9, 1, 2, ...
func publishInGroups(bus parley.Bus, ns []parley.Notice) {
	for size := 1; len(ns) > 0; size = size%9 + 1 {
		k := min(size, len(ns))
		bus.Publish(ns[:k]...)
		ns = ns[k:]
	}
}

const probeTag = "probe"

// waitReady publishes probes on pub until every recorder has heard one: a
// bus that connects in the background (a listener to set up) is then
// ready. Probes still in flight are ignored by the checks.
func waitReady(t testing.TB, pub parley.Bus, recs ...*recorder) {
	t.Helper()
	probe(t, pub, func() bool {
		for _, r := range recs {
			if r.count(probeTag) == 0 {
				return false
			}
		}
		return true
	})
}

func probe(t testing.TB, pub parley.Bus, done func() bool) {
	t.Helper()
	end := time.Now().Add(deliverWithin)
	for seq := int64(1); !done(); seq++ {
		if time.Now().After(end) {
			t.Fatalf("bus not ready after %v: probes published, none delivered", deliverWithin)
		}
		pub.Publish(parley.Notice{Conv: probeTag, Seq: seq})
		time.Sleep(20 * time.Millisecond)
	}
}

// start runs bus with h until the test ends; the cleanup stops it and
// fails the test if Run does not return ctx.Err() in time.
func start(t testing.TB, bus parley.Bus, h parley.BusHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(stopWithin):
			t.Errorf("Run did not return within %v of cancel", stopWithin)
		}
	})
}

// within runs f and fails the test if it takes longer than d.
func within(t testing.TB, what string, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	begin := time.Now()
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		t.Logf("%s took %v", what, time.Since(begin).Round(time.Microsecond))
	case <-time.After(d):
		t.Fatalf("%s blocked for more than %v", what, d)
	}
}

// recorder is a BusHandler that keeps what it hears, by tag.
type recorder struct {
	t       testing.TB
	stuck   chan struct{} // if set, Notify waits for it to close
	entered atomic.Bool   // Notify has been called
	inside  atomic.Int32  // calls in progress, to catch concurrent calls

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	byTag   map[string][]parley.Notice
	calls   map[string]int // Notify calls that carried the tag
	lost    int
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, changed: make(chan struct{}), byTag: map[string][]parley.Notice{}, calls: map[string]int{}}
}

func (r *recorder) Notify(ns []parley.Notice) {
	r.enter()
	defer r.inside.Add(-1)
	r.entered.Store(true)
	if r.stuck != nil {
		<-r.stuck
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, n := range ns {
		tag := tagOf(n.Conv)
		r.byTag[tag] = append(r.byTag[tag], n)
		if !seen[tag] {
			seen[tag] = true
			r.calls[tag]++
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) Lost() {
	r.enter()
	defer r.inside.Add(-1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost++
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) enter() {
	if n := r.inside.Add(1); n > 1 {
		r.t.Errorf("handler called from %d goroutines at once", n)
	}
}

func (r *recorder) count(tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byTag[tag])
}

func (r *recorder) callsWith(tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[tag]
}

func (r *recorder) lostCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// waitFor waits until r has heard the notices tagged tag that want holds,
// and fails the test as soon as what it heard is not a prefix of want.
func (r *recorder) waitFor(t testing.TB, what, tag string, want []parley.Notice) {
	t.Helper()
	timeout := time.After(deliverWithin)
	for {
		r.mu.Lock()
		got, changed := r.byTag[tag], r.changed
		r.mu.Unlock()
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("%s: notice %d is %+v, want %+v", what, i, got[i], want[i])
			}
		}
		if len(got) > len(want) {
			t.Fatalf("%s: %d notices, want %d; the first extra is %+v", what, len(got), len(want), got[len(want)])
		}
		if len(got) == len(want) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: after %v: %s", what, deliverWithin, summary(got, len(want)))
		}
	}
}

func summary(got []parley.Notice, want int) string {
	s := fmt.Sprintf("%d of %d notices delivered", len(got), want)
	if len(got) > 0 {
		s += ", the last " + strconv.Quote(fmt.Sprintf("%+v", got[len(got)-1]))
	}
	return s
}
