package upload

import (
	"context"
	"sync"

	"github.com/tus/tusd/v2/pkg/handler"
)

// locker is a handler.Locker in this process's memory: one request at a
// time per upload. A request that wants a held lock asks the holder to let
// go (an older PATCH, whose client has usually gone, stops reading) and
// waits for it. It does not lock across gateways: two gateways sharing
// the staging directory rely on a client sending one request of an upload
// at a time (every tus client does).
type locker struct {
	mu   sync.Mutex
	held map[string]*holder
}

type holder struct {
	released      chan struct{}
	requestUnlock func()
}

func newLocker() *locker { return &locker{held: map[string]*holder{}} }

func (l *locker) NewLock(id string) (handler.Lock, error) { return &lock{l: l, id: id}, nil }

type lock struct {
	l  *locker
	id string
	me *holder
}

// Lock implements handler.Lock.
func (k *lock) Lock(ctx context.Context, requestUnlock func()) error {
	for {
		k.l.mu.Lock()
		other, busy := k.l.held[k.id]
		if !busy {
			k.me = &holder{released: make(chan struct{}), requestUnlock: requestUnlock}
			k.l.held[k.id] = k.me
			k.l.mu.Unlock()
			return nil
		}
		k.l.mu.Unlock()
		if other.requestUnlock != nil {
			other.requestUnlock()
		}
		select {
		case <-other.released:
		case <-ctx.Done():
			return handler.ErrLockTimeout
		}
	}
}

// Unlock implements handler.Lock.
func (k *lock) Unlock() error {
	k.l.mu.Lock()
	defer k.l.mu.Unlock()
	if k.me != nil && k.l.held[k.id] == k.me {
		delete(k.l.held, k.id)
		close(k.me.released)
		k.me = nil
	}
	return nil
}

// tryLock takes id's lock if nobody holds it, without asking a holder to
// let go (the sweep must never end a live upload).
func (l *locker) tryLock(id string) (unlock func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[id]; busy {
		return nil, false
	}
	k := &lock{l: l, id: id, me: &holder{released: make(chan struct{})}}
	l.held[id] = k.me
	return func() { k.Unlock() }, true
}
