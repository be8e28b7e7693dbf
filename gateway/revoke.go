package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Revocation. A token that stops working ends its sockets: at once on the
// gateway whose HTTP API logged it out (RevokeToken), at once on every
// gateway for an account notice (account: a disable, a logout elsewhere, a
// replaced install), and within Reauth for anything else (reauth).

// revokeWindow is how long a revocation is remembered for sockets that
// were mid-upgrade when it happened: far longer than an upgrade takes, the
// age of a cached token lookup included.
const revokeWindow = time.Minute

// revocations remembers when a token ("t:"+token) or a user ("u:"+user)
// was last revoked, for revokeWindow. A socket still being upgraded at
// that moment is in no snapshot of the registry yet. A revoker notes the
// revocation first and takes its snapshot after; an upgrade registers the
// socket first and asks (since) after: whichever comes second sees the
// other's step, so the socket is either in the revoker's snapshot or
// checked again as it registers.
type revocations struct {
	mu sync.Mutex
	at map[string]time.Time
}

// note records a revocation of key now, and forgets ones past the window.
func (r *revocations) note(key string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, at := range r.at {
		if now.Sub(at) > revokeWindow {
			delete(r.at, k)
		}
	}
	if r.at == nil {
		r.at = map[string]time.Time{}
	}
	r.at[key] = now
}

// since reports whether any of keys was revoked at or after t: a socket
// whose token was looked up at t may hold a principal that no longer
// stands.
func (r *revocations) since(t time.Time, keys ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if at, ok := r.at[k]; ok && !at.Before(t) {
			return true
		}
	}
	return false
}

// RevokeToken ends this gateway's sockets that use token, at once: the HTTP
// API calls it after a logout. Other gateways notice within Reauth.
func (h *Hub) RevokeToken(token string) {
	h.revoked.note("t:" + token)
	for _, c := range h.snapshot() {
		if c.token == token {
			c.revoke(parley.CodeUnauthenticated, parley.ErrBadToken.Msg)
		}
	}
}

// RevokeUser ends the sockets of user whose tokens no longer authenticate,
// on every gateway at once: the HTTP API calls it after disabling an
// account.
func (h *Hub) RevokeUser(user string) {
	h.Publish(parley.AccountNotice(user))
}

// account handles an account notice: cached lookups of the user's tokens
// are dropped, and the user's sockets are checked again now, off the
// bus goroutine.
func (h *Hub) account(user string) {
	if h.o.OnAccount != nil {
		h.o.OnAccount(user)
	}
	h.revoked.note("u:" + user)
	if mine := h.socketsOf(user); len(mine) > 0 {
		h.recheckSoon(mine)
	}
}

// checkLate checks c's token again, off the caller's goroutine, when its
// token or its user was revoked after the token was looked up (looked):
// the revoker's sweep may have missed c while it was being upgraded. Call
// it after registering c.
func (h *Hub) checkLate(c *conn, looked time.Time) {
	if h.revoked.since(looked, "t:"+c.token, "u:"+c.p.User) {
		h.recheckSoon([]*conn{c})
	}
}

// recheckSoon runs recheck of conns on a goroutine of the hub's.
func (h *Hub) recheckSoon(conns []*conn) {
	ctx := h.ctx()
	h.wg.Go(func() { h.recheck(ctx, conns) })
}

// reauth checks every socket's token again, one token at a time and each
// token once however many sockets share it, so the cost is spread and
// bounded: a socket whose token was logged out, whose install was replaced,
// or whose account was disabled is ended.
func (h *Hub) reauth(ctx context.Context) {
	h.recheck(ctx, h.snapshot())
}

// recheck checks the tokens of conns, each token once, and revokes the
// sockets whose token was refused.
func (h *Hub) recheck(ctx context.Context, conns []*conn) {
	verdict := map[string]error{}
	for _, c := range conns {
		err, seen := verdict[c.token]
		if !seen {
			actx, cancel := context.WithTimeout(ctx, h.timeout())
			_, err = h.store.Authenticate(actx, c.token)
			cancel()
			verdict[c.token] = err
		}
		switch code := parley.ErrorCode(err); code {
		case "":
		case parley.CodeUnauthenticated, parley.CodeStaleInstall:
			c.revoke(code, parley.ErrorMessage(err))
		default: // the store is unwell: keep the socket, try next round
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// revoke ends a socket whose token no longer authenticates: an error frame
// with the code (UNAUTHENTICATED or STALE_INSTALL) so the client knows not
// to reconnect with it, then close 1008. From then on it gets nothing.
func (c *conn) revoke(code parley.Code, msg string) {
	if c.revoked.Swap(true) {
		return
	}
	c.h.unsubscribe(c)
	c.h.stats.Revoked.Add(1)
	c.enqueue(&frame{b: wire.MarshalFrame(wire.Error(code, msg))})
	c.closeAfterFlush(websocket.StatusPolicyViolation, "token revoked")
}
