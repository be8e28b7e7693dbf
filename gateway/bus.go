package gateway

import "github.com/parleychat/parley"

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
	b.h.Notify(ns)
}
func (b busHandler) Lost() { b.h.Lost() }

// Notify takes notices from the bus (or directly, on a single node) and
// hands each to its conversation's fan-out. It never blocks.
func (h *Hub) Notify(ns []parley.Notice) {
	for _, n := range ns {
		if n.Signal() {
			h.signal(n)
			continue
		}
		if n.Account() {
			h.account(n.User)
			continue
		}
		h.fanoutOf(n.Conv).notice(n)
	}
}
