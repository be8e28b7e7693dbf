package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/wire"
)

// fanout pushes committed events to the sockets that may see them, for
// the conversations hashed to it (Hub.fanoutOf): one goroutine (run), one
// conversation at a time and each in seq order. It reads the events after
// the last seq it pushed (or takes them from the notices that carry them),
// decides their audience from the membership periods, and queues each,
// encoded once, to the audience's subscribed sockets, whose writers it
// starts in waves. Inputs (notices, baselines, backstop heads) are merged
// into maps under a mutex, so producers never block and a burst of notices
// for one conversation costs one Feed.
type fanout struct {
	h      *Hub
	signal chan struct{}

	mu sync.Mutex
	inputs
	forget bool // the bus lost notices: drop the kept audiences

	// spare is the other set of input maps, owned by run: it swaps the two
	// at each wake and empties the one it took once done with it, so a
	// wake allocates no maps.
	spare inputs

	states map[string]*convState // owned by run

	// The wave being gathered, owned by run: the sockets with pushes
	// queued and their writer not started, and how many events and wakes
	// it has held them for (release).
	held       map[*conn]struct{}
	heldEvents int
	heldWakes  int
	prev       *wave     // the last wave released
	heldSince  time.Time // when the first push of the wave was held
	lingered   bool      // the held wave has waited for sends (awaitSends)
	linger     *time.Timer

	// sending counts the sends to this fan-out's conversations being
	// committed through this gateway (conn.handle); the one that takes
	// it to zero wakes the fan-out.
	sending atomic.Int64
}

type readKey struct{ conv, user, device string }

// inputs is what producers hand a fan-out between two of its wakes, merged.
type inputs struct {
	want  map[string]int64       // conv → highest committed seq announced
	named map[string][]string    // conv → members named by membership notices
	base  map[string]parley.Head // conv → head when a socket subscribed
	start map[string]int64       // conv → pushed seq to start from, after a bus loss (join)
	heads map[string]parley.Head // conv → head the backstop read
	reads map[readKey]parley.Notice

	carried map[string][]parley.Notice // conv → notices carrying events (carried.go)
}

func newInputs() inputs {
	return inputs{
		want: map[string]int64{}, named: map[string][]string{}, base: map[string]parley.Head{}, start: map[string]int64{},
		heads: map[string]parley.Head{}, reads: map[readKey]parley.Notice{}, carried: map[string][]parley.Notice{},
	}
}

// reuseMax is the most entries an input map may have held to be emptied
// for reuse; a larger one (a burst: a bus loss, a backstop round over
// many conversations) is dropped, as clearing costs its size every wake.
const reuseMax = 256

// reset empties in for reuse.
func (in *inputs) reset() {
	resetMap(&in.want)
	resetMap(&in.named)
	resetMap(&in.base)
	resetMap(&in.start)
	resetMap(&in.heads)
	resetMap(&in.reads)
	resetMap(&in.carried)
}

func resetMap[K comparable, V any](m *map[K]V) {
	if len(*m) > reuseMax {
		*m = map[K]V{}
		return
	}
	clear(*m)
}

// empty reports whether nothing came in.
func (in *inputs) empty() bool {
	return len(in.want) == 0 && len(in.named) == 0 && len(in.base) == 0 && len(in.start) == 0 &&
		len(in.heads) == 0 && len(in.reads) == 0 && len(in.carried) == 0
}

// convState is what this gateway has pushed of one conversation.
type convState struct {
	pushed int64 // every seq up to here was handed to the sockets
	epoch  int64
	aud    audience // who the last event pushed went to

	// roster is the conversation's membership after the last event read
	// (from the store's periods, then followed over the membership events
	// pushed), so a steady-state batch reads only events (FeedEvents). It
	// is nil until a Feed taught it, and dropped whenever it cannot be
	// followed: a gap, a purge, a new epoch, a bus loss.
	roster *parley.Roster
}

// kept reports whether st's roster holds for the event after pushed.
func (st *convState) kept() bool {
	return st.roster != nil && st.roster.At == st.pushed && st.roster.Epoch == st.epoch && st.epoch != 0
}

func newFanout(h *Hub) *fanout {
	return &fanout{
		h: h, signal: make(chan struct{}, 1),
		inputs: newInputs(), spare: newInputs(),
		states: map[string]*convState{}, held: map[*conn]struct{}{},
		linger: time.NewTimer(time.Hour),
	}
}

