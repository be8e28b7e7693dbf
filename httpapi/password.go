package httpapi

import (
	"context"
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
