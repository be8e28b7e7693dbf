package gateway

import "github.com/parleychat/parley"

// Interest. The hub tells its bus what it hears (parley.Bus.Interest): the
// conversations some subscribed socket watches (h.watch going from 0 to 1
// and back), and the users it has open sockets of (h.byUser gaining and
// losing a user). Declarations are made under h.mu, where those maps
// change, so the bus sees them in the order they happened; Bus.Interest
// never blocks on the network. A conversation watched just now may miss a
// notice published before the broker has the new subscription: the
// backstop poll pushes it, as for any lost notice.

// watchLocked makes the subscribed socket whose watch set is ws watch
// conv, and reports whether conv is newly watched here (the caller
// declares it). Every socket starts to watch a conversation through it:
// when it subscribes, when its user's join is pushed (subscribers), and
// when a join is re-learned after a bus loss (relearn). Call it with h.mu
// held.
func (h *Hub) watchLocked(ws watchSet, conv string) bool {
	if _, ok := ws[conv]; ok {
		return false
	}
	ws[conv] = struct{}{}
	h.watch[conv]++
	return h.watch[conv] == 1
}

// watchFor makes every subscribed socket of users watch conv, and
// declares conv when it is newly watched here.
func (h *Hub) watchFor(conv string, users ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, u := range users {
		for _, ws := range h.subs[u] {
			if h.watchLocked(ws, conv) {
				h.declareLocked(parley.Interest{Watch: []string{conv}})
			}
		}
	}
}

// unwatchLocked counts one socket less watching conv, and declares conv
// no longer watched here when it was the last. Call it with h.mu held.
func (h *Hub) unwatchLocked(conv string) {
	if h.watch[conv] <= 1 {
		delete(h.watch, conv)
		h.declareLocked(parley.Interest{Unwatch: []string{conv}})
	} else {
		h.watch[conv]--
	}
}

// declareLocked hands an interest change to the bus. Call it with h.mu
// held.
func (h *Hub) declareLocked(in parley.Interest) {
	if h.bus != nil && !in.Empty() {
		h.bus.Interest(in)
	}
}