// sendStarted and sendDone bracket a send to one of fo's conversations,
// from before its commit to after its notice is published.
func (fo *fanout) sendStarted() { fo.sending.Add(1) }

func (fo *fanout) sendDone() {
	if fo.sending.Add(-1) == 0 {
		fo.wake()
	}
}

func (fo *fanout) wake() {
	select {
	case fo.signal <- struct{}{}:
	default:
	}
}

func (fo *fanout) notice(n parley.Notice) {
	fo.mu.Lock()
	if n.Read() {
		k := readKey{n.Conv, n.User, n.Device}
		if old, ok := fo.reads[k]; !ok || old.Seq < n.Seq {
			fo.reads[k] = n
		}
	} else {
		if n.Seq > fo.want[n.Conv] {
			fo.want[n.Conv] = n.Seq
		}
		if n.User != "" {
			fo.named[n.Conv] = append(fo.named[n.Conv], n.User)
		}
		if n.Event != nil {
			fo.keepCarriedLocked(n)
		}
	}
	fo.mu.Unlock()
	fo.wake()
}

func (fo *fanout) baseline(hd parley.Head) {
	fo.mu.Lock()
	fo.base[hd.Conv] = hd
	fo.mu.Unlock()
	fo.wake()
}

// join is a join re-learned after a bus loss: p.User is in p.Conv since
// p.From. A conversation not pushed here yet starts at the join (as the
// lost notice would have made it); one already pushed goes on from there,
// which covers the join too.
func (fo *fanout) join(p parley.OpenPeriod) {
	fo.mu.Lock()
	if s, ok := fo.start[p.Conv]; !ok || p.From-1 < s {
		fo.start[p.Conv] = p.From - 1
	}
	if p.Seq > fo.want[p.Conv] {
		fo.want[p.Conv] = p.Seq
	}
	fo.named[p.Conv] = append(fo.named[p.Conv], p.User)
	fo.mu.Unlock()
	fo.wake()
}

// forgetRosters makes the fan-out read the periods again (Feed) for every
// conversation: after a bus loss it trusts nothing it kept but what it
// pushed. The roster follows the log, not the notices, so this is caution.
func (fo *fanout) forgetRosters() {
	fo.mu.Lock()
	fo.forget = true
	fo.mu.Unlock()
	fo.wake()
}

func (fo *fanout) check(hd parley.Head) {
	fo.mu.Lock()
	fo.heads[hd.Conv] = hd
	fo.mu.Unlock()
	fo.wake()
}

