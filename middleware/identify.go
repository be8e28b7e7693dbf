package middleware

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// IdentifierOptions configure an Identifier. Zero values take the defaults.
type IdentifierOptions struct {
	// TTL is how long a lookup is reused (default 5s). Disabling a user
	// or logging out forgets that user's entries at once (ForgetUser);
	// other changes show within TTL.
	TTL time.Duration
	// MaxEntries bounds the cache (default 100,000 tokens).
	MaxEntries int
	// Timeout bounds one store lookup when the caller's context has no
	// deadline (default 2s): a slow store answers UNAVAILABLE, it does not
	// hang the request.
	Timeout time.Duration
	Now     func() time.Time
}

// Identifier resolves tokens to principals through a bounded, short-lived
// cache in front of the store's Authenticate. Valid principals and the
// definite refusals (UNAUTHENTICATED, STALE_INSTALL) are cached. A lookup
// that could not be made (the store failed or timed out) is UNAVAILABLE,
// never a refusal: 401 is terminal, and a client that obeys it drops a
// request that was never judged. It is not cached, so the next
// request asks again.
type Identifier struct {
	auth func(context.Context, string) (parley.Principal, error)
	o    IdentifierOptions

	mu sync.Mutex
	m  map[[32]byte]identity
	// byUser indexes the valid entries of m by user, so that forgetting a
	// user (every login that replaces an install, every logout and
	// disable, on every gateway) costs that user's tokens, not the cache.
	byUser map[string]map[[32]byte]struct{}
	// forgets counts ForgetUser and ForgetToken calls. A lookup caches its
	// answer only if none happened while it asked the store: otherwise a
	// principal read just before a disable would be cached after the
	// disable's ForgetUser, and stay valid for a whole TTL.
	forgets uint64
}

type identity struct {
	p       parley.Principal
	code    parley.Code // "" when p is valid
	expires time.Time
	looked  time.Time // when the store lookup began (wall clock)
}

// NewIdentifier returns an Identifier over auth (the store's Authenticate).
func NewIdentifier(auth func(context.Context, string) (parley.Principal, error), o IdentifierOptions) *Identifier {
	if o.TTL <= 0 {
		o.TTL = 5 * time.Second
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Identifier{auth: auth, o: o, m: map[[32]byte]identity{}, byUser: map[string]map[[32]byte]struct{}{}}
}

// Identify returns the principal of token, or the code that refuses it:
// UNAUTHENTICATED (no token, or one the store does not know, revoked or
// disabled) or STALE_INSTALL; or UNAVAILABLE when the store could not
// answer (the identity is then unknown, not refused).
func (i *Identifier) Identify(ctx context.Context, token string) (parley.Principal, parley.Code) {
	p, code, _ := i.Lookup(ctx, token)
	return p, code
}

// Lookup is Identify that also says when the answer was read from the
// store (for a cached answer, when that lookup began): a revocation after
// that moment may not be reflected in it.
func (i *Identifier) Lookup(ctx context.Context, token string) (parley.Principal, parley.Code, time.Time) {
	looked := time.Now()
	if token == "" || parley.CheckTokenShape(token) != nil {
		return parley.Principal{}, parley.CodeUnauthenticated, looked
	}
	key := sha256.Sum256([]byte(token))
	now := i.o.Now()
	i.mu.Lock()
	e, ok := i.m[key]
	forgets := i.forgets
	i.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.p, e.code, e.looked
	}
	if _, ok := ctx.Deadline(); !ok { // the caller's deadline (timeouts.identity) wins
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, i.o.Timeout)
		defer cancel()
	}
	p, err := i.auth(ctx, token)
	code := parley.ErrorCode(err)
	switch code {
	case "", parley.CodeUnauthenticated, parley.CodeStaleInstall:
		i.put(key, identity{p: p, code: code, expires: now.Add(i.o.TTL), looked: looked}, forgets)
		return p, code, looked
	default: // the lookup could not be made: an outage, not a verdict; not cached
		return parley.Principal{}, parley.CodeUnavailable, looked
	}
}

// put caches e unless a Forget happened since the lookup began (forgets).
func (i *Identifier) put(key [32]byte, e identity, forgets uint64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.forgets != forgets {
		return
	}
	if _, ok := i.m[key]; ok {
		i.deleteLocked(key)
	}
	for len(i.m) >= i.o.MaxEntries {
		i.evict(i.o.Now())
	}
	i.m[key] = e
	if u := e.p.User; u != "" {
		set := i.byUser[u]
		if set == nil {
			set = map[[32]byte]struct{}{}
			i.byUser[u] = set
		}
		set[key] = struct{}{}
	}
}

