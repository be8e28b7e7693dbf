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

// worker pushes the events of the conversations hashed to it, one
// conversation at a time and each in seq order. Inputs (notices, baselines,
// backstop heads) are merged into maps under a mutex, so producers never
// block and a burst of notices for one conversation costs one Feed.
type worker struct {
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

	// sending counts the sends to this worker's conversations being
	// committed through this gateway (conn.handle); the one that takes
	// it to zero wakes the worker.
	sending atomic.Int64
}

type readKey struct{ conv, user, device string }

// inputs is what producers hand a worker between two of its wakes, merged.
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

func newWorker(h *Hub) *worker {
	return &worker{
		h: h, signal: make(chan struct{}, 1),
		inputs: newInputs(), spare: newInputs(),
		states: map[string]*convState{}, held: map[*conn]struct{}{},
		linger: time.NewTimer(time.Hour),
	}
}

// sendStarted and sendDone bracket a send to one of w's conversations,
// from before its commit to after its notice is published.
func (w *worker) sendStarted() { w.sending.Add(1) }

func (w *worker) sendDone() {
	if w.sending.Add(-1) == 0 {
		w.wake()
	}
}

func (w *worker) wake() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *worker) notice(n parley.Notice) {
	w.mu.Lock()
	if n.Read() {
		k := readKey{n.Conv, n.User, n.Device}
		if old, ok := w.reads[k]; !ok || old.Seq < n.Seq {
			w.reads[k] = n
		}
	} else {
		if n.Seq > w.want[n.Conv] {
			w.want[n.Conv] = n.Seq
		}
		if n.User != "" {
			w.named[n.Conv] = append(w.named[n.Conv], n.User)
		}
		if n.Event != nil {
			w.keepCarriedLocked(n)
		}
	}
	w.mu.Unlock()
	w.wake()
}

func (w *worker) baseline(hd parley.Head) {
	w.mu.Lock()
	w.base[hd.Conv] = hd
	w.mu.Unlock()
	w.wake()
}

// join is a join re-learned after a bus loss: p.User is in p.Conv since
// p.From. A conversation not pushed here yet starts at the join (as the
// lost notice would have made it); one already pushed goes on from there,
// which covers the join too.
func (w *worker) join(p parley.OpenPeriod) {
	w.mu.Lock()
	if s, ok := w.start[p.Conv]; !ok || p.From-1 < s {
		w.start[p.Conv] = p.From - 1
	}
	if p.Seq > w.want[p.Conv] {
		w.want[p.Conv] = p.Seq
	}
	w.named[p.Conv] = append(w.named[p.Conv], p.User)
	w.mu.Unlock()
	w.wake()
}

// forgetRosters makes the worker read the periods again (Feed) for every
// conversation: after a bus loss it trusts nothing it kept but what it
// pushed. The roster follows the log, not the notices, so this is caution.
func (w *worker) forgetRosters() {
	w.mu.Lock()
	w.forget = true
	w.mu.Unlock()
	w.wake()
}

func (w *worker) check(hd parley.Head) {
	w.mu.Lock()
	w.heads[hd.Conv] = hd
	w.mu.Unlock()
	w.wake()
}