// run is the fan-out's goroutine: at each wake it takes what came in
// (take), brings its conversations' states up to it (settle) and pushes
// (push); between wakes it releases the held wave when it may, and once a
// minute it forgets the conversations nobody here watches any more.
func (fo *fanout) run(ctx context.Context) {
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	defer fo.release() // nothing stays held when the fan-out ends
	for {
		if len(fo.held) > 0 {
			// The wave leaves once nothing more waits for the fan-out, the
			// previous one's writers have taken their batches (its last
			// writer wakes the fan-out) and no send to its conversations
			// is being committed here (awaitSends), or once it was held
			// for holdEvents wakes (with events it holds for as many
			// events, deliver), so a busy fan-out does not hold it for
			// long.
			fo.heldWakes++
			if fo.heldWakes > holdEvents || (fo.prevTaken() && fo.idle() && !fo.awaitSends()) {
				fo.release()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			for conv := range fo.states { // their rosters with them
				if !fo.h.isWatched(conv) {
					delete(fo.states, conv)
				}
			}
			continue
		case <-fo.signal:
		case <-fo.linger.C:
		}
		in, forget := fo.take()
		fo.settle(in, forget)
		if !fo.push(ctx, in) {
			return
		}
		in.reset()
		fo.spare = in
	}
}

// take returns what came in since the last wake, and whether the kept
// rosters are to be forgotten (a bus loss); the spare maps take its place.
func (fo *fanout) take() (inputs, bool) {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	in := fo.inputs
	fo.inputs = fo.spare
	forget := fo.forget
	fo.forget = false
	return in, forget
}

// settle brings the conversations' states up to in: the kept rosters
// forgotten after a bus loss, conversations started at a re-learned join,
// a subscription's baseline or a backstop head, and a backstop head ahead
// of what was pushed made a target of push (in.want).
func (fo *fanout) settle(in inputs, forget bool) {
	if forget {
		for _, st := range fo.states {
			st.roster = nil
		}
	}
	for conv, seq := range in.start { // before base and heads: they would start at the head
		if fo.states[conv] == nil {
			fo.states[conv] = &convState{pushed: seq}
		}
	}
	for conv, hd := range in.base {
		if fo.states[conv] == nil {
			fo.states[conv] = &convState{pushed: hd.Seq, epoch: hd.Epoch}
		}
	}
	for conv, hd := range in.heads {
		st := fo.states[conv]
		switch {
		case st == nil:
			fo.states[conv] = &convState{pushed: hd.Seq, epoch: hd.Epoch}
		case st.epoch != 0 && st.epoch != hd.Epoch:
			fo.epochChanged(conv, hd)
		case hd.Seq > st.pushed:
			fo.h.stats.Backstops.Add(1)
			if hd.Seq > in.want[conv] {
				in.want[conv] = hd.Seq
			}
		}
	}
}

// push pushes every conversation of in.want up to its target (the carried
// events first, then the store's) and the read hints of in.reads; false
// when ctx ended meanwhile.
func (fo *fanout) push(ctx context.Context, in inputs) bool {
	for conv, seq := range in.want {
		if ctx.Err() != nil {
			return false
		}
		if fo.states[conv] == nil && !fo.h.isWatched(conv) && !fo.h.anySubscribed(in.named[conv]) {
			continue // none of our sockets may see it: not worth a read
		}
		fo.pushCarried(conv, in.carried[conv], seq)
		fo.advance(ctx, conv, seq)
	}
	for _, n := range in.reads {
		fo.readHint(n)
	}
	return true
}

// advance pushes conv's events up to target, reading from the last pushed
// seq, so a gap in the notices is filled from the store.
func (fo *fanout) advance(ctx context.Context, conv string, target int64) {
	st := fo.states[conv]
	if st == nil {
		// Nobody here watched conv, and a user of ours was just added: start
		// at the announced seq, their join event.
		st = &convState{pushed: target - 1}
		fo.states[conv] = st
	}
	for st.pushed < target {
		if len(fo.held) > 0 && fo.prevTaken() {
			fo.release() // what is queued does not wait for a store read
		}
		kept := st.kept()
		read := fo.h.store.Feed
		if kept {
			read = fo.h.store.FeedEvents
		} else {
			fo.h.stats.MemberReads.Add(1)
		}
		fctx, cancel := context.WithTimeout(ctx, fo.h.timeout())
		f, err := read(fctx, conv, st.pushed, parley.MaxPage)
		cancel()
		if err != nil {
			if parley.ErrorCode(err) == parley.CodeNotFound {
				delete(fo.states, conv)
			} else if ctx.Err() == nil {
				// The backstop will try again.
				fo.h.log.Warn("fan-out: feed failed", "conv", conv, "after", st.pushed, "err", err)
			}
			return
		}
		if st.epoch != 0 && f.Epoch != st.epoch {
			fo.epochChanged(conv, parley.Head{Conv: conv, Seq: f.Head, Epoch: f.Epoch})
			return
		}
		st.epoch = f.Epoch
		if len(f.Events) == 0 {
			return // nothing committed past pushed (a stale notice)
		}
		if kept && !fo.follow(st, &f) {
			continue // read again, with the periods
		}
		fo.deliver(st, f)
		st.pushed = f.Events[len(f.Events)-1].Seq
		if !kept {
			r, _ := parley.RosterOf(f)
			st.roster = &r
		}
	}
}

// follow fills f's Members from st's roster and the membership events of
// f, and moves the roster past f. It reports false, dropping the roster,
// when the roster cannot tell (Roster.Follow): f must then be read with
// its periods. f's head is capped at its last event when it is above:
// the events do not say who left after it, and a former member must learn
// nothing of activity after their leaving (a later push tells the rest).
func (fo *fanout) follow(st *convState, f *parley.Feed) bool {
	members, next, ok := st.roster.Follow(*f)
	if !ok {
		st.roster = nil
		fo.h.stats.RosterLost.Add(1)
		return false
	}
	f.Members = members
	if last := f.Events[len(f.Events)-1].Seq; f.Head > last {
		f.Head = last
	}
	st.roster = &next
	return true
}

// deliver queues each event to every subscribed socket of every user who
// may see it, encoded once; large conversations get a hint instead. A hint
// (here, or a push over the high-water mark) carries the head capped for
// its user: a former member learns nothing above their last visible seq.
//
// The sockets' writers are held: they are started by the fan-out's wave
// (release), so the events of one wake, and those queued while the last
// wave was being written, leave in one batch (one write) per socket.
func (fo *fanout) deliver(st *convState, f parley.Feed) {
	caps := formerCaps(f)
	steady := steadyMembers(f)
	for _, ev := range f.Events {
		if fault.Hit(fault.GatewayPush) != nil {
			continue // lab fault: this push is lost (the client must notice the gap)
		}
		fo.audienceOf(&st.aud, f, ev.Seq, steady)
		audience := st.aud.users
		if len(audience) == 0 {
			continue
		}
		large := len(audience) > fo.h.o.HintMembers
		var fr *frame
		if !large {
			fr = &frame{b: wire.MarshalFrame(wire.EventPush(ev))}
		}
		for _, c := range st.aud.conns {
			head := f.Head
			if hd, ok := caps[c.p.User]; ok {
				head = hd
			}
			if large {
				c.hint(f.Conv, head)
			} else {
				c.pushHeld(fr, f.Conv, head)
				fo.held[c] = struct{}{}
			}
		}
		if !large {
			if fo.heldEvents == 0 {
				fo.heldSince = time.Now()
			}
			fo.heldEvents++
			if fo.heldEvents >= holdEvents {
				fo.release()
			}
		}
	}
}

// holdEvents bounds a wave: a socket's writer is held for at most this
// many events queued by the fan-out (to any socket), or this many wakes of
// the fan-out, before it is started.
const holdEvents = 16

// A wave is one release of held writers. The fan-out releases the next one
// only once every writer this one started has taken its first batch
// (prevTaken): while they run, the events that come in are queued behind
// them and leave together in the next wave, instead of each starting a
// writer of its own and leaving in a write of one or two frames.
type wave struct {
	fo *fanout
	n  atomic.Int64 // writers started and yet to take their batch, +1 while releasing
}

// taken is called by a writer of wv once it took its first batch; the last
// one wakes the fan-out, which may be waiting to release the next wave.
func (wv *wave) taken() {
	if wv != nil && wv.n.Add(-1) == 0 {
		wv.fo.wake()
	}
}

// release starts the writers of the held sockets, as one wave.
func (fo *fanout) release() {
	fo.heldEvents, fo.heldWakes, fo.lingered = 0, 0, false
	if len(fo.held) == 0 {
		return
	}
	fo.h.stats.Waves.Add(1)
	wv := &wave{fo: fo}
	wv.n.Store(1) // the count cannot reach 0, and wake, before all are started
	for c := range fo.held {
		c.startWriterWave(wv)
	}
	clear(fo.held)
	fo.prev = wv
	wv.n.Add(-1) // no wake needed: the fan-out is here
}

// awaitSends reports whether the held wave waits for the sends being
// committed here to its conversations, whose events would join it: while
// there are some and the wave was held for less than Linger. The fan-out
// is woken by the last of them (sendDone) or by the linger timer.
func (fo *fanout) awaitSends() bool {
	if fo.h.o.Linger < 0 || fo.sending.Load() == 0 {
		return false
	}
	left := fo.h.o.Linger - time.Since(fo.heldSince)
	if left <= 0 {
		return false
	}
	if !fo.lingered {
		fo.lingered = true
		fo.h.stats.Lingered.Add(1)
	}
	fo.linger.Reset(left)
	return true
}

// prevTaken reports whether every writer of the last wave has taken its
// batch.
func (fo *fanout) prevTaken() bool {
	return fo.prev == nil || fo.prev.n.Load() == 0
}

// idle reports whether nothing waits for the fan-out: no notice, baseline,
// head or carried event came in since it took its inputs.
func (fo *fanout) idle() bool {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	return fo.inputs.empty() && !fo.forget
}

// audience is who a conversation's last pushed event went to: the users
// who may see it and their subscribed sockets. Consecutive events of a
// conversation nearly always have the same audience (it changes only at a
// membership event), so the fan-out keeps it between events and batches and
// asks the hub for the sockets again only when the users changed or the
// hub's subscriptions did.
type audience struct {
	users []string
	conns []*conn
	gen   uint64 // the hub's subscription generation conns were read at
	valid bool

	// from and n name the periods users was made of, when every one of
	// them covered its whole batch (steadyMembers). A roster's periods
	// are shared between batches and never modified, so the same periods
	// again, steady again, mean the same users without a look at them.
	from *parley.Membership
	n    int
}

// steadyMembers reports whether every period of f covers all of f's
// events: the audience is then the same for each of them.
func steadyMembers(f parley.Feed) bool {
	if len(f.Events) == 0 || len(f.Members) == 0 {
		return false
	}
	first, last := f.Events[0].Seq, f.Events[len(f.Events)-1].Seq
	for _, m := range f.Members {
		if !m.Contains(first) || !m.Contains(last) {
			return false
		}
	}
	return true
}

// audienceOf makes a the audience of seq in f: kept when the users who may
// see seq are the same as a's (the same steady periods, or compared in
// f.Members' order, which the stores and Roster.Follow keep stable) and no
// socket subscribed or left since.
func (fo *fanout) audienceOf(a *audience, f parley.Feed, seq int64, steady bool) {
	gen := fo.h.subGen.Load()
	if steady && a.valid && a.from == &f.Members[0] && a.n == len(f.Members) {
		if a.gen != gen {
			a.conns = fo.h.subscribers(f.Conv, a.users...)
			a.gen = gen
		}
		return
	}
	a.from, a.n = nil, 0
	if steady {
		a.from, a.n = &f.Members[0], len(f.Members)
	}
	same := a.valid
	i := 0
	for _, m := range f.Members {
		if !m.Contains(seq) {
			continue
		}
		if same && (i >= len(a.users) || a.users[i] != m.User) {
			same = false
		}
		i++
	}
	if same && i == len(a.users) {
		if a.gen != gen {
			a.conns = fo.h.subscribers(f.Conv, a.users...)
			a.gen = gen
		}
		return
	}
	a.users = f.Audience(seq)
	a.conns = fo.h.subscribers(f.Conv, a.users...)
	a.gen = gen
	a.valid = true
}

// formerCaps returns, for each user of f whose last period in f has ended,
// the head capped for them (Periods.Head): the end of that period. Users
// with an open period see f.Head and are left out. A period that starts
// after f's events is not in f; its join event comes in a later Feed, with
// its own heads. When every period is open (the usual case) it is nil.
func formerCaps(f parley.Feed) map[string]int64 {
	ended := false
	for _, m := range f.Members {
		if !m.Open() {
			ended = true
			break
		}
	}
	if !ended {
		return nil
	}
	last := map[string]parley.Period{}
	for _, m := range f.Members {
		if p, ok := last[m.User]; !ok || m.From > p.From {
			last[m.User] = m.Period
		}
	}
	caps := map[string]int64{}
	for u, p := range last {
		if !p.Open() {
			caps[u] = parley.Periods{p}.Head(f.Head)
		}
	}
	return caps
}

// epochChanged handles a rollback: its seqs will be reused, so a hint (which
// a client follows only when the head is past its cursor) is not enough;
// every socket watching conv gets resync, its next sync of conv answers
// EPOCH_CHANGED and it rebuilds. Pushing goes on from the new head.
func (fo *fanout) epochChanged(conv string, hd parley.Head) {
	fo.states[conv] = &convState{pushed: hd.Seq, epoch: hd.Epoch}
	f := &frame{b: wire.MarshalFrame(wire.Resync())}
	for _, c := range fo.h.watchers(conv) {
		c.control(f)
	}
}

// readHint tells a user's other devices that their read cursor moved. Its
// head is the read seq itself: the notice does not say whether the user is
// still a member, and the conversation's head would tell a former member
// of activity after they left. A read seq is never above the reader's
// capped head (the store refuses CURSOR_AHEAD), and events after it reach
// the devices as pushes of their own.
func (fo *fanout) readHint(n parley.Notice) {
	head := n.Seq
	read := n.Seq
	var fr *frame
	for _, c := range fo.h.subscribers(n.Conv, n.User) {
		if c.p.DeviceID == n.Device {
			continue
		}
		if fr == nil {
			fr = &frame{b: wire.MarshalFrame(wire.Hint(n.Conv, head, &read))}
		}
		c.control(fr)
		fo.h.stats.Hinted.Add(1)
	}
}

// fanoutOf returns the fan-out (its goroutine) that owns conv:
// always the same one, so conv's pushes stay in seq order.
func (h *Hub) fanoutOf(conv string) *fanout {
	// FNV-1a: stable, cheap, no allocation.
	var x uint32 = 2166136261
	for i := 0; i < len(conv); i++ {
		x ^= uint32(conv[i])
		x *= 16777619
	}
	return h.fanouts[x%uint32(len(h.fanouts))]
}
