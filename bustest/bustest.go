// Package bustest is the one behaviour suite of parley.Bus. Every bus
// implementation runs it (as storetest is run for every store):
//
//	func TestBusContract(t *testing.T) { bustest.Run(t, backend{}) }
//
// Each behaviour is a named subtest with a fresh deployment of its own. The
// suite checks what a healthy deployment does: under no failure, every
// notice of a receiver's declared interest (parley.Bus.Interest) arrives,
// in publish order per conversation and per user, and Lost is never
// called; a Selective backend delivers nothing outside the interest. What
// a bus does under failure (a dropped connection, an overflow) is specific
// to each backend and tested next to it.
//
// Carried events. A notice published with an event (Notice.Event, Epoch)
// arrives with the same event, or, when the event's body is over the
// backend's bound (Backend.MaxCarried), as ids only (Event nil, Epoch 0);
// never with an event that differs. The bounds of our buses:
//
//	inmem     none: the notice itself is handed over
//	nats      none below nats.Options.MaxMessage (64 KiB), ids only above
//	postgres  parley.MaxNoticeBody, the most a publisher attaches
//	          (Notice.WithEvent): every event a notice may carry fits in
//	          one NOTIFY payload
//
// So every bus carries every event a publisher attaches, and a gateway
// that watches the conversation pushes it without reading the store.
package bustest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
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
	// Selective reports that a receiver hears only notices of its declared
	// interest; otherwise it may hear more (interest_routing checks only
	// that it hears what it must).
	Selective() bool
	// MaxCarried is the longest Event.Body, in bytes, of a notice that
	// arrives with its carried event (Notice.Event, Epoch); a notice whose
	// event has a longer body arrives as ids only. NoBound: every carried
	// event arrives.
	MaxCarried() int
}

