package httpapi

import (
	"context"
	"net/http"
	"runtime"
	"time"

	"github.com/parleychat/parley"
)

// PasswordGate caps how many password hashes (argon2id: about 19 MiB and
// one core for tens of milliseconds each) run at once in this process, so
// a burst of logins cannot take the server's CPU and memory. Every route
// that checks or sets a password holds a slot while it does.
type PasswordGate struct {
	slots chan struct{}
}

// DefaultPasswordHashes is the size of a gate built with n <= 0: twice
// GOMAXPROCS.
func DefaultPasswordHashes() int { return 2 * runtime.GOMAXPROCS(0) }

// NewPasswordGate returns a gate of n slots (n <= 0: DefaultPasswordHashes).
func NewPasswordGate(n int) *PasswordGate {
	if n <= 0 {
		n = DefaultPasswordHashes()
	}
	return &PasswordGate{slots: make(chan struct{}, n)}
}

// errHashBusy answers a request that waited too long for a slot: retryable.
var errHashBusy = parley.Errorf(parley.CodeUnavailable, "too many password checks at once; retry after Retry-After")

// Acquire takes a slot, waiting at most wait (and no longer than ctx);
// release gives it back. A wait that runs out is UNAVAILABLE.
func (g *PasswordGate) Acquire(ctx context.Context, wait time.Duration) (release func(), err error) {
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	case <-t.C:
		return nil, errHashBusy
	case <-ctx.Done():
		return nil, errHashBusy
	}
}

func (g *PasswordGate) release() { <-g.slots }

// InUse reports how many slots are taken.
func (g *PasswordGate) InUse() int { return len(g.slots) }

// hashGate is a PasswordGate with the wait a request may spend for a slot.
type hashGate struct {
	gate *PasswordGate
	wait time.Duration // 0: the store timeout in force
	calls
}

// acquire waits for a hash slot for r (UNAVAILABLE when it waits too
// long) and returns its release.
func (g hashGate) acquire(ctx context.Context, r *http.Request) (release func(), err error) {
	wait := g.wait
	if wait <= 0 {
		wait = g.config(r).StoreTimeout()
	}
	return g.gate.Acquire(ctx, wait)
}
