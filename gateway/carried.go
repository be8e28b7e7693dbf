package gateway

import (
	"slices"

	"github.com/parleychat/parley"
)

// Carried events. A notice may carry its committed event (Notice.Event:
// the publisher's own sends, when the store reports the commit time). A
// fan-out pushes such an event without reading the store when it is the
// next seq of a conversation it has pushed, in the same epoch, and it
// keeps that conversation's audience (convState.roster, fanout.go), which
// it follows over the carried events as over those it reads. Anything else
// (a gap, a new epoch, a conversation not read yet, no audience kept) goes
// through the store as before.

// keepCarriedLocked keeps n's carried event for run, which takes it with
// the notice's seq (fanout.inputs). Call it with fo.mu held.
func (fo *fanout) keepCarriedLocked(n parley.Notice) {
	fo.carried[n.Conv] = append(fo.carried[n.Conv], n)
}

// pushCarried pushes the carried events of conv that follow what was
// pushed, as far as they run without a gap, up to target.
func (fo *fanout) pushCarried(conv string, ns []parley.Notice, target int64) {
	if len(ns) == 0 {
		return
	}
	st := fo.states[conv]
	if st == nil || !st.kept() {
		return
	}
	slices.SortStableFunc(ns, func(a, b parley.Notice) int { return int(min(max(a.Seq-b.Seq, -1), 1)) })
	var evs []parley.Event
	next := st.pushed + 1
	for _, n := range ns {
		if n.Seq < next {
			continue // pushed already (an echo, a duplicate)
		}
		if n.Seq != next || n.Epoch != st.epoch {
			break
		}
		evs = append(evs, *n.Event)
		next++
	}
	if len(evs) == 0 {
		return
	}
	f := parley.Feed{Conv: conv, Events: evs, Head: max(target, next-1), Epoch: st.epoch}
	if !fo.follow(st, &f) {
		return // the store read that follows covers them
	}
	fo.deliver(st, f)
	st.pushed = next - 1
	fo.h.stats.Carried.Add(int64(len(evs)))
}
