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

// watchLocked counts one more socket watching conv, and reports whether
// conv is newly watched here (the caller declares it).
func (h *Hub) watchLocked(conv string) bool {
	h.watch[conv]++
	return h.watch[conv] == 1
}

// declareLocked hands an interest change to the bus. Call it with h.mu
// held.
func (h *Hub) declareLocked(in parley.Interest) {
	if h.bus != nil && !in.Empty() {
		h.bus.Interest(in)
	}
}
