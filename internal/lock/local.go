package lock

import (
	"context"
	"sync"
	"time"
)

// Local is an in-process mutex per key. It is correct inside one process and
// wrong as soon as two processes serve the same stock: each has its own
// mutexes, so both enter the critical section at once.
type Local struct {
	mu   sync.Mutex
	keys map[string]chan struct{} // a channel of capacity 1 is a mutex that a select can abandon
}

var _ Locker = (*Local)(nil)

// NewLocal returns an empty set of in-process mutexes.
func NewLocal() *Local { return &Local{keys: make(map[string]chan struct{})} }

func (l *Local) slot(key string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.keys[key]
	if !ok {
		ch = make(chan struct{}, 1)
		l.keys[key] = ch
	}
	return ch
}

// Acquire takes the key's mutex, waiting up to opt.Wait. Options.TTL is
// ignored: an in-process mutex dies with its process.
func (l *Local) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	ch := l.slot(key)
	select {
	case ch <- struct{}{}:
		return &localLease{ch: ch}, nil
	default:
	}
	if opt.Wait <= 0 {
		return nil, ErrNotObtained
	}
	timer := time.NewTimer(opt.Wait)
	defer timer.Stop()
	select {
	case ch <- struct{}{}:
		return &localLease{ch: ch}, nil
	case <-timer.C:
		return nil, ErrNotObtained
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

type localLease struct {
	once sync.Once
	ch   chan struct{}
}

func (l *localLease) Release(context.Context) error {
	err := ErrNotHeld
	l.once.Do(func() { <-l.ch; err = nil })
	return err
}

func (l *localLease) Token() uint64 { return 0 }