// deleteLocked drops one entry and its index record.
func (i *Identifier) deleteLocked(key [32]byte) {
	e, ok := i.m[key]
	if !ok {
		return
	}
	delete(i.m, key)
	if set := i.byUser[e.p.User]; set != nil {
		delete(set, key)
		if len(set) == 0 {
			delete(i.byUser, e.p.User)
		}
	}
}

// evictSample is how many entries one eviction looks at.
const evictSample = 8

// evict frees at least one slot of a full cache: it drops the expired
// entries among a few it looks at (map order is random), or, when all of
// them are live, the first of them; an evicted entry is looked up again
// when needed. It never scans the whole cache: under the lock, at 100,000
// entries, that took milliseconds per insert, which a flood of random
// tokens (each one a new entry) could repeat at will.
func (i *Identifier) evict(now time.Time) {
	var first [32]byte
	n := 0
	freed := false
	for k, e := range i.m {
		if n == 0 {
			first = k
		}
		if !now.Before(e.expires) {
			i.deleteLocked(k)
			freed = true
		}
		if n++; n == evictSample {
			break
		}
	}
	if !freed {
		i.deleteLocked(first)
	}
}

// ForgetUser drops the cached lookups of user's tokens: after a disable or
// a logout they are asked of the store again at once.
func (i *Identifier) ForgetUser(user string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.forgets++
	for k := range i.byUser[user] {
		delete(i.m, k)
	}
	delete(i.byUser, user)
}

// ForgetToken drops one token's cached lookup.
func (i *Identifier) ForgetToken(token string) {
	key := sha256.Sum256([]byte(token))
	i.mu.Lock()
	i.forgets++
	i.deleteLocked(key)
	i.mu.Unlock()
}

// Len reports the cached entries (tests).
func (i *Identifier) Len() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.m)
}

// indexConsistent reports whether the user index lists exactly the
// cached entries that hold a principal, each under its user (tests).
func (i *Identifier) indexConsistent() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := 0
	for u, set := range i.byUser {
		if len(set) == 0 {
			return false
		}
		for k := range set {
			if e, ok := i.m[k]; !ok || e.p.User != u {
				return false
			}
			n++
		}
	}
	for _, e := range i.m {
		if e.p.User != "" {
			n--
		}
	}
	return n == 0
}

// identify resolves the caller without reading the body; it never rejects
// (authorize does: 401 for a refused identity, 503 for one the store could
// not establish).
func (c *Chain) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := parley.Caller{Token: wire.SessionToken(r, c.SecureCookie)}
		cfg := c.Config()
		caller.Addr = ClientAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), cfg.TrustedProxies())
		if c.Identifier != nil {
			ictx, cancel := context.WithTimeout(r.Context(), cfg.IdentityTimeout())
			caller.Principal, caller.Code, caller.Looked = c.Identifier.Lookup(ictx, caller.Token)
			cancel()
		} else {
			caller.Code = parley.CodeUnauthenticated
		}
		if caller.Code != "" {
			caller.Principal = parley.Principal{}
		}
		caller.Known = caller.Code == ""
		if caller.Known {
			NoteUser(r.Context(), caller.Principal.User)
		}
		ctx := context.WithValue(parley.NewContextWithCaller(r.Context(), caller), configKey{}, cfg)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ClientAddr returns the address of the client that made a request: the
// peer address, unless the peer is a trusted proxy. Then X-Forwarded-For is
// read from its last hop backwards, skipping trusted proxies: the first
// address a trusted proxy appended that is not itself a trusted proxy is
// the client. Hops to the left of it were written by the client and are
// never believed (the first hop is spoofable). An unparsable
// hop stops the walk at the trusted proxy that passed it on. A peer that is
// not an address (host:port, or a bare address) yields the zero address.
func ClientAddr(remoteAddr string, xff []string, trusted []netip.Prefix) netip.Addr {
	peer := parseHop(remoteAddr)
	if !peer.IsValid() || !isTrusted(peer, trusted) {
		return peer
	}
	addr := peer
	for i := len(xff) - 1; i >= 0; i-- {
		hops := strings.Split(xff[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			hop := parseHop(strings.TrimSpace(hops[j]))
			if !hop.IsValid() {
				return addr
			}
			addr = hop
			if !isTrusted(hop, trusted) {
				return hop
			}
		}
	}
	return addr
}

// parseHop parses "addr", "addr:port" or "[v6]:port".
func parseHop(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap()
	}
	return netip.Addr{}
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