func (w *worker) run(ctx context.Context) {
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	defer w.release() // nothing stays held when the worker ends
	for {
		if len(w.held) > 0 {
			// The wave leaves once nothing more waits for the worker, the
			// previous one's writers have taken their batches (its last
			// writer wakes the worker) and no send to its conversations
			// is being committed here (awaitSends), or once it was held
			// for holdEvents wakes (with events it holds for as many
			// events, deliver), so a busy worker does not hold it for
			// long.
			w.heldWakes++
			if w.heldWakes > holdEvents || (w.prevTaken() && w.idle() && !w.awaitSends()) {
				w.release()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			for conv := range w.states { // their rosters with them
				if !w.h.isWatched(conv) {
					delete(w.states, conv)
				}
			}
			continue
		case <-w.signal:
		case <-w.linger.C:
		}
		w.mu.Lock()
		in := w.inputs
		w.inputs = w.spare
		forget := w.forget
		w.forget = false
		w.mu.Unlock()
		want, named, base, start, heads, reads, carried := in.want, in.named, in.base, in.start, in.heads, in.reads, in.carried

		if forget {
			for _, st := range w.states {
				st.roster = nil
			}
		}

		for conv, seq := range start { // before base and heads: they would start at the head
			if w.states[conv] == nil {
				w.states[conv] = &convState{pushed: seq}
			}
		}
		for conv, hd := range base {
			if w.states[conv] == nil {
				w.states[conv] = &convState{pushed: hd.Seq, epoch: hd.Epoch}
			}
		}
		for conv, hd := range heads {
			st := w.states[conv]
			switch {
			case st == nil:
				w.states[conv] = &convState{pushed: hd.Seq, epoch: hd.Epoch}
			case st.epoch != 0 && st.epoch != hd.Epoch:
				w.epochChanged(conv, hd)
			case hd.Seq > st.pushed:
				w.h.stats.Backstops.Add(1)
				if hd.Seq > want[conv] {
					want[conv] = hd.Seq
				}
			}
		}
		for conv, seq := range want {
			if ctx.Err() != nil {
				return
			}
			if w.states[conv] == nil && !w.h.isWatched(conv) && !w.h.anySubscribed(named[conv]) {
				continue // none of our sockets may see it: not worth a read
			}
			w.pushCarried(conv, carried[conv], seq)
			w.advance(ctx, conv, seq)
		}
		for _, n := range reads {
			w.readHint(n)
		}
		in.reset()
		w.spare = in
	}
}

// advance pushes conv's events up to target, reading from the last pushed
// seq, so a gap in the notices is filled from the store.
func (w *worker) advance(ctx context.Context, conv string, target int64) {
	st := w.states[conv]
	if st == nil {
		// Nobody here watched conv, and a user of ours was just added: start
		// at the announced seq, their join event.
		st = &convState{pushed: target - 1}
		w.states[conv] = st
	}
	for st.pushed < target {
		if len(w.held) > 0 && w.prevTaken() {
			w.release() // what is queued does not wait for a store read
		}
		kept := st.kept()
		read := w.h.store.Feed
		if kept {
			read = w.h.store.FeedEvents
		} else {
			w.h.stats.MemberReads.Add(1)
		}
		fctx, cancel := context.WithTimeout(ctx, w.h.timeout())
		f, err := read(fctx, conv, st.pushed, parley.MaxPage)
		cancel()
		if err != nil {
			if parley.ErrorCode(err) == parley.CodeNotFound {
				delete(w.states, conv)
			} else if ctx.Err() == nil {
				// The backstop will try again.
				w.h.log.Warn("fan-out: feed failed", "conv", conv, "after", st.pushed, "err", err)
			}
			return
		}
		if st.epoch != 0 && f.Epoch != st.epoch {
			w.epochChanged(conv, parley.Head{Conv: conv, Seq: f.Head, Epoch: f.Epoch})
			return
		}
		st.epoch = f.Epoch
		if len(f.Events) == 0 {
			return // nothing committed past pushed (a stale notice)
		}
		if kept && !w.follow(st, &f) {
			continue // read again, with the periods
		}
		w.deliver(st, f)
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
func (w *worker) follow(st *convState, f *parley.Feed) bool {
	members, next, ok := st.roster.Follow(*f)
	if !ok {
		st.roster = nil
		w.h.stats.RosterLost.Add(1)
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
// The sockets' writers are held: they are started by the worker's wave
// (release), so the events of one wake, and those queued while the last
// wave was being written, leave in one batch (one write) per socket.
func (w *worker) deliver(st *convState, f parley.Feed) {
	caps := formerCaps(f)
	steady := steadyMembers(f)
	for _, ev := range f.Events {
		if fault.Hit(fault.GatewayPush) != nil {
			continue // lab fault: this push is lost (the client must notice the gap)
		}
		w.audienceOf(&st.aud, f, ev.Seq, steady)
		audience := st.aud.users
		if len(audience) == 0 {
			continue
		}
		large := len(audience) > w.h.o.HintMembers
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
				w.held[c] = struct{}{}
			}
		}
		if !large {
			if w.heldEvents == 0 {
				w.heldSince = time.Now()
			}
			w.heldEvents++
			if w.heldEvents >= holdEvents {
				w.release()
			}
		}
	}
}

// holdEvents bounds a wave: a socket's writer is held for at most this
// many events queued by the worker (to any socket), or this many wakes of
// the worker, before it is started.
const holdEvents = 16

// A wave is one release of held writers. The worker releases the next one
// only once every writer this one started has taken its first batch
// (prevTaken): while they run, the events that come in are queued behind
// them and leave together in the next wave, instead of each starting a
// writer of its own and leaving in a write of one or two frames.
type wave struct {
	w *worker
	n atomic.Int64 // writers started and yet to take their batch, +1 while releasing
}

// taken is called by a writer of wv once it took its first batch; the last
// one wakes the worker, which may be waiting to release the next wave.
func (wv *wave) taken() {
	if wv != nil && wv.n.Add(-1) == 0 {
		wv.w.wake()
	}
}

// release starts the writers of the held sockets, as one wave.
func (w *worker) release() {
	w.heldEvents, w.heldWakes, w.lingered = 0, 0, false
	if len(w.held) == 0 {
		return
	}
	w.h.stats.Waves.Add(1)
	wv := &wave{w: w}
	wv.n.Store(1) // the count cannot reach 0, and wake, before all are started
	for c := range w.held {
		c.startWriterWave(wv)
	}
	clear(w.held)
	w.prev = wv
	wv.n.Add(-1) // no wake needed: the worker is here
}

// awaitSends reports whether the held wave waits for the sends being
// committed here to its conversations, whose events would join it: while
// there are some and the wave was held for less than Linger. The worker
// is woken by the last of them (sendDone) or by the linger timer.
func (w *worker) awaitSends() bool {
	if w.h.o.Linger < 0 || w.sending.Load() == 0 {
		return false
	}
	left := w.h.o.Linger - time.Since(w.heldSince)
	if left <= 0 {
		return false
	}
	if !w.lingered {
		w.lingered = true
		w.h.stats.Lingered.Add(1)
	}
	w.linger.Reset(left)
	return true
}

// prevTaken reports whether every writer of the last wave has taken its
// batch.
func (w *worker) prevTaken() bool {
	return w.prev == nil || w.prev.n.Load() == 0
}

// idle reports whether nothing waits for the worker: no notice, baseline,
// head or carried event came in since it took its inputs.
func (w *worker) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inputs.empty() && !w.forget
}

// audience is who a conversation's last pushed event went to: the users
// who may see it and their subscribed sockets. Consecutive events of a
// conversation nearly always have the same audience (it changes only at a
// membership event), so the worker keeps it between events and batches and
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
func (w *worker) audienceOf(a *audience, f parley.Feed, seq int64, steady bool) {
	gen := w.h.subGen.Load()
	if steady && a.valid && a.from == &f.Members[0] && a.n == len(f.Members) {
		if a.gen != gen {
			a.conns = w.h.subscribers(f.Conv, a.users...)
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
			a.conns = w.h.subscribers(f.Conv, a.users...)
			a.gen = gen
		}
		return
	}
	a.users = f.Audience(seq)
	a.conns = w.h.subscribers(f.Conv, a.users...)
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
func (w *worker) epochChanged(conv string, hd parley.Head) {
	w.states[conv] = &convState{pushed: hd.Seq, epoch: hd.Epoch}
	f := &frame{b: wire.MarshalFrame(wire.Resync())}
	for _, c := range w.h.watchers(conv) {
		c.control(f)
	}
}

// readHint tells a user's other devices that their read cursor moved. Its
// head is the read seq itself: the notice does not say whether the user is
// still a member, and the conversation's head would tell a former member
// of activity after they left. A read seq is never above the reader's
// capped head (the store refuses CURSOR_AHEAD), and events after it reach
// the devices as pushes of their own.
func (w *worker) readHint(n parley.Notice) {
	head := n.Seq
	read := n.Seq
	var fr *frame
	for _, c := range w.h.subscribers(n.Conv, n.User) {
		if c.p.DeviceID == n.Device {
			continue
		}
		if fr == nil {
			fr = &frame{b: wire.MarshalFrame(wire.Hint(n.Conv, head, &read))}
		}
		c.control(fr)
		w.h.stats.Hinted.Add(1)
	}
}

// worker returns the fan-out worker that owns conv.
func (h *Hub) worker(conv string) *worker {
	// FNV-1a: stable, cheap, no allocation.
	var x uint32 = 2166136261
	for i := 0; i < len(conv); i++ {
		x ^= uint32(conv[i])
		x *= 16777619
	}
	return h.workers[x%uint32(len(h.workers))]
}