// NoBound is the MaxCarried of a bus that carries every event.
const NoBound = -1

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
	{"interest_routing", testInterestRouting},
	{"interest_removed", testInterestRemoved},
	{"carries_events", testCarriesEvents},
	{"carries_signals", testCarriesSignals},
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
	watchAll(a, "order")
	ra := newRecorder(t)
	start(t, a, ra)
	waitReady(t, a, ra)

	want := Notices("order", 1000)
	publishInGroups(a, want)
	ra.waitFor(t, "own handler", expect(be, want), nil)
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
	watchAll(a, "froma", "fromb")
	watchAll(b, "froma", "fromb")
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
		want []parley.Notice
	}{
		{"b hears a", rb, fromA},
		{"a hears b", ra, fromB},
		{"a hears itself", ra, fromA},
		{"b hears itself", rb, fromB},
	} {
		c.r.waitFor(t, c.name, expect(be, c.want), nil)
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

	watchAll(a, "burst")
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
	watchAll(a, "batch")
	ra := newRecorder(t)
	start(t, a, ra)
	waitReady(t, a, ra)

	const n = 1000
	want := Notices("batch", n)
	for _, x := range want {
		a.Publish(x)
	}
	ra.waitFor(t, "burst", expect(be, want), nil)
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
	watchAll(a, "late")
	watchAll(b, "late")
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

// A receiver hears every notice of its interest: event notices of the
// conversations it watches, event notices naming a user it serves, and
// read-cursor and account notices of the users it serves; each once, in
// order per conversation and per user. A Selective bus delivers nothing
// else.
func testInterestRouting(t *testing.T, be Backend) {
	watched := []string{"route.w1", "route.w2"}
	served := []string{"alice", "b0b.x-y_z"}
	a, _, rb := interested(t, be, parley.Interest{Watch: append([]string{probeTag}, watched...), Serve: served})

	entitled := func(n parley.Notice) bool {
		if n.Account() || n.Read() {
			return slices.Contains(served, n.User)
		}
		return slices.Contains(watched, n.Conv) || slices.Contains(served, n.User)
	}
	var all, want []parley.Notice
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	for i := range 200 {
		seq := int64(i + 1)
		ev := parley.Event{Conv: "route.w2", Seq: seq, MID: fmt.Sprint("m", i), Kind: parley.EventMessage, Sender: "alice", Device: "d", Body: "hello " + strconv.Itoa(i), At: at}
		round := []parley.Notice{
			{Conv: "route.w1", Seq: seq},
			parley.Notice{Conv: "route.w2", Seq: seq}.WithEvent(ev, 1),
			{Conv: "route.other", Seq: seq},
			{Conv: "route.other", Seq: seq, User: "alice"},
			{Conv: "route.other", Seq: seq, User: "carol"},
			{Conv: "route.w1", Seq: seq, User: "carol"},
			{Conv: "route.w1", Seq: seq, User: "b0b.x-y_z"},
			{Conv: "route.w1", Seq: seq, User: "alice", Device: "phone"},
			{Conv: "route.other", Seq: seq, User: "b0b.x-y_z", Device: "tab 2"},
			{Conv: "route.w1", Seq: seq, User: "carol", Device: "phone"},
			parley.AccountNotice("alice"),
			parley.AccountNotice("carol"),
		}
		for _, n := range round {
			all = append(all, n)
			if entitled(n) {
				want = append(want, n)
			}
		}
	}
	publishInGroups(a, all)
	rb.waitFor(t, "interested receiver", expect(be, want), entitled)
	if n := rb.lostCount(); n != 0 {
		t.Errorf("Lost called %d times on a healthy bus", n)
	}
	if !be.Selective() {
		return
	}
	time.Sleep(200 * time.Millisecond) // let anything misrouted arrive
	for _, n := range rb.heard() {
		if n.Conv != probeTag && !entitled(n) {
			t.Errorf("a selective bus delivered %+v outside the receiver's interest", n)
		}
	}
}

// interested starts a pair of be's buses: b declares in and runs a
// recorder (returned), a publishes (and, when it is another instance,
// watches only the probes). It returns once both hear the probes.
func interested(t *testing.T, be Backend, in parley.Interest) (a, b parley.Bus, rb *recorder) {
	t.Helper()
	a, b = be.New(t)
	b.Interest(in)
	rb = newRecorder(t)
	recs := []*recorder{rb}
	start(t, b, rb)
	if a != b {
		a.Interest(parley.Interest{Watch: []string{probeTag}})
		ra := newRecorder(t)
		start(t, a, ra)
		recs = append(recs, ra)
	}
	waitReady(t, a, recs...)
	return a, b, rb
}

// A Selective bus stops delivering a conversation once it is unwatched and
// a user's notices once the user is unserved; the rest of the interest
// stays.
func testInterestRemoved(t *testing.T, be Backend) {
	a, b, rb := interested(t, be, parley.Interest{Watch: []string{probeTag, "gone.x", "kept.y"}, Serve: []string{"alice", "cy"}})
	before := []parley.Notice{{Conv: "gone.x", Seq: 1}, {Conv: "gone.x", Seq: 1, User: "alice", Device: "phone"}, {Conv: "kept.y", Seq: 1}}
	a.Publish(before...)
	rb.waitFor(t, "before removal", before, nil)

	b.Interest(parley.Interest{Unwatch: []string{"gone.x"}, Unserve: []string{"alice"}})
	b.Interest(parley.Interest{Unwatch: []string{"never.watched"}, Unserve: []string{"nobody"}}) // no-ops
	after := []parley.Notice{
		{Conv: "gone.x", Seq: 2},
		{Conv: "gone.x", Seq: 2, User: "alice", Device: "phone"},
		parley.AccountNotice("alice"),
		{Conv: "kept.y", Seq: 2},
		{Conv: "kept.y", Seq: 2, User: "cy", Device: "tab"},
	}
	a.Publish(after...)
	rb.waitFor(t, "after removal", []parley.Notice{before[2], after[3], after[4]}, func(n parley.Notice) bool { return n.Conv == "kept.y" })
	if !be.Selective() {
		return
	}
	time.Sleep(200 * time.Millisecond)
	for _, n := range rb.heard() {
		if n.Seq == 2 && n.Conv == "gone.x" || n.Account() {
			t.Errorf("delivered %+v after its interest was removed", n)
		}
	}
}

// watchAll declares on bus the interest that covers Notices(tag, ...) of
// every tag, and the probes.
func watchAll(bus parley.Bus, tags ...string) {
	in := parley.Interest{Watch: []string{probeTag}}
	for _, tag := range tags {
		for _, n := range Notices(tag, 4) {
			in.Watch = append(in.Watch, n.Conv)
			if n.User != "" {
				in.Serve = append(in.Serve, n.User)
			}
		}
		in.Serve = append(in.Serve, noticeUsers...)
	}
	bus.Interest(in)
}

// expect is what a receiver on be hears of ns: ns, the notices whose event
// is over be's bound as ids only.
func expect(be Backend, ns []parley.Notice) []parley.Notice {
	max := be.MaxCarried()
	out := make([]parley.Notice, len(ns))
	for i, n := range ns {
		if max != NoBound && n.Event != nil && len(n.Event.Body) > max {
			n.Event, n.Epoch = nil, 0
		}
		out[i] = n
	}
	return out
}

// A notice published with an event reaches the other instance (and its
// own) with the same event, whatever the event: every kind, empty and
// system fields, a body at parley.MaxNoticeBody of the bytes hardest to
// carry (newlines, '%', spaces, 4-byte characters, control characters).
// Bodies over the bound (which Notice.WithEvent never attaches, but a
// publisher may) arrive as the backend's MaxCarried says.
func testCarriesEvents(t *testing.T, be Backend) {
	a, b := be.New(t)
	watchAll(a, "carry")
	ra := newRecorder(t)
	recs := []*recorder{ra}
	start(t, a, ra)
	rb := ra
	if b != a {
		watchAll(b, "carry")
		rb = newRecorder(t)
		start(t, b, rb)
		recs = append(recs, rb)
	}
	waitReady(t, a, recs...)

	want := CarriedNotices("carry")
	publishInGroups(a, want)
	rb.waitFor(t, "other instance", expect(be, want), nil)
	if b != a {
		ra.waitFor(t, "own instance", expect(be, want), nil)
	}
	carried := 0
	for _, n := range rb.heard() {
		if n.Event != nil && tagOf(n.Conv) == "carry" {
			carried++
		}
	}
	t.Logf("%d of %d notices arrived with their event (MaxCarried %d)", carried, len(want), be.MaxCarried())
	if n := ra.lostCount() + rb.lostCount(); n != 0 {
		t.Errorf("Lost called %d times on a healthy bus", n)
	}
}

// Typing and presence notices reach the gateways that watch their
// conversation, with every field intact, in publish order per conversation
// among themselves, whatever event notices come between them; a notice
// naming a served user of an unwatched conversation is not theirs (signals
// route by conversation alone), and a Selective bus does not deliver it.
func testCarriesSignals(t *testing.T, be Backend) {
	watched := []string{"sig.w1", "sig.w2"}
	a, _, rb := interested(t, be, parley.Interest{Watch: append([]string{probeTag}, watched...), Serve: []string{"alice"}})
	entitled := func(n parley.Notice) bool {
		return slices.Contains(watched, n.Conv) || !n.Signal() && n.User == "alice"
	}
	all := SignalNotices("sig", 300)
	var want []parley.Notice
	for _, n := range all {
		if entitled(n) {
			want = append(want, n)
		}
	}
	publishInGroups(a, all)
	rb.waitFor(t, "watching receiver", expect(be, want), entitled)
	if n := rb.lostCount(); n != 0 {
		t.Errorf("Lost called %d times on a healthy bus", n)
	}
	if !be.Selective() {
		return
	}
	time.Sleep(200 * time.Millisecond)
	for _, n := range rb.heard() {
		if n.Conv != probeTag && !entitled(n) {
			t.Errorf("a selective bus delivered %+v outside the receiver's interest", n)
		}
	}
}

// SignalNotices returns n notices of conversations tagged tag (TAG.w1,
// TAG.w2, TAG.other): typing and presence notices of every state, users
// at the edges of what is valid, times from 1970 to 9999, mixed with event
// notices of the same conversations.
func SignalNotices(tag string, n int) []parley.Notice {
	convs := []string{tag + ".w1", tag + ".w2", tag + ".other"}
	users := append([]string{"alice"}, noticeUsers...)
	states := []parley.PresenceState{parley.PresenceOnline, parley.PresenceAway, parley.PresenceOffline}
	times := []time.Time{
		time.UnixMilli(0).UTC(), time.Date(2026, 12, 7, 12, 0, 5, 123e6, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
	}
	ns := make([]parley.Notice, n)
	for i := range ns {
		conv, user, at := convs[i%len(convs)], users[i%len(users)], times[i%len(times)].Add(time.Duration(i%7)*time.Millisecond)
		if at.Year() > 9999 {
			at = times[2]
		}
		switch i % 3 {
		case 0:
			ns[i] = parley.TypingNotice(conv, user, at)
		case 1:
			ns[i] = parley.PresenceNotices(parley.Presence{User: user, State: states[(i/3)%3], LastSeen: at}, []string{conv})[0]
		default:
			ns[i] = parley.Notice{Conv: conv, Seq: int64(i + 1), User: user}
		}
	}
	return ns
}

// CarriedNotices returns event notices of conversations tagged tag, each
// carrying its event: the edge cases of what an event holds, then events
// with bodies over parley.MaxNoticeBody.
func CarriedNotices(tag string) []parley.Notice {
	at := time.Date(2026, 12, 3, 19, 0, 0, 0, time.UTC)
	bound := parley.MaxNoticeBody
	bodies := []string{
		"", "hi", "a  b  ", " ", "%", "%41", "\n", "\r\n", "\t\x01\x7f",
		strings.Repeat("\n", bound), strings.Repeat("%", bound), strings.Repeat(" ", bound),
		strings.Repeat("🙂", bound/4), strings.Repeat("x\n%", bound/3), strings.Repeat("é", bound/2),
	}
	over := []string{strings.Repeat("x", bound+1), strings.Repeat("\n", 3*bound)}
	users := noticeUsers
	var ns []parley.Notice
	add := func(conv, user string, ev parley.Event, epoch int64) {
		seq := int64(len(ns) + 1)
		ev.Conv, ev.Seq = conv, seq
		ev.At = at.Add(time.Duration(seq) * time.Millisecond)
		ns = append(ns, parley.Notice{Conv: conv, Seq: seq, User: user, Event: &ev, Epoch: epoch})
	}
	for i, body := range append(bodies, over...) {
		add(tag, "", parley.Event{MID: parley.NewID(), Kind: parley.EventMessage, Sender: users[i%len(users)], Device: "dev " + strconv.Itoa(i), Body: body}, int64(1+i%3))
	}
	add(tag, "", parley.Event{MID: parley.NewID(), Kind: parley.EventMessage, Sender: users[0], Device: strings.Repeat("🙂", parley.MaxDeviceIDChars), Recalled: true}, 1)
	add(tag, "", parley.Event{MID: parley.NewID(), Kind: parley.EventRecall, Sender: users[1], Device: "new\nline %", Target: 1}, 1)
	add(tag, users[2], parley.Event{MID: parley.NewID(), Kind: parley.EventMemberJoined, Sender: users[0], User: users[2]}, 1<<40)
	add(tag, users[1], parley.Event{MID: parley.NewID(), Kind: parley.EventMemberLeft, User: users[1]}, 1<<62) // by the system
	return ns
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

// noticeUsers are the users of Notices.
var noticeUsers = []string{"alice", "b0b.x-y_z", "u" + strings.Repeat("9", 31)}

// Notices returns n notices of conversations tagged tag: event notices
// (some naming a member, some carrying their event, with bodies up to
// MaxNoticeBody) and read-cursor notices, with ids at the edges of what is valid (64-character
// conversation ids, 32-character user ids, device ids with spaces,
// newlines, percent signs and non-ASCII text).
func Notices(tag string, n int) []parley.Notice {
	convs := []string{
		tag,
		tag + ".A:b-c_d.9",
		tag + "." + strings.Repeat("z", 64-len(tag)-1),
	}
	users := noticeUsers
	bodies := []string{"", "hi", "привет 🙂\nline two", strings.Repeat("é", parley.MaxNoticeBody/2), strings.Repeat("x", parley.MaxNoticeBody)}
	at := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	devices := []string{
		"phone", "laptop 2", "tab\there", "new\nline\r\n", "100% sure", "%41",
		"телефон", "日本のデバイス", "🙂", "-", " ", strings.Repeat("d", 64),
		strings.Repeat("é", 64), "\x01\x7f",
	}
	ns := make([]parley.Notice, n)
	for i := range ns {
		x := parley.Notice{Conv: convs[i%len(convs)], Seq: int64(i + 1)}
		if i%4 == 0 && i%3 != 2 { // a message event carried
			x = x.WithEvent(parley.Event{
				Conv: x.Conv, Seq: x.Seq, MID: fmt.Sprintf("mid-%d", i), Kind: parley.EventMessage,
				Sender: users[i%len(users)], Device: devices[i%len(devices)], Body: bodies[i%len(bodies)],
				Recalled: i%5 == 0, At: at.Add(time.Duration(i) * time.Millisecond),
			}, int64(1+i%3))
		}
		switch i % 4 {
		case 1:
			x.User, x.Device = users[i%len(users)], devices[i%len(devices)]
		case 2:
			x.User, x.Device = users[i%len(users)], devices[(i/4)%len(devices)]
		case 3:
			if i%8 == 3 {
				x.User = users[i%len(users)] // an event notice naming a member
				x = x.WithEvent(parley.Event{
					Conv: x.Conv, Seq: x.Seq, MID: fmt.Sprintf("mid-%d", i), Kind: parley.EventMemberJoined,
					Sender: "alice", User: x.User, At: at,
				}, 1<<40)
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

// recorder is a BusHandler that keeps what it hears, by stream: the
// notices of one publisher's tag and one conversation (event notices) or
// one user (read-cursor and account notices), which the contract orders.
type recorder struct {
	t       testing.TB
	stuck   chan struct{} // if set, Notify waits for it to close
	entered atomic.Bool   // Notify has been called
	inside  atomic.Int32  // calls in progress, to catch concurrent calls

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	all     []parley.Notice
	byKey   map[string][]parley.Notice
	byTag   map[string]int // notices by tag
	calls   map[string]int // Notify calls that carried the tag
	lost    int
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, changed: make(chan struct{}), byKey: map[string][]parley.Notice{}, byTag: map[string]int{}, calls: map[string]int{}}
}

// streamKey names the stream n belongs to.
func streamKey(n parley.Notice) string {
	if n.Signal() {
		return tagOf(n.Conv) + "|s:" + n.Conv
	}
	if n.Account() || n.Read() {
		return tagOf(n.Conv) + "|u:" + n.User
	}
	return tagOf(n.Conv) + "|c:" + n.Conv
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
		r.all = append(r.all, n)
		k := streamKey(n)
		r.byKey[k] = append(r.byKey[k], n)
		r.byTag[tag]++
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
	return r.byTag[tag]
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

func (r *recorder) heard() []parley.Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// waitFor waits until r has heard every notice of want, stream by stream,
// and fails the test as soon as what a stream heard is not a prefix of
// what want has in it. keep, when set, picks what counts of what r heard
// on those streams (a bus that is not Selective delivers more).
func (r *recorder) waitFor(t testing.TB, what string, want []parley.Notice, keep func(parley.Notice) bool) {
	t.Helper()
	streams := map[string][]parley.Notice{}
	var keys []string
	for _, n := range want {
		k := streamKey(n)
		if _, ok := streams[k]; !ok {
			keys = append(keys, k)
		}
		streams[k] = append(streams[k], n)
	}
	timeout := time.After(deliverWithin)
	for {
		r.mu.Lock()
		changed := r.changed
		done := true
		var behind string
		for _, k := range keys {
			got, w := r.byKey[k], streams[k]
			if keep != nil {
				got = slices.DeleteFunc(slices.Clone(got), func(n parley.Notice) bool { return !keep(n) })
			}
			for i := range min(len(got), len(w)) {
				if !got[i].Same(w[i]) {
					r.mu.Unlock()
					t.Fatalf("%s: stream %q: notice %d is %s, want %s", what, k, i, show(got[i]), show(w[i]))
				}
			}
			if len(got) > len(w) {
				r.mu.Unlock()
				t.Fatalf("%s: stream %q: %d notices, want %d; the first extra is %s", what, k, len(got), len(w), show(got[len(w)]))
			}
			if len(got) < len(w) {
				done = false
				behind = fmt.Sprintf("stream %q: %s", k, summary(got, len(w)))
			}
		}
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: after %v: %s", what, deliverWithin, behind)
		}
	}
}

func show(n parley.Notice) string {
	s := fmt.Sprintf("%+v", n)
	if n.Event != nil {
		s += fmt.Sprintf(" with event %+v", *n.Event)
	}
	return strconv.Quote(s)
}

func summary(got []parley.Notice, want int) string {
	s := fmt.Sprintf("%d of %d notices delivered", len(got), want)
	if len(got) > 0 {
		s += ", the last " + show(got[len(got)-1])
	}
	return s
}
