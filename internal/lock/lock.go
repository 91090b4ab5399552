// Package lock holds the lab's lock strategies, from the naive to the robust,
// behind one small interface, each registered under the name users type in
// the API's "lock" field, the load harness and the web page.
//
// A strategy is chosen to be compared, not only to be used: the naive ones are
// here on purpose, each with a test in this package that makes its flaw happen.
package lock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Outcomes a caller branches on.
var (
	// ErrNotObtained: the lock was held by someone else for as long as the
	// caller was willing to wait.
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrNotHeld: a release or renewal found the lock gone or held by another
	// owner, so it changed nothing.
	ErrNotHeld = errors.New("lock: not held")
	// ErrUnknownStrategy: no strategy is registered under that name.
	ErrUnknownStrategy = errors.New("lock: unknown strategy")
	// ErrUnsupported: the strategy cannot run on the backends it was given
	// (for example the mysql strategy on the embedded SQLite store).
	ErrUnsupported = errors.New("lock: unsupported on this backend")
	// ErrCrashed: an injected fault (Fault.CrashBeforeExpire) stopped the
	// acquisition half-way, as if the process had died there. Whatever the
	// strategy had written before that point stays in Redis.
	ErrCrashed = errors.New("lock: crashed (injected fault)")
)

// Options tune one acquisition.
type Options struct {
	// TTL is the lease: how long the lock outlives a holder that never
	// releases it. Strategies without expiry ignore it. Default: 5s.
	TTL time.Duration
	// Wait is how long Acquire keeps trying while the lock is held. Zero
	// fails fast with ErrNotObtained after one attempt. Default: 0.
	Wait time.Duration
	// Fault injects the failures the lab demonstrates. Default: none.
	Fault Fault
}

// Fault makes a strategy fail the way real deployments do, on demand, so
// that a test or a lab request can show the flaw every time. Strategies that
// the fault does not concern ignore it. A holder paused inside its critical
// section (a GC pause, a slow call) needs no hook: the caller simply sleeps
// while it holds the lease.
type Fault struct {
	// CrashBeforeExpire makes setnx-expire return ErrCrashed after SETNX
	// and before EXPIRE, as if the process died between the two commands:
	// the key stays, with no TTL. Default: false.
	CrashBeforeExpire bool
	// ClockSkew runs this client's clock ahead by that much; getset judges
	// expiry by it. Default: 0.
	ClockSkew time.Duration
}

// DefaultTTL is the lease used when Options.TTL is zero.
const DefaultTTL = 5 * time.Second

func (o Options) ttl() time.Duration {
	if o.TTL <= 0 {
		return DefaultTTL
	}
	return o.TTL
}

// Locker acquires locks by key. Implementations are safe for concurrent use.
type Locker interface {
	Acquire(ctx context.Context, key string, opt Options) (Lease, error)
}

// Lease is one held lock. Leases may offer more through the package's
// functions Lost and Abandon.
type Lease interface {
	// Release gives the lock up. It returns ErrNotHeld when the strategy can
	// tell that the lock was no longer this holder's (it expired, or someone
	// else holds it now); strategies that cannot tell return nil.
	Release(ctx context.Context) error
	// Token is a fencing token that grows with every acquisition of the key,
	// or 0 when the strategy issues none. A store that remembers the highest
	// token it has seen can refuse writes from a holder whose lease expired.
	Token() uint64
}

// Lost returns a channel that is closed when the lease's background renewal
// finds that the lock is no longer held (it expired or was taken), so that
// the holder can stop work it may no longer do safely. Only leases that renew
// themselves (watchdog) can tell; for every other lease Lost returns nil, a
// channel that never fires, and after Abandon nobody watches any more.
//
// A holder checks it before each step that needs the lock:
//
//	select {
//	case <-lock.Lost(lease):
//		return lock.ErrNotHeld
//	default:
//	}
//
// or cancels the context its work runs under:
//
//	ctx, cancel := context.WithCancelCause(ctx)
//	defer cancel(nil) // also ends the goroutine below
//	go func() {
//		select {
//		case <-lock.Lost(lease):
//			cancel(lock.ErrNotHeld)
//		case <-ctx.Done():
//		}
//	}()
func Lost(l Lease) <-chan struct{} {
	if r, ok := l.(interface{ Lost() <-chan struct{} }); ok {
		return r.Lost()
	}
	return nil
}

// Abandon stops a lease's background renewal without releasing the lock,
// and waits until the renewal has stopped: it simulates a holder process
// that crashed, whose lock now lives only as long as its TTL. For leases
// without renewal it does nothing. The lease must not be used afterwards.
func Abandon(l Lease) {
	if a, ok := l.(interface{ Abandon() }); ok {
		a.Abandon()
	}
}

type ownerKey struct{}

// WithOwner returns a context whose lock acquisitions all belong to the
// owner id, for strategies that know owners (reentrant): the same owner may
// acquire a lock it already holds, and must release it as often. Go has no
// thread identity to play that part, so the identity travels with the
// request. Without WithOwner every Acquire is a fresh owner.
func WithOwner(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ownerKey{}, id)
}

func ownerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok && id != ""
}

// retry calls try until it obtains the lock, fails, or wait runs out. It
// spins with jittered exponential backoff, from minBackoff doubling to
// maxBackoff, so that waiters do not retry in lockstep.
func retry(ctx context.Context, wait time.Duration, try func() (bool, error)) error {
	ok, err := try()
	if err != nil || ok {
		return err
	}
	if wait <= 0 {
		return ErrNotObtained
	}
	timer := newStoppedTimer()
	defer timer.Stop()
	return spin(ctx, time.Now().Add(wait), minBackoff, nil, timer, try)
}

// spin sleeps on timer, then calls try, until try obtains the lock or
// fails, or the deadline passes. Each sleep is the backoff, jittered, and
// ends early when wake fires; the backoff doubles after each attempt up to
// maxBackoff. It leaves timer stopped or fired.
func spin(ctx context.Context, deadline time.Time, backoff time.Duration, wake <-chan struct{}, timer *time.Timer, try func() (bool, error)) error {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return ErrNotObtained
		}
		timer.Reset(min(jitter(backoff), left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		case <-wake:
			timer.Stop()
		case <-timer.C:
		}
		if ok, err := try(); err != nil || ok {
			return err
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// newStoppedTimer returns a timer for spin. Since Go 1.23 a stopped timer
// delivers no stale tick, so spin may Reset it without draining.
func newStoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// jitter returns a sleep uniformly in [d/2, d]: full jitter would let some
// waiters poll again almost at once.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
