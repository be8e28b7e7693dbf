package gateway

import (
	"time"

	"github.com/parleychat/parley"
)

// busHandler adapts the hub to parley.BusHandler.
type busHandler struct{ h *Hub }

func (b busHandler) Notify(ns []parley.Notice) {
	signals := 0
	for _, n := range ns {
		if n.Signal() {
			signals++
		}
	}
	b.h.stats.NoticesReceived.Add(int64(len(ns) - signals))
	b.h.stats.SignalsReceived.Add(int64(signals))
	b.h.notify(ns, true)
}
func (b busHandler) Lost() { b.h.Lost() }

// Notify takes notices from the bus (or directly, on a single node) and
// hands each to its conversation's fan-out. It never blocks.
func (h *Hub) Notify(ns []parley.Notice) { h.notify(ns, false) }

// notify is Notify; fromBus says the notices came over the bus, which
// the fan-outs that get them time (fanout.fromBus).
func (h *Hub) notify(ns []parley.Notice, fromBus bool) {
	var now int64
	if fromBus {
		now = time.Now().UnixNano()
	}
	for _, n := range ns {
		if n.Signal() {
			h.signal(n)
			continue
		}
		if n.Account() {
			h.account(n.User)
			continue
		}
		fo := h.fanoutOf(n.Conv)
		if fromBus {
			fo.fromBus(now)
		}
		fo.notice(n)
	}
}
