package gateway

// IndexConsistent reports whether the hub's per-user socket index lists
// exactly its open sockets, each under its user, with no empty sets.
func IndexConsistent(h *Hub) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for u, set := range h.byUser {
		if len(set) == 0 {
			return false
		}
		for c := range set {
			if _, open := h.conns[c]; !open || c.p.User != u {
				return false
			}
			n++
		}
	}
	return n == len(h.conns)
}

// SocketsOf reports how many open sockets the index holds for user.
func SocketsOf(h *Hub, user string) int { return len(h.socketsOf(user)) }

// RequestWorkers reports how many pooled request goroutines run now.
func RequestWorkers(h *Hub) int64 { return h.reqs.live.Load() }
